# SPDX-License-Identifier: Apache-2.0
"""``brickscope diff --divergence``: the first kernel whose output differs between two runs.

Spans carrying an output checksum (``bs.checksum``) are aligned across the runs by
(rank, step, layer, enclosing brick, kernel, occurrence): the occurrence counts
same-keyed spans in start order, so the third ``gemm`` of layer 2 in step 5 meets the
third one of the other run. The rank is the launcher's rank when both runs have several
ranks, else left out (two single-process runs on two machines align). The first
divergence is the earliest, in the base run's order (step, then start time), whose
checksums differ.

Example::

    result = divergence(load("gpu.pftrace"), load("cpu.pftrace"))
    if result.first is not None:
        print(result.first.label())
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from brickscope.analysis._load import AnalysisError
from brickscope.analysis._table import KIND_BRICK, KIND_KERNEL, KINDS, Table

Key = tuple[Any, ...]


@dataclass(frozen=True)
class Diverged:
    """One output whose checksums differ."""

    rank: str | None
    step: int | None
    layer: int | None
    brick: str | None
    kernel: str | None
    occurrence: int
    base_checksum: str
    new_checksum: str

    def label(self) -> str:
        parts = []
        if self.rank is not None:
            parts.append(f"rank {self.rank}")
        if self.step is not None:
            parts.append(f"step {self.step}")
        if self.layer is not None:
            parts.append(f"layer {self.layer}")
        if self.brick is not None:
            parts.append(f"brick {self.brick}")
        if self.kernel is not None:
            parts.append(f"kernel {self.kernel}")
        return ", ".join(parts) + f" (occurrence {self.occurrence})"


@dataclass(frozen=True)
class Divergence:
    """What comparing two runs' checksums found."""

    compared: int  # outputs checksummed in both runs
    agreed_before: int  # compared outputs before the first divergence (base run order)
    diverged: int  # compared outputs that differ
    only_base: int
    only_new: int
    first: Diverged | None  # None: the runs agree

    def text(self) -> str:
        extra = ""
        if self.only_base or self.only_new:
            extra = f"; {self.only_base} checksummed only in BASE, {self.only_new} only in NEW"
        if self.first is None:
            return f"the runs agree: {self.compared} checksummed outputs compared{extra}\n"
        first = self.first
        return (
            f"first divergence: {first.label()}: BASE {first.base_checksum} NEW {first.new_checksum}\n"
            f"{self.agreed_before} outputs agreed before it; {self.diverged} of {self.compared} compared differ{extra}\n"
        )


def divergence(base: Table, new: Table) -> Divergence:
    """Compare the checksummed outputs of two runs.

    Raises:
        AnalysisError: a run has no checksummed output (nothing to compare).
    """
    with_rank = len(base.ranks) > 1 and len(new.ranks) > 1
    base_outputs = _outputs(base, with_rank, "BASE")
    new_outputs = _outputs(new, with_rank, "NEW")
    new_by_key = {key: checksum for key, _, checksum in new_outputs}
    compared = agreed_before = diverged = 0
    first = None
    for key, _, checksum in base_outputs:
        other = new_by_key.get(key)
        if other is None:
            continue
        compared += 1
        if other == checksum:
            if first is None:
                agreed_before += 1
            continue
        diverged += 1
        if first is None:
            rank, step, layer, brick, kernel, occurrence = key
            first = Diverged(rank, step, layer, brick, kernel, occurrence, f"{checksum:016x}", f"{other:016x}")
    base_keys = {key for key, _, _ in base_outputs}
    return Divergence(
        compared=compared,
        agreed_before=agreed_before,
        diverged=diverged,
        only_base=len(base_keys - new_by_key.keys()),
        only_new=len(new_by_key.keys() - base_keys),
        first=first,
    )


def _outputs(table: Table, with_rank: bool, which: str) -> list[tuple[Key, tuple[int, int], int]]:
    """(key, run order, checksum) of every checksummed brick or kernel, in run order."""
    be = table.backend
    checksums = table["checksum"]
    mask = be.mask_and(be.mask_not(be.mask_in(checksums, [0])), be.mask_in(table["kind"], (KIND_BRICK, KIND_KERNEL)))
    rows = [i for i, keep in enumerate(be.to_list(mask)) if keep]
    if not rows:
        raise AnalysisError(f"{which} ({', '.join(table.sources) or 'input'}): no checksummed output (bs.checksum)")
    col = {name: be.take(table[name], rows) for name in ("kind", "op", "step", "layer", "rank", "start", "checksum", "parent")}
    parents = col["parent"]
    parent_ops = be.take(table["op"], [p if p >= 0 else 0 for p in parents])
    parent_kinds = be.take(table["kind"], [p if p >= 0 else 0 for p in parents])
    order = sorted(range(len(rows)), key=lambda i: (col["step"][i], col["start"][i], rows[i]))
    seen: dict[Key, int] = {}
    out = []
    for i in order:
        name = table.operations[col["op"][i]].name
        if KINDS[col["kind"][i]] == "kernel":
            brick = table.operations[parent_ops[i]].name if parents[i] >= 0 and parent_kinds[i] == KIND_BRICK else None
            kernel = name
        else:
            brick, kernel = name, None
        step, layer = col["step"][i], col["layer"][i]
        prefix = (
            table.ranks[col["rank"][i]] if with_rank else None,
            step if step >= 0 else None,
            layer if layer >= 0 else None,
            brick,
            kernel,
        )
        occurrence = seen.get(prefix, 0)
        seen[prefix] = occurrence + 1
        out.append(((*prefix, occurrence), (col["step"][i], col["start"][i]), col["checksum"][i]))
    return out
