# SPDX-License-Identifier: Apache-2.0
"""Peak compute and memory bandwidth of common GPUs, for the roofline.

Figures are the vendor datasheets' dense (no sparsity) BF16/FP16 tensor-core
FLOP/s and the memory bandwidth; ``docs/analysis.md`` cites each source. Work in
another precision (FP8, TF32, FP32) has another roof: give it with ``peaks=`` /
``--peak``. A device is matched on its CUDA name (``brickscope.gpu.device.names``
on the resource) by the first pattern that finds it, most specific first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Peak:
    """A roof: compute in FLOP/s, memory bandwidth in bytes/s.

    .. versionadded:: 0.2.0
    """

    flops_per_second: float
    bytes_per_second: float

    @classmethod
    def parse(cls, text: str) -> Peak:
        """``"989e12,3.35e12"`` (FLOP/s, bytes/s) -> Peak; ValueError otherwise."""
        try:
            flops, bandwidth = (float(part) for part in text.split(","))
        except ValueError:
            raise ValueError(f"peak {text!r}: expected FLOPS_PER_S,BYTES_PER_S such as 989e12,3.35e12") from None
        if flops <= 0 or bandwidth <= 0:
            raise ValueError(f"peak {text!r}: both figures must be > 0")
        return cls(flops, bandwidth)


#: (name, pattern on the lower-cased CUDA device name, peak), most specific first.
BUILTIN_PEAKS: tuple[tuple[str, str, Peak], ...] = (
    ("B200", r"b200", Peak(2.25e15, 8.0e12)),
    ("H200", r"h200", Peak(989e12, 4.8e12)),
    ("H100 NVL", r"h100 nvl", Peak(835e12, 3.9e12)),
    ("H100 PCIe", r"h100.*pcie", Peak(756e12, 2.0e12)),
    ("H100 SXM", r"h100", Peak(989e12, 3.35e12)),
    ("A100 80GB PCIe", r"a100.*80gb.*pcie", Peak(312e12, 1.935e12)),
    ("A100 80GB SXM", r"a100.*80", Peak(312e12, 2.039e12)),
    ("A100 40GB", r"a100", Peak(312e12, 1.555e12)),
    ("L40S", r"l40s", Peak(362e12, 864e9)),
    ("L4", r"\bl4\b", Peak(121e12, 300e9)),
    ("A10", r"\ba10\b", Peak(125e12, 600e9)),
    ("RTX 4090", r"rtx 4090", Peak(165.2e12, 1008e9)),
    ("V100", r"v100", Peak(125e12, 900e9)),
    ("T4", r"\bt4\b", Peak(65e12, 320e9)),
)

#: The key of a user-given peak that applies to every device without another match
#: (and to host-timed work).
ANY_DEVICE = "*"


def find_peak(model: str, overrides: dict[str, Peak] | None = None) -> tuple[str, Peak] | None:
    """(what matched, its peak) for a device name: user overrides first (a case-insensitive
    substring of the name, or ``"*"``), then the built-in table. None when nothing matches."""
    lowered = model.lower()
    for key, peak in (overrides or {}).items():
        if key != ANY_DEVICE and key.lower() in lowered and lowered:
            return key, peak
    if lowered:
        for name, pattern, peak in BUILTIN_PEAKS:
            if re.search(pattern, lowered):
                return name, peak
    if overrides and ANY_DEVICE in overrides:
        return ANY_DEVICE, overrides[ANY_DEVICE]
    return None
