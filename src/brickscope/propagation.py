# SPDX-License-Identifier: Apache-2.0
"""Trace context through environment variables (``TRACEPARENT``), for launcher-started processes.

Example::

    import subprocess
    import brickscope as bs
    from brickscope.propagation import inject_into_environment

    with bs.step(0):                                   # rank 0 (or the launcher)
        env = inject_into_environment()                 # os.environ + TRACEPARENT/TRACESTATE/BAGGAGE
        subprocess.Popen(["python", "worker.py"], env=env)

    # worker.py: bs.configure() attaches TRACEPARENT, so its steps and bricks
    # become children of rank 0's step, in the same trace.

This follows OpenTelemetry's "environment variables as context propagation carriers"
specification: the configured propagators (``OTEL_PROPAGATORS``, by default W3C
Trace Context and W3C Baggage) write and read their usual fields, with names
normalised to upper case (``traceparent`` -> ``TRACEPARENT``). Every child of a
launcher (torchrun, ``mpirun``, ``srun``) inherits the launcher's environment, so
exporting ``TRACEPARENT`` before starting the launcher links every rank.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, MutableMapping
from contextvars import Token

from opentelemetry import context as otel_context, propagate
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter, Setter
from opentelemetry.trace import get_current_span

__all__ = ["context_from_environment", "environment_variable_name", "inject_into_environment"]

_NOT_NAME_CHARACTER = re.compile(r"[^A-Za-z0-9_]")


def environment_variable_name(field: str) -> str:
    """The environment variable that carries a propagator field (``traceparent`` -> ``TRACEPARENT``).

    Upper case, every character outside ``[A-Za-z0-9_]`` replaced by ``_``, and a
    leading digit prefixed with ``_``, as the specification asks.
    """
    name = _NOT_NAME_CHARACTER.sub("_", field).upper() or "_"
    return "_" + name if name[0].isdigit() else name


class _EnvironmentGetter(Getter[Mapping[str, str]]):
    """Reads propagator fields from an environment mapping."""

    def get(self, carrier: Mapping[str, str], key: str) -> list[str] | None:
        value = carrier.get(environment_variable_name(key))
        return None if value is None else [value]

    def keys(self, carrier: Mapping[str, str]) -> list[str]:
        return [key for key in carrier if key == environment_variable_name(key)]


class _EnvironmentSetter(Setter[MutableMapping[str, str]]):
    """Writes propagator fields into an environment mapping."""

    def set(self, carrier: MutableMapping[str, str], key: str, value: str) -> None:
        carrier[environment_variable_name(key)] = value


_GETTER = _EnvironmentGetter()
_SETTER = _EnvironmentSetter()


def context_from_environment(environ: Mapping[str, str] | None = None, context: Context | None = None) -> Context:
    """The context the environment carries: the parent span of ``TRACEPARENT``, ``BAGGAGE``...

    Uses the globally configured propagators. A missing or malformed ``TRACEPARENT``
    gives a context without a span (the propagator ignores it, as it would a bad header).

    Args:
        environ: where to read (default: ``os.environ``).
        context: the context to add to (default: an empty one).

    .. versionadded:: 0.1.0
    """
    return propagate.extract(os.environ if environ is None else environ, context=context or Context(), getter=_GETTER)


def inject_into_environment(
    environ: MutableMapping[str, str] | None = None, context: Context | None = None
) -> MutableMapping[str, str]:
    """Write ``context`` (default: the current one) into an environment for a child process.

    The propagators' own variables are removed first, so a ``TRACESTATE`` or
    ``BAGGAGE`` inherited from this process's parent never travels with a new
    ``TRACEPARENT``; with no span in the context the child gets no ``TRACEPARENT``.
    Inside an open brickscope step, layer or brick, the child's spans become
    children of that scope.

    Args:
        environ: the mapping to update in place (default: a new copy of ``os.environ``).
        context: what to propagate (default: the current context).

    Returns:
        ``environ``, ready for ``subprocess.Popen(..., env=environ)``.

    .. versionadded:: 0.1.0
    """
    environ = dict(os.environ) if environ is None else environ
    propagator = propagate.get_global_textmap()
    for field in propagator.fields:
        environ.pop(environment_variable_name(field), None)
    propagator.inject(environ, context=context, setter=_SETTER)
    return environ


def _attach_environment_context() -> tuple[Token[Context], Context] | None:
    """Make ``TRACEPARENT`` the current parent when nothing else is; (token, context) or None.

    Called by ``configure()``: a rank started by a launcher then joins the
    launcher's trace. Skipped when the current context already has a valid span
    (the application's own parent wins) or when the environment carries none.
    """
    if get_current_span().get_span_context().is_valid:
        return None
    extracted = context_from_environment(context=otel_context.get_current())
    if not get_current_span(extracted).get_span_context().is_valid:
        return None
    return otel_context.attach(extracted), extracted


def _detach_environment_context(attached: tuple[Token[Context], Context]) -> None:
    """Undo :func:`_attach_environment_context` if its context is still the current one.

    If the application attached contexts on top since (or runs in another thread or
    task), resetting would discard them: leave everything as it is then.
    """
    token, context = attached
    if otel_context.get_current() is context:
        otel_context.detach(token)
