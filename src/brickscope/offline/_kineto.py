# SPDX-License-Identifier: Apache-2.0
"""What each slice of a Chrome trace becomes in brickscope's terms: torch.profiler's (Kineto's)
categories, and any other producer's.

Example::

    role = classify("cpu_op", "aten::addmm")      # Role(kind="brick", category="cpu_op", gpu=False)
    step_number("ProfilerStep#3")                 # 3

The table (docs/analysis.md, "Reading Chrome and Kineto traces"):

- ``cpu_op`` (an ATen operator), ``user_annotation`` (``record_function``), ``python_function``
  (``with_stack=True``), ``cuda_runtime`` and ``cuda_driver`` (host API calls): bricks, their
  category the Kineto category, host clock. These are the events torch.profiler's
  ``key_averages()`` counts on the host.
- a ``user_annotation`` named ``ProfilerStep#N`` (the profiler's ``step()``): a step, number N.
- ``kernel``, ``gpu_memcpy``, ``gpu_memset``: kernels on the ``gpu`` clock (GPU work brickscope
  did not time itself), on their ``args.device`` and ``args.stream``.
- ``gpu_user_annotation`` (a ``record_function`` range on a GPU stream): a brick on the
  ``gpu`` clock, category ``gpu_user_annotation``, so its GPU time is not mixed with the
  host range of the same name.
- ``Trace`` (the profiler's own range, ``PyTorch Profiler (0)``, on a pseudo-process
  ``Spans``) and ``overhead`` (CUPTI's buffer requests): the profiler's own, left out;
  ``cuda_sync`` (a stream's wait on an event, on the GPU's track): no work, left out.
- any other category, and slices without one (any other producer's Chrome trace): bricks,
  their category the ``cat`` (``other`` when absent).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from brickscope.trace import attributes as A


class Role(NamedTuple):
    """What a slice becomes: its scope kind, brick category, and whether it is GPU work
    (timed on the GPU's clock, placed on a device and stream)."""

    kind: str
    category: str
    gpu: bool


#: Kineto's GPU-side categories (lower-cased; torch 1.8 wrote ``Kernel``, ``Memcpy``, ``Memset``).
#: Each maps to the category its kernels get.
_GPU_WORK = {"kernel": "kernel", "gpu_memcpy": "gpu_memcpy", "gpu_memset": "gpu_memset",
             "memcpy": "gpu_memcpy", "memset": "gpu_memset"}  # fmt: skip
_GPU_ANNOTATION = "gpu_user_annotation"
#: Categories that are no work of the program: not read.
LEFT_OUT = frozenset(("trace", "overhead", "cuda_sync"))
#: Kineto's host API categories: a GPU slice's launch is one of these.
LAUNCH_CATEGORIES = frozenset(("cuda_runtime", "cuda_driver"))
_STEP = re.compile(r"ProfilerStep#(\d+)\Z")
_OTHER = "other"


def classify(category: str, name: str) -> Role:
    """The role of a slice of category ``category`` named ``name``."""
    folded = category.lower()
    gpu_category = _GPU_WORK.get(folded)
    if gpu_category is not None:
        return Role(A.SCOPE_KIND_KERNEL, gpu_category, True)
    if folded == _GPU_ANNOTATION:
        return Role(A.SCOPE_KIND_BRICK, _GPU_ANNOTATION, True)
    if folded == "user_annotation" and _STEP.match(name):
        return Role(A.SCOPE_KIND_STEP, "", False)
    return Role(A.SCOPE_KIND_BRICK, category or _OTHER, False)


def step_number(name: str) -> int | None:
    """N of a ``ProfilerStep#N`` annotation, else None."""
    match = _STEP.match(name)
    return int(match.group(1)) if match else None
