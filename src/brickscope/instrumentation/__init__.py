# SPDX-License-Identifier: Apache-2.0
"""OpenTelemetry instrumentors (``opentelemetry_instrumentor`` entry points) shipped with brickscope.

Each module here imports its library only once the application does, so
``opentelemetry-instrument`` never pays for a library the program does not use.
"""
