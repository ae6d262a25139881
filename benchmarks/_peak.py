# SPDX-License-Identifier: Apache-2.0
"""Run ``python -m MODULE ...`` or ``python -c CODE ...`` and write its peak RSS (kB) to $PEAK_FILE.

The peak is the kernel's VmHWM of this process, read at exit: unlike ``ru_maxrss`` of
a child, it does not count the memory of the parent the child was forked from.
"""

import atexit
import os
import runpy
import sys


def _report() -> None:
    with open("/proc/self/status") as status:
        peak = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(os.environ["PEAK_FILE"], "w") as out:
        out.write(peak)


atexit.register(_report)
mode, target, *rest = sys.argv[1:]
sys.argv = [target, *rest]
if mode == "-m":
    runpy.run_module(target, run_name="__main__", alter_sys=True)
else:
    exec(compile(target, "<bench>", "exec"), {"__name__": "__main__"})
