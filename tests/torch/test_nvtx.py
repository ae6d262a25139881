# SPDX-License-Identifier: Apache-2.0
"""The NVTX mirror: the same names, nested the same way, as ranges in the ``brickscope`` domain."""

from __future__ import annotations

import sys
import types

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (make test installs the CPU build)")

from models import TinyGPT, WithRaising, tokens  # noqa: E402

import brickscope.torch as bt  # noqa: E402
from brickscope.testing import capture_spans  # noqa: E402


class FakeDomain:
    def __init__(self, name: str) -> None:
        self.name = name
        self.log: list[str] = []

    def get_event_attributes(self, message: str, color: str) -> tuple[str, str]:
        return (message, color)

    def push_range(self, attributes: tuple[str, str]) -> None:
        self.log.append(f"push {attributes[0]}")

    def pop_range(self) -> None:
        self.log.append("pop")


@pytest.fixture(name="fake_nvtx")
def _fake_nvtx(monkeypatch):
    domains: dict[str, FakeDomain] = {}
    module = types.ModuleType("nvtx")
    module.get_domain = lambda name: domains.setdefault(name, FakeDomain(name))
    monkeypatch.setitem(sys.modules, "nvtx", module)
    return domains


class TestNvtxMirror:
    def test_ranges_nest_like_the_bricks(self, fake_nvtx):
        """One push per brick or layer, in call order, each popped before its parent's."""
        model = TinyGPT(blocks=1)
        with capture_spans(), bt.instrument(model):
            model(tokens())
        domain = fake_nvtx["brickscope"]
        assert domain.log == [
            "push TinyGPT",
            "push emb", "pop",
            "push layer 0",
            "push ln", "pop",
            "push attn", "push attn.qkv", "pop", "push attn.proj", "pop", "pop",
            "push mlp", "push mlp.up", "pop", "push mlp.down", "pop", "pop",
            "pop",
            "push head", "pop",
            "pop",
        ]  # fmt: skip

    def test_a_raising_forward_pops_its_ranges(self, fake_nvtx):
        """An exception inside a forward still pops every range it pushed."""
        model = WithRaising()
        model.mlp.error = KeyboardInterrupt()
        with capture_spans(), bt.instrument(model):
            with pytest.raises(KeyboardInterrupt):
                model(torch.zeros(2, 8))
        log = fake_nvtx["brickscope"].log
        assert log.count("pop") == sum(entry.startswith("push") for entry in log) == 4

    def test_nvtx_false_and_no_package_push_nothing(self, fake_nvtx, monkeypatch):
        """nvtx=False never touches NVTX; "auto" without the package neither."""
        with capture_spans(), bt.instrument(model := TinyGPT(blocks=1), nvtx=False):
            model(tokens())
        assert fake_nvtx == {}
        monkeypatch.setitem(sys.modules, "nvtx", None)
        with capture_spans(), bt.instrument(model):
            model(tokens())
        assert fake_nvtx == {}


class TestRealNvtxPackage:
    def test_the_nvtx_package_runs_without_a_gpu(self):
        """With the real nvtx package and no profiler attached, ranges are no-ops and the model runs."""
        pytest.importorskip("nvtx", reason="the nvtx package is not installed")
        model = TinyGPT(blocks=1)
        with capture_spans() as captured, bt.instrument(model, nvtx=True):
            out = model(tokens())
            assert len(captured.bricks()) == 10  # model, emb, head; ln; attn + 2 linears; mlp + 2 linears
        assert out.shape == (2, 5, 16)
