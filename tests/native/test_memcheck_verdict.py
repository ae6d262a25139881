# SPDX-License-Identifier: Apache-2.0
"""The memory checker's verdict (tests/native/memcheck.py) on valgrind reports written by
hand: which errors fail the check and which the interpreter's own noise leaves alone.
(``make memcheck`` runs the checker itself on a real invalid read: ``--self-test``.)"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


def _load() -> ModuleType:
    path = Path(__file__).with_name("memcheck.py")
    spec = importlib.util.spec_from_file_location("memcheck", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["memcheck"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


memcheck = _load()
LIBPYTHON = "/usr/lib/libpython3.11.so.1.0"
HOTPATH = "/repo/src/brickscope/_hotpath.cpython-311-x86_64-linux-gnu.so"


def frame(fn: str, obj: str) -> str:
    return f"<frame><fn>{fn}</fn><obj>{obj}</obj></frame>"


def error(kind: str, *frames: str, origin: tuple[str, ...] = ()) -> str:
    stacks = f"<stack>{''.join(frames)}</stack>"
    if origin:
        stacks += f"<auxwhat>Uninitialised value was created by a heap allocation</auxwhat><stack>{''.join(origin)}</stack>"
    return f"<error><kind>{kind}</kind><what>{kind} here</what>{stacks}</error>"


def run(tmp_path: Path, mode: str, *errors: str) -> object:
    report = tmp_path / f"{mode}.xml"
    report.write_text(f"<?xml version='1.0'?><valgrindoutput>{''.join(errors)}</valgrindoutput>")
    return memcheck.Run(mode, memcheck.parse(report), 1.0, "")


CPYTHON_READ = error("InvalidRead", frame("strncmp", "/lib/ld-linux.so.2"), frame("is_dst", "/lib/ld-linux.so.2"))
CPYTHON_LEAK = error("Leak_PossiblyLost", frame("malloc", "vgpreload"), frame("gc_alloc", LIBPYTHON), frame("make_span", HOTPATH))


class TestVerdict:
    def test_the_same_noise_in_both_runs_passes(self, tmp_path):
        """CPython's own errors, as often with C as without, and its "possibly lost" blocks
        at exit (even those our code allocated) do not fail the check."""
        c = run(tmp_path, "c", CPYTHON_READ, CPYTHON_LEAK, CPYTHON_LEAK)
        python = run(tmp_path, "python", CPYTHON_READ)
        verdict = memcheck.compare(c, python)
        assert not verdict.failed
        assert len(c.errors) == 3 and len(c.counted()) == 1

    def test_an_error_in_our_object_fails(self, tmp_path):
        """An invalid read with a frame in a brickscope shared object fails, whatever the
        pure-Python run shows."""
        bad = error("InvalidRead", frame("PyLong_AsLong", LIBPYTHON), frame("build_span", HOTPATH))
        verdict = memcheck.compare(run(tmp_path, "c", bad), run(tmp_path, "python", bad))
        assert verdict.failed
        assert [e.kind for e in verdict.own] == ["InvalidRead"]
        assert verdict.beyond == []  # as often in both: only the frame of ours tells

    def test_a_definite_leak_of_ours_fails(self, tmp_path):
        """A block our code allocated and lost every pointer to fails the check."""
        leak = error("Leak_DefinitelyLost", frame("malloc", "vgpreload"), frame("fold_sums", HOTPATH))
        verdict = memcheck.compare(run(tmp_path, "c", leak), run(tmp_path, "python"))
        assert [e.kind for e in verdict.own] == ["Leak_DefinitelyLost"]

    def test_an_uninitialised_value_our_code_allocated_fails(self, tmp_path):
        """Used inside CPython, allocated by our code (its origin stack): ours."""
        uninit = error(
            "UninitValue", frame("Py_INCREF", LIBPYTHON), origin=(frame("malloc", "vgpreload"), frame("entry_new", HOTPATH))
        )
        verdict = memcheck.compare(run(tmp_path, "c", uninit), run(tmp_path, "python"))
        assert [e.kind for e in verdict.own] == ["UninitValue"]

    def test_an_error_only_the_c_run_shows_fails_without_a_frame_of_ours(self, tmp_path):
        """A CPython error the C run shows more often than the pure-Python run (a freed
        object handed back to the interpreter) fails, with both counts."""
        freed = error("InvalidRead", frame("Py_DECREF", LIBPYTHON), frame("dict_dealloc", LIBPYTHON))
        verdict = memcheck.compare(run(tmp_path, "c", freed, freed), run(tmp_path, "python", freed))
        assert verdict.own == []
        assert verdict.beyond == [(("InvalidRead", "Py_DECREF", "dict_dealloc"), 2, 1)]
        assert "BEYOND InvalidRead x2 with C, x1 pure Python" in memcheck.describe(verdict)


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--steps", "x"]])
def test_a_bad_option_is_refused_in_one_line(argv, capsys):
    """Bad input to an option: exit 2, one line naming it."""
    with pytest.raises(SystemExit) as exit_info:
        memcheck.main(argv)
    assert exit_info.value.code == 2
    assert "--steps" in capsys.readouterr().err.strip().splitlines()[-1]
