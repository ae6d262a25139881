# SPDX-License-Identifier: Apache-2.0
"""register_kernel_source: a stable 64-bit hash on the kernel's spans, the registry on the resource."""

from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import brickscope as bs
from brickscope.testing import capture_spans
from brickscope.trace import attributes as A

PTX = ".visible .entry gemm_fwd() { ret; }"
#: BLAKE2b-64 of PTX's UTF-8 bytes: written down once, so a change of hash function fails here.
PTX_HASH = 0xAA6D5C0C1A6F0EF3


def registry(span) -> dict:
    return json.loads(span.resource.attributes[A.KERNEL_SOURCES])


class TestRegisterKernelSource:
    def test_hash_is_stable_and_depends_only_on_the_bytes(self):
        assert bs.register_kernel_source("gemm_fwd", PTX) == PTX_HASH
        assert bs.register_kernel_source("other_name", PTX.encode()) == PTX_HASH
        assert bs.register_kernel_source("gemm_fwd", PTX + " ") != PTX_HASH

    def test_kernel_spans_carry_the_hash_and_the_resource_the_registry(self):
        bs.register_kernel_source("gemm_fwd", PTX, kind="ptx", path="kernels/gemm.ptx")
        with capture_spans() as captured:
            with bs.brick("gemm"):
                with bs.kernel("gemm_fwd", grid=4, block=128):
                    pass
                with bs.kernel("unregistered"):
                    pass
            kernels = {s.name: s for s in captured.kernels()}
        assert kernels["gemm_fwd"].attributes[A.KERNEL_SOURCE_HASH] == "aa6d5c0c1a6f0ef3"
        assert A.KERNEL_SOURCE_HASH not in kernels["unregistered"].attributes
        assert registry(kernels["gemm_fwd"]) == {"aa6d5c0c1a6f0ef3": ["ptx", "gemm_fwd", "kernels/gemm.ptx"]}

    def test_registered_after_configure_reaches_later_spans(self):
        with capture_spans() as captured:
            with bs.kernel("k1"):
                pass
            captured.session.sync()
            digest = bs.register_kernel_source("k2", b"\x7fELF cubin bytes", kind="cubin")
            with bs.kernel("k2"):
                pass
            spans = {s.name: s for s in captured.kernels()}
        assert A.KERNEL_SOURCES not in spans["k1"].resource.attributes
        assert registry(spans["k2"]) == {f"{digest:016x}": ["cubin", "k2", ""]}
        assert spans["k2"].attributes[A.KERNEL_SOURCE_HASH] == f"{digest:016x}"

    @pytest.mark.parametrize("args, error", [
        (("", PTX), ValueError),
        (("k", PTX, "sass"), ValueError),
        (("k", 42), TypeError),
    ])  # fmt: skip
    def test_bad_arguments_raise_at_the_call(self, args, error):
        with pytest.raises(error):
            bs.register_kernel_source(*args)


def test_tree_sources_say_where_each_kernel_came_from(tmp_path, capsys):
    """The registry travels in a .pftrace and `brickscope tree --sources` prints it."""
    pytest.importorskip("brickscope.exporter.perfetto")
    from opentelemetry.sdk.trace import TracerProvider

    from brickscope.cli import main
    from brickscope.exporter.perfetto import PerfettoSpanExporter

    bs.register_kernel_source("gemm_fwd", PTX, kind="ptx", path="kernels/gemm.ptx")
    path = tmp_path / "t.pftrace"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(PerfettoSpanExporter(path)))
    with capture_spans(provider):
        with bs.step(0), bs.brick("gemm"), bs.kernel("gemm_fwd", grid=(4, 2), block=128, shared_mem_bytes=0):
            pass
    assert main(["tree", str(path), "--step", "0", "--sources", "-q"]) == 0
    out = capsys.readouterr().out
    assert "gemm_fwd <<<(4,2,1),(128,1,1)>>> smem=0 src=aa6d5c0c1a6f0ef3 (ptx gemm_fwd kernels/gemm.ptx)" in out
    assert out.endswith("kernel sources:\n  aa6d5c0c1a6f0ef3  ptx gemm_fwd kernels/gemm.ptx\n")
