# SPDX-License-Identifier: Apache-2.0
"""brickscope quickstart: a small transformer decoder in numpy, instrumented end to end.

Every decode step is a ``step``; every transformer layer a ``layer``; every op
(rms_norm, qkv_projection, rope, attention, ffn...) a ``brick``; the matmuls and
elementwise passes inside them ``kernel`` scopes with launch-like metadata. On
this CPU-only example the clock is the host clock; on a GPU the same code gets
CUDA-event timing (``clock="auto"``).

Run it with ``make demo`` or::

    python examples/quickstart.py --out out --steps 8

It prints the category report of the steps after warm-up (``--warmup``, 2 by
default: the first steps pay one-off costs; ``--no-report`` leaves it to
``brickscope report``, as ``make demo`` does) and writes, when the exporters are installed,
``out/trace.pftrace`` (open in https://ui.perfetto.dev), ``out/profile.folded``
(flamegraph.pl, inferno) and ``out/profile.speedscope.json`` (https://speedscope.app).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import brickscope as bs


def gemv_work(x: np.ndarray, weight: np.ndarray) -> dict[str, int]:
    """What a vector-matrix product does, for the report's memory and roofline sections:
    2 FLOPs per weight, and the weight, input and output bytes it moves."""
    return {"flops": 2 * weight.size, "bytes": weight.nbytes + x.nbytes + weight.shape[1] * weight.itemsize}


class TinyDecoder:
    """A pre-norm decoder-only transformer with a KV cache; weights are random."""

    def __init__(self, vocab: int = 512, dim: int = 128, heads: int = 4, layers: int = 4, ffn: int = 384) -> None:
        rng = np.random.default_rng(0)
        scale = 1 / np.sqrt(dim)
        self.dim, self.heads, self.head_dim = dim, heads, dim // heads
        self.embedding = rng.standard_normal((vocab, dim)).astype(np.float32) * scale
        self.layers = [
            {
                "attn_norm": np.ones(dim, np.float32),
                "wqkv": rng.standard_normal((dim, 3 * dim)).astype(np.float32) * scale,
                "wo": rng.standard_normal((dim, dim)).astype(np.float32) * scale,
                "ffn_norm": np.ones(dim, np.float32),
                "w_gate": rng.standard_normal((dim, ffn)).astype(np.float32) * scale,
                "w_up": rng.standard_normal((dim, ffn)).astype(np.float32) * scale,
                "w_down": rng.standard_normal((ffn, dim)).astype(np.float32) / np.sqrt(ffn),
            }
            for _ in range(layers)
        ]
        self.final_norm = np.ones(dim, np.float32)
        self.cache: list[tuple[list[np.ndarray], list[np.ndarray]]] = [([], []) for _ in range(layers)]

    @staticmethod
    def rms_norm(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        with bs.brick("rms_norm", elements=x.size):
            with bs.kernel("rms_norm_fwd", grid=(x.shape[0],), block=(128,)):
                return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * weight

    def rope(self, q: np.ndarray, k: np.ndarray, position: int) -> tuple[np.ndarray, np.ndarray]:
        with bs.brick("rope", elements=q.size + k.size):
            half = self.head_dim // 2
            freqs = position / (10000 ** (np.arange(half, dtype=np.float32) / half))
            cos, sin = np.cos(freqs), np.sin(freqs)

            def rotate(t: np.ndarray) -> np.ndarray:
                t = t.reshape(self.heads, 2, half)
                return np.concatenate([t[:, 0] * cos - t[:, 1] * sin, t[:, 0] * sin + t[:, 1] * cos], -1).ravel()

            with bs.kernel("rope_rotate", grid=(self.heads,), block=(half,)):
                return rotate(q), rotate(k)

    def attention(self, x: np.ndarray, layer: dict, cache: tuple, position: int) -> np.ndarray:
        with bs.brick("qkv_projection", elements=x.size, **gemv_work(x, layer["wqkv"])):
            with bs.kernel("gemv_qkv", grid=(3 * self.dim // 64,), block=(64,)):
                q, k, v = np.split(x @ layer["wqkv"], 3)
        q, k = self.rope(q, k, position)
        with bs.brick("kv_cache_update", elements=k.size + v.size):
            cache[0].append(k)
            cache[1].append(v)
            keys, values = np.stack(cache[0]), np.stack(cache[1])
        heads, head_dim = self.heads, self.head_dim
        with bs.brick("attention_score", elements=len(keys) * heads):
            with bs.kernel("qk_dot", grid=(heads, len(keys)), block=(head_dim,)):
                scores = np.einsum("hd,thd->ht", q.reshape(heads, head_dim), keys.reshape(-1, heads, head_dim))
                scores /= np.sqrt(head_dim)
        with bs.brick("attention_softmax", elements=scores.size):
            with bs.kernel("softmax", grid=(heads,), block=(128,)):
                weights = np.exp(scores - scores.max(-1, keepdims=True))
                weights /= weights.sum(-1, keepdims=True)
        with bs.brick("attention_output", elements=x.size):
            with bs.kernel("pv_gemv", grid=(heads,), block=(head_dim,)):
                context = np.einsum("ht,thd->hd", weights, values.reshape(-1, heads, head_dim)).ravel()
        with bs.brick("output_projection", elements=x.size):
            with bs.kernel("gemv_o", grid=(self.dim // 64,), block=(64,)):
                return context @ layer["wo"]

    @staticmethod
    def ffn(x: np.ndarray, layer: dict) -> np.ndarray:
        with bs.brick("ffn_gate", elements=layer["w_gate"].shape[1], **gemv_work(x, layer["w_gate"])):
            with bs.kernel("gemv_gate", grid=(layer["w_gate"].shape[1] // 64,), block=(64,)):
                gate = x @ layer["w_gate"]
        with bs.brick("ffn_up", elements=layer["w_up"].shape[1], **gemv_work(x, layer["w_up"])):
            with bs.kernel("gemv_up", grid=(layer["w_up"].shape[1] // 64,), block=(64,)):
                up = x @ layer["w_up"]
        with bs.brick("activation", elements=gate.size):
            with bs.kernel("silu_mul", grid=(gate.size // 128,), block=(128,)):
                hidden = gate / (1 + np.exp(-gate)) * up
        with bs.brick("ffn_down", elements=x.size, **gemv_work(hidden, layer["w_down"])):
            with bs.kernel("gemv_down", grid=(x.size // 64,), block=(64,)):
                return hidden @ layer["w_down"]

    def decode_step(self, token: int, position: int, rng: np.random.Generator) -> int:
        with bs.brick("embedding", elements=1):
            x = self.embedding[token].copy()
        for index, (layer, cache) in enumerate(zip(self.layers, self.cache)):
            with bs.layer(index):
                h = self.attention(self.rms_norm(x, layer["attn_norm"]), layer, cache, position)
                with bs.brick("residual", elements=x.size):
                    x = x + h
                h = self.ffn(self.rms_norm(x, layer["ffn_norm"]), layer)
                with bs.brick("residual", elements=x.size):
                    x = x + h
        x = self.rms_norm(x, self.final_norm)
        with bs.brick("lm_head", elements=self.embedding.shape[0]):
            with bs.kernel("gemv_lm_head", grid=(self.embedding.shape[0] // 64,), block=(64,)):
                logits = self.embedding @ x
        return self.sample(logits, rng)

    @staticmethod
    @bs.brick("sampling", elements=1)
    def sample(logits: np.ndarray, rng: np.random.Generator) -> int:
        probs = np.exp(logits - logits.max())
        probs /= probs.sum()
        return int(rng.choice(len(probs), p=probs))


def add_exporters(provider: TracerProvider, out: Path) -> list[str]:
    """Attach whichever brickscope exporters are installed; returns what they will write."""
    written = []
    try:
        from brickscope.exporter.perfetto import PerfettoSpanExporter
    except ImportError:
        pass
    else:
        path = out / "trace.pftrace"
        provider.add_span_processor(BatchSpanProcessor(PerfettoSpanExporter(path, overwrite=True)))
        written.append(f"{path}  (open in https://ui.perfetto.dev)")
    try:
        from brickscope.exporter.flamegraph import FlamegraphSpanExporter
    except ImportError:
        pass
    else:
        folded, speedscope = out / "profile.folded", out / "profile.speedscope.json"
        provider.add_span_processor(
            BatchSpanProcessor(
                FlamegraphSpanExporter(folded, weight="host", speedscope_path=speedscope, overwrite=True)
            )
        )
        written.append(f"{folded}  (flamegraph.pl / inferno-flamegraph)")
        written.append(f"{speedscope}  (https://speedscope.app)")
    return written


def warm_report(session: bs.Session, warmup: int, steps: int) -> str:
    """The report of the steps after warm-up: the first ones pay one-off costs that would
    dominate the totals (the table's p50 and p99 show what a typical step costs)."""
    from brickscope import analysis

    if warmup <= 0 or warmup >= steps:
        return session.report()
    report = analysis.analyse(analysis.load(session), steps=(warmup, None))
    return f"(steps 0-{warmup - 1} are warm-up: left out below; --warmup 0 keeps them)\n" + analysis.render(report, "text")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out"), help="directory for the trace files")
    parser.add_argument("--steps", type=int, default=8, help="decode steps to run")
    parser.add_argument("--clock", default="auto", choices=("auto", "cuda", "host"))
    parser.add_argument(
        "--warmup", type=int, default=2, help="first steps left out of the report (caches, allocations, JIT)"
    )
    parser.add_argument(
        "--no-report", action="store_true",
        help="do not print the report (make demo prints it once, from the trace file, with brickscope report)",
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    # Under opentelemetry-instrument (or any app that set one up) use the global SDK
    # provider, so the bricks also go wherever it exports; otherwise make our own.
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider(resource=Resource.create({"service.name": "brickscope-quickstart"}))
    written = add_exporters(provider, args.out)
    session = bs.configure(provider, clock=args.clock)

    model, rng = TinyDecoder(), np.random.default_rng(1)
    tracer = provider.get_tracer("quickstart")
    token, tokens = 1, []
    with tracer.start_as_current_span("generate"):
        for position in range(args.steps):
            with bs.step(position, tokens=1):  # tokens: the report's tokens/s
                token = model.decode_step(token, position, rng)
            tokens.append(token)

    print(f"generated tokens: {tokens}")
    print(f"clock: {session.clock}" + (f" ({session.clock_fallback_reason})" if session.clock_fallback_reason else ""))
    if not args.no_report:
        print()
        print(warm_report(session, args.warmup, args.steps))
    stats = session.stats()
    session.shutdown()
    provider.shutdown()
    print()
    print(f"spans emitted: {stats['spans_emitted']}, forced syncs: {stats['forced_syncs']}, "
          f"GPU timing errors: {stats['gpu_timing_errors']}")
    for line in written:
        print(f"wrote {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
