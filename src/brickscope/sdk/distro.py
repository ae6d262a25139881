# SPDX-License-Identifier: Apache-2.0
"""Zero-code set-up: brickscope under ``opentelemetry-instrument``, with no change to the application.

Example::

    pip install './[otlp]' opentelemetry-instrumentation    # in the brickscope repository
    OTEL_SERVICE_NAME=decoder opentelemetry-instrument --traces_exporter otlp --metrics_exporter otlp \\
        python app.py          # app.py only uses bs.step / bs.brick / bs.kernel

Two entry points of the opentelemetry-python-contrib auto-instrumentation, in the
order ``opentelemetry-instrument`` runs them:

- ``opentelemetry_configurator``: ``brickscope`` -> :class:`BrickscopeConfigurator`.
  The SDK's own configurator (providers, exporters, sampler and resource from the
  ``OTEL_*`` variables, logs included) plus host and launcher rank on the resource,
  then :func:`brickscope.configure` on the provider it built.
- ``opentelemetry_post_instrument``: ``brickscope`` -> :func:`install`. Runs after
  whichever configurator the loader picked (only one runs: with
  ``opentelemetry-distro`` also installed, the first one found, or the one
  ``OTEL_PYTHON_CONFIGURATOR`` names) and configures brickscope on that provider if
  the brickscope configurator did not. So brickscope's processors are installed
  whatever distro or configurator the deployment uses.

brickscope registers no ``opentelemetry_distro``: only one distro runs per process
and a distro's job is to choose defaults for the whole deployment, which is not
brickscope's to take from ``opentelemetry-distro`` or a vendor's distro.
"""

from __future__ import annotations

import logging
from typing import Any

from brickscope.sdk import _config, _resource
from brickscope.sdk._otel_internals import SdkConfigurator

logger = logging.getLogger(__name__)

__all__ = ["BrickscopeConfigurator", "install"]


class BrickscopeConfigurator(SdkConfigurator):
    """The SDK configurator, plus brickscope's resource attributes and processors.

    Selected by ``opentelemetry-instrument`` when it is the only configurator
    installed, or with ``OTEL_PYTHON_CONFIGURATOR=brickscope``. Like every
    contrib configurator it is a singleton whose ``configure(**kwargs)`` takes the
    SDK's ``_initialize_components`` arguments.

    .. versionadded:: 0.1.0
    """

    def _configure(self, **kwargs: Any) -> None:
        # Host and rank, unless OTEL_RESOURCE_ATTRIBUTES says otherwise (the SDK lets
        # these arguments override the environment, so leave out what the user set).
        detected = _resource.without_user_keys(_resource.process_attributes())
        kwargs["resource_attributes"] = {**detected, **(kwargs.get("resource_attributes") or {})}
        super()._configure(**kwargs)  # type: ignore[no-untyped-call]  # the SDK leaves it untyped
        install()


def install() -> None:
    """Configure brickscope on the global provider unless a session is already open.

    The ``opentelemetry_post_instrument`` hook; also what the configurator calls.
    Settings come from the ``BRICKSCOPE_*`` and ``OTEL_*`` variables. A bad value is
    logged as an error naming the variable, once, and the application runs without
    brickscope's scopes: raising here would make ``opentelemetry-instrument`` skip
    the rest of the auto-instrumentation too.
    """
    global _attempted
    if _attempted or _config.current_session() is not None:
        return
    _attempted = True
    try:
        _config.configure()
    except (ValueError, TypeError) as exc:
        logger.error("brickscope is not installed, the application runs without its scopes: %s", exc)


_attempted = False
