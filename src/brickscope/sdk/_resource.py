# SPDX-License-Identifier: Apache-2.0
"""Resource attributes brickscope adds: host, GPU device names, and the rank of a distributed job.

Example::

    from brickscope.sdk._resource import launcher_rank_attributes
    launcher_rank_attributes({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8"})
    # {'brickscope.rank': 3, 'brickscope.local_rank': 1, 'brickscope.world_size': 8}

The rank comes from whichever launcher started the process. Launchers nest (torchrun
under ``srun``, ``mpirun`` inside a Slurm allocation), so the most specific family
wins: torchrun's variables, then the MPI implementations', then Slurm's. All three
values come from one family, never mixed.

Attributes the user already set (``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SERVICE_NAME``,
or the provider's own resource) always win over what is detected here.

The same detection is available to providers brickscope does not build, through the
SDK's resource-detector entry point: ``OTEL_EXPERIMENTAL_RESOURCE_DETECTORS=brickscope``.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.resources import OTELResourceDetector, Resource, ResourceDetector
from opentelemetry.sdk.trace import TracerProvider

from brickscope.sdk import _otel_internals
from brickscope.trace.attributes import GPU_DEVICE_NAMES, HOST_NAME, LOCAL_RANK, RANK, WORLD_SIZE

logger = logging.getLogger(__name__)

#: (launcher, rank variable, local rank variable, world size variable), most specific first.
LAUNCHER_VARIABLES: tuple[tuple[str, str, str, str], ...] = (
    ("torchrun", "RANK", "LOCAL_RANK", "WORLD_SIZE"),
    ("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("mvapich", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_SIZE"),
    ("pmix", "PMIX_RANK", "PMIX_LOCAL_RANK", "PMIX_SIZE"),
    ("pmi", "PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE"),
    ("slurm", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),
)


def launcher_rank_attributes(environ: Mapping[str, str] | None = None) -> dict[str, int]:
    """Rank, local rank and world size from the first launcher family whose rank is set.

    A value that is not a non-negative integer is left out with a warning: a malformed
    launcher variable must not stop the job, only its telemetry loses that attribute.

    Args:
        environ: the environment to read (default: ``os.environ``).
    """
    environ = os.environ if environ is None else environ
    for _launcher, *variables in LAUNCHER_VARIABLES:
        if not environ.get(variables[0], "").strip():
            continue
        found = {}
        for key, variable in zip((RANK, LOCAL_RANK, WORLD_SIZE), variables):
            raw = environ.get(variable, "").strip()
            if not raw:
                continue
            try:
                value = int(raw)
            except ValueError:
                value = -1
            if value < 0:
                logger.warning("brickscope: ignoring %s=%r: not a non-negative integer", variable, raw)
                continue
            found[key] = value
        return found
    return {}


def process_attributes(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What brickscope knows about this process without touching the GPU: host and rank."""
    attributes: dict[str, Any] = {}
    try:
        attributes[HOST_NAME] = socket.gethostname()
    except OSError:  # pragma: no cover - no host name at all
        pass
    attributes.update(launcher_rank_attributes(environ))
    return attributes


def gpu_attributes(timer: Any) -> dict[str, Any]:
    """The CUDA device names of a GPU timer (``CudaTimer.device_names()``); {} without one."""
    if timer is None:
        return {}
    try:
        names = [str(name) for name in timer.device_names()]
    except Exception:  # a resource attribute is not worth failing configure() for
        logger.warning("brickscope: could not read the CUDA device names", exc_info=True)
        return {}
    return {GPU_DEVICE_NAMES: names} if names else {}


def without_user_keys(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """``attributes`` minus the keys ``OTEL_RESOURCE_ATTRIBUTES``/``OTEL_SERVICE_NAME`` set.

    ``Resource.create(attributes)`` lets the given attributes override the
    environment's; filtering first keeps the user's explicit values on top.
    """
    user = OTELResourceDetector().detect().attributes
    return {key: value for key, value in attributes.items() if key not in user}


def create_resource(environ: Mapping[str, str] | None = None) -> Resource:
    """The SDK's ``Resource.create()`` (service name, ``OTEL_*``, detectors) plus host and rank."""
    return Resource.create(without_user_keys(process_attributes(environ)))


def extend_provider_resource(provider: TracerProvider, attributes: Mapping[str, Any]) -> Resource:
    """Add to the provider's resource those ``attributes`` it does not have yet; returns it.

    Existing keys are never overwritten: a provider the application configured keeps
    its values. Spans made by the provider's tracers afterwards carry the additions.
    """
    resource = provider.resource
    additions = {key: value for key, value in attributes.items() if key not in resource.attributes}
    if not additions:
        return resource
    _otel_internals.update_provider_resource(provider, Resource(additions))
    return provider.resource


def replace_provider_resource_attributes(provider: TracerProvider, attributes: Mapping[str, Any]) -> Resource:
    """Set ``attributes`` on the provider's resource, replacing values it has (brickscope's own
    keys that change during a run: the kernel source registry); returns the new resource."""
    _otel_internals.update_provider_resource(provider, Resource(dict(attributes)))  # its values win
    return provider.resource


class BrickscopeResourceDetector(ResourceDetector):
    """An SDK resource detector for host name and launcher rank (no GPU access).

    Registered as the ``brickscope`` entry point of ``opentelemetry_resource_detector``,
    so any SDK provider can use it: ``OTEL_EXPERIMENTAL_RESOURCE_DETECTORS=brickscope``.

    .. versionadded:: 0.1.0
    """

    def detect(self) -> Resource:
        """Host name, rank, local rank and world size of this process."""
        return Resource(process_attributes())
