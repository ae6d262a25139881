# SPDX-License-Identifier: Apache-2.0
"""Build the simulated CUDA driver with the system C compiler.

Example::

    from pathlib import Path
    lib = build_simdriver(Path("/tmp/sim"))   # -> /tmp/sim/libcuda.so.1 (SONAME libcuda.so.1)

Run as a script to build into a directory: ``python tests/simdriver/build.py OUT_DIR``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).with_name("simcuda.c")
LIBNAME = "libcuda.so.1"


def build_simdriver(out_dir: Path) -> Path:
    """Compile ``simcuda.c`` into ``out_dir/libcuda.so.1``.

    The SONAME is ``libcuda.so.1``, the name cuda-pathfinder and cuda-bindings
    dlopen, so the library is found through ``LD_LIBRARY_PATH`` or, once loaded
    with ``RTLD_GLOBAL``, by its SONAME.

    Args:
        out_dir: Directory to write the library to (created if missing).

    Returns:
        The path of the built library.

    Raises:
        RuntimeError: No C compiler, or the compilation failed (with its output).
    """
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("no C compiler found (set CC or install cc/gcc) to build the simulated CUDA driver")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / LIBNAME
    cmd = [
        compiler, "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-pthread",
        "-fvisibility=hidden", f"-Wl,-soname,{LIBNAME}", "-o", str(target), str(SOURCE),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"building the simulated CUDA driver failed: {' '.join(cmd)}\n{proc.stderr}")
    return target


if __name__ == "__main__":
    print(build_simdriver(Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
