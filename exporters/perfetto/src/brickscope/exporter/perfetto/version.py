# SPDX-License-Identifier: Apache-2.0
"""Version of the brickscope-exporter-perfetto distribution."""

__version__ = "0.1.0"
