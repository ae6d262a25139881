# SPDX-License-Identifier: Apache-2.0
"""brickscope: measured GPU time per op, as OpenTelemetry spans."""

# Exporter distributions install brickscope.exporter.<name> from their own src/ trees;
# extending __path__ lets one import path span them (STYLE.md 7.1, option a).
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

from brickscope.version import __version__

__all__ = ["__version__"]
