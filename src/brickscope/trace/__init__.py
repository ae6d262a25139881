# SPDX-License-Identifier: Apache-2.0
"""OpenTelemetry glue: span processors and attribute conventions."""
