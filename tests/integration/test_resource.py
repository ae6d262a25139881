# SPDX-License-Identifier: Apache-2.0
"""Resource attributes: host, launcher rank, GPU device names; the user's own values always win."""

from __future__ import annotations

import logging
import socket

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

import brickscope as bs
from brickscope.sdk import _resource
from brickscope.testing import capture_spans
from brickscope.trace import attributes as A


class TestLauncherRank:
    @pytest.mark.parametrize(
        "variables",
        [
            {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8"},
            {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_SIZE": "8"},
            {"MV2_COMM_WORLD_RANK": "5", "MV2_COMM_WORLD_LOCAL_RANK": "1", "MV2_COMM_WORLD_SIZE": "8"},
            {"PMIX_RANK": "5", "PMIX_LOCAL_RANK": "1", "PMIX_SIZE": "8"},
            {"PMI_RANK": "5", "MPI_LOCALRANKID": "1", "PMI_SIZE": "8"},
            {"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8"},
        ],
        ids=["torchrun", "openmpi", "mvapich", "pmix", "pmi", "slurm"],
    )
    def test_each_launcher(self, variables):
        """Every supported launcher's variables give rank, local rank and world size."""
        assert _resource.launcher_rank_attributes(variables) == {A.RANK: 5, A.LOCAL_RANK: 1, A.WORLD_SIZE: 8}

    def test_most_specific_launcher_wins(self):
        """torchrun under srun: the worker's RANK, not the Slurm task's id."""
        env = {"SLURM_PROCID": "1", "SLURM_LOCALID": "0", "SLURM_NTASKS": "2", "RANK": "9", "WORLD_SIZE": "16"}
        assert _resource.launcher_rank_attributes(env) == {A.RANK: 9, A.WORLD_SIZE: 16}

    def test_no_launcher(self):
        """A process no launcher started has no rank attributes."""
        assert _resource.launcher_rank_attributes({"HOME": "/root"}) == {}

    def test_bad_value_is_left_out_with_a_warning(self, caplog):
        """A malformed variable loses its attribute and says which one; the others stay."""
        with caplog.at_level(logging.WARNING, logger="brickscope.sdk._resource"):
            found = _resource.launcher_rank_attributes({"RANK": "3", "WORLD_SIZE": "many"})
        assert found == {A.RANK: 3}
        assert "WORLD_SIZE='many'" in caplog.text


class FakeTimer:
    def __init__(self, names):
        self._names = names

    def device_names(self):
        if isinstance(self._names, Exception):
            raise self._names
        return self._names


class TestResourceAttributes:
    def test_process_attributes(self, monkeypatch):
        """Host name (semantic-convention key) and the launcher's rank."""
        monkeypatch.setenv("RANK", "2")
        assert _resource.process_attributes() == {A.HOST_NAME: socket.gethostname(), A.RANK: 2}

    def test_gpu_names_from_the_timer(self, caplog):
        """Device names come from the CUDA timer; none without one, and a failing timer only warns."""
        assert _resource.gpu_attributes(FakeTimer(["H100", "H100"])) == {A.GPU_DEVICE_NAMES: ["H100", "H100"]}
        assert _resource.gpu_attributes(None) == {}
        with caplog.at_level(logging.WARNING, logger="brickscope.sdk._resource"):
            assert _resource.gpu_attributes(FakeTimer(RuntimeError("driver gone"))) == {}
        assert "device names" in caplog.text

    def test_create_resource_lets_otel_resource_attributes_win(self, monkeypatch):
        """OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME override what brickscope detects."""
        monkeypatch.setenv("RANK", "2")
        monkeypatch.setenv("WORLD_SIZE", "4")
        monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "brickscope.rank=7,host.name=gpu-node-1")
        monkeypatch.setenv("OTEL_SERVICE_NAME", "trainer")
        attributes = _resource.create_resource().attributes
        assert attributes[A.RANK] == "7" and attributes[A.HOST_NAME] == "gpu-node-1"
        assert attributes[A.WORLD_SIZE] == 4 and attributes["service.name"] == "trainer"

    def test_extend_adds_only_missing_keys(self):
        """The provider keeps its values; missing ones are added, also for tracers handed out before."""
        provider = TracerProvider(resource=Resource({"service.name": "mine", A.HOST_NAME: "custom"}))
        tracer = provider.get_tracer("early")
        _resource.extend_provider_resource(provider, {A.HOST_NAME: "detected", A.RANK: 1})
        assert dict(provider.resource.attributes) == {"service.name": "mine", A.HOST_NAME: "custom", A.RANK: 1}
        with tracer.start_as_current_span("s") as span:
            pass
        assert span.resource.attributes[A.RANK] == 1

    def test_configure_extends_the_applications_provider(self, monkeypatch):
        """Spans from a provider the application built carry its service name plus host and rank."""
        monkeypatch.setenv("RANK", "3")
        monkeypatch.setenv("WORLD_SIZE", "4")
        provider = TracerProvider(resource=Resource.create({"service.name": "decoder"}))
        with capture_spans(provider) as captured:
            with bs.brick("rms_norm"):
                pass
            (brick,) = captured.bricks()
        resource = brick.resource.attributes
        assert resource["service.name"] == "decoder"
        assert (resource[A.RANK], resource[A.WORLD_SIZE], resource[A.HOST_NAME]) == (3, 4, socket.gethostname())

    def test_detector_entry_point(self, monkeypatch):
        """OTEL_EXPERIMENTAL_RESOURCE_DETECTORS=brickscope adds host and rank to any SDK resource."""
        monkeypatch.setenv("OTEL_EXPERIMENTAL_RESOURCE_DETECTORS", "brickscope")
        monkeypatch.setenv("SLURM_PROCID", "6")
        monkeypatch.setenv("SLURM_NTASKS", "12")
        attributes = Resource.create({"service.name": "x"}).attributes
        assert (attributes[A.RANK], attributes[A.WORLD_SIZE]) == (6, 12)
