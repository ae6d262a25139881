# SPDX-License-Identifier: Apache-2.0
"""Run a command; measure its wall time and the peak memory of its whole process tree.

Two readings, the larger is reported:

- the sum of the resident set sizes of the child and all its descendants, read from
  ``/proc`` every ``interval_s`` (a JVM that Spark starts beside the Python driver is
  counted with it; a peak shorter than the interval may be missed);
- ``ru_maxrss`` of the child as ``wait4`` returns it: the largest peak of any one process of
  the tree that was waited for, exact however short (the kernel keeps it).

CPU time likewise: ``wait4``'s counts only the processes that were waited for (a JVM that
its parent kills is not), so the CPU time last read from ``/proc`` for each process of the
tree is summed too, and the larger is reported.

On a shared machine a command that outgrows it would take the others down with it:
given ``rss_cap_mb``, the whole tree is killed once its reading passes the cap, and the
result says so.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def tree_rss_kb(root: int, cpu_ticks: dict[int, int] | None = None) -> int:
    """Resident memory of ``root`` and every process descended from it, kB (0 once gone);
    each one's CPU time so far (clock ticks) goes into ``cpu_ticks`` by pid when given."""
    children: dict[int, list[int]] = {}
    stats: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rpartition(")")[2].split()
            ppid, ticks = int(fields[1]), int(fields[11]) + int(fields[12])  # ppid, utime + stime
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        children.setdefault(ppid, []).append(int(entry))
        stats[int(entry)] = ticks
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, ()))
        if cpu_ticks is not None and pid in stats:
            cpu_ticks[pid] = stats[pid]
        try:
            with open(f"/proc/{pid}/statm") as statm:
                total += int(statm.read().split()[1]) * _PAGE_KB
        except (OSError, IndexError, ValueError):
            pass
    return total


def run_measured(
    argv: Sequence[str],
    stdout_path: str,
    env: Mapping[str, str] | None = None,
    interval_s: float = 0.2,
    rss_cap_mb: float | None = None,
) -> dict[str, Any]:
    """Run ``argv`` with its standard output in ``stdout_path``; return ``rc``, ``wall_s``,
    ``peak_rss_mb`` (the larger reading), ``tree_rss_mb``, ``max_process_rss_mb``, the CPU
    seconds of the tree (``cpu_s``), ``killed`` (why the tree was killed, or None) and the
    last lines of its standard error."""
    peak = [0]
    cpu_ticks: dict[int, int] = {}
    killed: list[str] = []
    done = threading.Event()
    with open(stdout_path, "wb") as out:
        started = time.perf_counter()
        child = subprocess.Popen(
            list(argv), stdout=out, stderr=subprocess.PIPE, env=dict(env or os.environ), start_new_session=True
        )

        def sample() -> None:
            while not done.wait(interval_s):
                peak[0] = max(peak[0], tree_rss_kb(child.pid, cpu_ticks))
                if rss_cap_mb is not None and peak[0] > rss_cap_mb * 1024 and not killed:
                    killed.append(f"killed: its memory passed {rss_cap_mb:,.0f} MB")
                    os.killpg(child.pid, signal.SIGKILL)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        assert child.stderr is not None
        stderr = child.stderr.read()
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        done.set()
        sampler.join()
        child.returncode = os.waitstatus_to_exitcode(status)
        child.stderr.close()
    return {
        "rc": child.returncode,
        "wall_s": wall,
        "peak_rss_mb": max(peak[0], usage.ru_maxrss) / 1024,
        "tree_rss_mb": peak[0] / 1024,
        "max_process_rss_mb": usage.ru_maxrss / 1024,
        "cpu_s": max(usage.ru_utime + usage.ru_stime, sum(cpu_ticks.values()) / os.sysconf("SC_CLK_TCK")),
        "killed": killed[0] if killed else None,
        "stderr_tail": [line for line in stderr.decode(errors="replace").splitlines() if line.strip()][-3:],
    }
