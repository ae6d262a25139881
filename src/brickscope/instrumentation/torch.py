# SPDX-License-Identifier: Apache-2.0
"""Zero-code PyTorch instrumentation: ``opentelemetry-instrument python train.py``.

Example::

    pip install './[torch]' ./exporters/perfetto opentelemetry-instrumentation   # in the brickscope repository
    OTEL_PYTHON_TORCH_EXCLUDED_MODULES='*.dropout' opentelemetry-instrument \\
        --traces_exporter perfetto python train.py      # train.py is not changed

Registered under the ``opentelemetry_instrumentor`` entry point as ``torch``, with
the usual ``instruments`` extra naming torch (the loader skips it when torch is
not installed). Importing this module never imports torch: ``_instrument`` waits
for the application to import it (a post-import hook), then patches
``torch.nn.Module.__call__`` with a discovery step. The first call of a module
brickscope has not seen makes that module a model root: ``brickscope.torch``
instruments it (and marks its whole tree as seen), exactly as
``brickscope.torch.instrument(root)`` with the settings below, and the call goes
on instrumented. Every later call of a seen module costs one dictionary lookup
more than torch's own ``__call__`` (benchmarks: ``docs/benchmarks.md``).

Settings, keyword arguments of ``TorchInstrumentor().instrument(...)`` or, when
not given, environment variables in the OpenTelemetry instrumentations' style:

- ``OTEL_PYTHON_TORCH_EXCLUDED_MODULES``: comma-separated module-path globs left
  alone with everything below them (``skip=``), e.g. ``layers.*.mlp,*.dropout``;
- ``OTEL_PYTHON_TORCH_MAX_DEPTH``: deepest module instrumented (``max_depth=``);
- ``OTEL_PYTHON_TORCH_LAYERS``: ``auto`` (default), ``none`` or comma-separated globs;
- ``OTEL_PYTHON_TORCH_NVTX``: ``auto`` (default), ``true`` or ``false``;
- ``OTEL_PYTHON_TORCH_BACKWARD``: ``true`` adds backward bricks (default ``false``);
- ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=torch`` (the SDK's own) turns it off.

A bad value is logged once as an error naming the variable; the application then
runs uninstrumented (raising would stop ``opentelemetry-instrument`` instrumenting
the rest).
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Collection
from typing import Any

# The module opts out of type checking (a file-level "type: ignore"): its names are Any.
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from brickscope import _state

logger = logging.getLogger(__name__)

__all__ = ["TorchInstrumentor"]

#: What the ``instruments`` extra names; opentelemetry-instrument checks it before loading.
_instruments = ("torch >= 2.4",)

EXCLUDED_MODULES = "OTEL_PYTHON_TORCH_EXCLUDED_MODULES"
MAX_DEPTH = "OTEL_PYTHON_TORCH_MAX_DEPTH"
LAYERS = "OTEL_PYTHON_TORCH_LAYERS"
NVTX = "OTEL_PYTHON_TORCH_NVTX"
BACKWARD = "OTEL_PYTHON_TORCH_BACKWARD"


def settings_from_environment(given: dict[str, Any]) -> dict[str, Any]:
    """``instrument()`` keyword arguments: ``given`` first, then the variables.

    Raises:
        ValueError: a variable's value is malformed (the message names it).
    """
    settings: dict[str, Any] = {}
    if "skip" in given:
        settings["skip"] = given["skip"]
    else:
        settings["skip"] = tuple(g.strip() for g in os.environ.get(EXCLUDED_MODULES, "").split(",") if g.strip())
    if "max_depth" in given:
        settings["max_depth"] = given["max_depth"]
    elif os.environ.get(MAX_DEPTH, "").strip():
        text = os.environ[MAX_DEPTH].strip()
        if not text.isdigit():
            raise ValueError(f"{MAX_DEPTH} must be an int >= 0, got {text!r}")
        settings["max_depth"] = int(text)
    if "layers" in given:
        settings["layers"] = given["layers"]
    else:
        text = os.environ.get(LAYERS, "auto").strip() or "auto"
        if text.lower() == "none":
            settings["layers"] = None
        elif text.lower() == "auto":
            settings["layers"] = "auto"
        else:
            settings["layers"] = tuple(g.strip() for g in text.split(",") if g.strip())
    if "nvtx" in given:
        settings["nvtx"] = given["nvtx"]
    else:
        text = os.environ.get(NVTX, "auto").strip().lower() or "auto"
        choices = {"auto": "auto", "true": True, "false": False}
        if text not in choices:
            raise ValueError(f"{NVTX} must be auto, true or false, got {text!r}")
        settings["nvtx"] = choices[text]
    if "backward" in given:
        settings["backward"] = given["backward"]
    else:
        text = os.environ.get(BACKWARD, "false").strip().lower() or "false"
        if text not in ("true", "false"):
            raise ValueError(f"{BACKWARD} must be true or false, got {text!r}")
        settings["backward"] = text == "true"
    return settings


class TorchInstrumentor(BaseInstrumentor):  # type: ignore[misc]  # BaseInstrumentor is Any (above)
    """Instruments every ``torch.nn.Module`` model the application calls, once torch is imported.

    .. versionadded:: 0.2.0
    """

    _discovery: _Discovery | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        try:
            settings = settings_from_environment(kwargs)
        except ValueError as exc:
            logger.error("brickscope: PyTorch modules are not instrumented: %s", exc)
            return
        self._discovery = _Discovery(settings)
        _when_imported("torch", self._discovery.install)

    def _uninstrument(self, **kwargs: Any) -> None:
        discovery = getattr(self, "_discovery", None)
        if discovery is not None:
            discovery.uninstall()
            self._discovery = None


def _when_imported(name: str, callback: Any) -> None:
    """Call ``callback(module)`` once module ``name`` is imported (at once if it is)."""
    from wrapt import register_post_import_hook  # opentelemetry-instrumentation depends on wrapt

    register_post_import_hook(callback, name)


class _Discovery:
    """Patches ``nn.Module.__call__``: an unseen module becomes an instrumented model root."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.seen: dict[int, Any] = {}  # id(module) -> weakref to it
        self.roots: list[Any] = []  # Instrumentation handles
        self.lock = threading.Lock()
        self.original_call: Any = None
        self.installed = False
        self.failed = False

    def install(self, torch: Any) -> None:
        if self.installed:
            return
        from brickscope.torch import _instrument, _nvtx, _plan

        module_class = torch.nn.Module
        original_call = module_class.__call__
        is_compiling = torch.compiler.is_compiling
        seen = self.seen
        try:
            self.domain = _nvtx.load_domain(self.settings.get("nvtx", "auto"))
            _plan.make_plan(module_class(), None, self.settings.get("layers", "auto"), self.settings["skip"],
                            self.settings.get("max_depth"))  # fmt: skip
        except (TypeError, ValueError) as exc:  # checked once, here, as instrument() would
            logger.error("brickscope: PyTorch modules are not instrumented: %s", exc)
            return
        discover = self.discover
        self._instrument = _instrument
        self._plan = _plan

        def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
            if is_compiling() or _state.recorder is None:
                return original_call(self, *args, **kwargs)
            ref = seen.get(id(self))
            if ref is not None and ref() is self:
                return original_call(self, *args, **kwargs)
            if discover(self):  # now instrumented: call through its own class
                return type(self).__call__(self, *args, **kwargs)
            return original_call(self, *args, **kwargs)

        self.original_call = original_call
        self.module_class = module_class
        module_class.__call__ = __call__
        self.installed = True

    def discover(self, root: Any) -> bool:
        """Instrument ``root`` as a model, mark its tree seen; whether its class changed."""
        with self.lock:
            try:
                for module in root.modules():
                    self._see(module)
                plan = self._plan.make_plan(
                    root, None, self.settings.get("layers", "auto"), self.settings["skip"], self.settings.get("max_depth")
                )
                plan = [m for m in plan if not self._instrument.is_instrumented(m.module)]
                handle = self._instrument.apply_plan(
                    plan, "current", self.domain, self.settings.get("backward", False), automatic=True
                )
                self.roots.append(handle)
            except Exception:  # never into the application: it runs on uninstrumented
                if not self.failed:
                    self.failed = True
                    logger.exception("brickscope: instrumenting a %s failed", type(root).__name__)
                return False
        return self._instrument.is_instrumented(root)

    def _see(self, module: Any) -> None:
        key = id(module)
        seen = self.seen

        def forget(_ref: object) -> None:
            seen.pop(key, None)

        seen[key] = weakref.ref(module, forget)

    def uninstall(self) -> None:
        if not self.installed:
            return
        self.module_class.__call__ = self.original_call
        with self.lock:
            for handle in self.roots:
                handle.remove()
            self.roots.clear()
            self.seen.clear()
        self.installed = False
