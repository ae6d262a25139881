# SPDX-License-Identifier: Apache-2.0
"""The one place this distribution's version is written."""

__version__ = "0.1.0"
