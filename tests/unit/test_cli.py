# SPDX-License-Identifier: Apache-2.0
"""The brickscope command's frame (exit statuses, help, python -m) and the output-file rules."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from brickscope import cli
from brickscope.offline import AtomicOutput, OutputError, check_output, write_atomically
from brickscope.offline._output import remove_stale_temporaries


class TestCommand:
    def test_python_dash_m_runs_the_command(self):
        result = subprocess.run(
            [sys.executable, "-m", "brickscope", "--version"], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0 and result.stdout.startswith("brickscope ")

    def test_no_subcommand_is_a_usage_error(self, capsys):
        assert cli.main([]) == cli.EXIT_USAGE
        assert "usage: brickscope" in capsys.readouterr().err

    def test_help_says_what_to_install_when_nothing_is_installed(self, monkeypatch, capsys):
        monkeypatch.setattr(cli, "entry_points", lambda group: [])
        with pytest.raises(SystemExit) as info:
            cli.main(["--help"])
        assert info.value.code == 0
        words = " ".join(capsys.readouterr().out.split())
        assert "pip install ./exporters/perfetto # brickscope-exporter-perfetto: convert, merge" in words

    def test_help_names_the_distribution_of_each_missing_subcommand(self, monkeypatch, capsys):
        class Flamegraph:
            name, value = "flamegraph", "x:register"

            def load(self):
                return lambda subparsers: subparsers.add_parser("flamegraph")

        monkeypatch.setattr(cli, "entry_points", lambda group: [Flamegraph()])
        with pytest.raises(SystemExit):
            cli.main(["--help"])
        out = capsys.readouterr().out
        assert "more subcommands: they come with the exporters" in out
        assert "pip install ./exporters/perfetto # brickscope-exporter-perfetto: convert, merge" in " ".join(out.split())
        assert "flamegraph" not in out.split("more subcommands")[1]

    def test_a_broken_subcommand_does_not_hide_the_others(self, monkeypatch, capsys):
        class Broken:
            name, value = "broken", "nowhere:register"

            def load(self):
                raise ImportError("no module named nowhere")

        monkeypatch.setattr(cli, "entry_points", lambda group: [Broken()])
        with pytest.raises(SystemExit):
            cli.main(["--help"])
        assert "broken (nowhere:register): ImportError" in capsys.readouterr().out

    @pytest.mark.parametrize(
        ("error", "status", "line"),
        [
            (cli.UsageError("bad --weight"), 2, "brickscope boom: bad --weight"),
            (FileNotFoundError(2, "No such file or directory", "in.jsonl"), 1, "brickscope boom: in.jsonl: No such file or directory"),
            (RuntimeError("a bug\nwith two lines"), 1, "brickscope boom: internal error: RuntimeError: a bug\\nwith two lines (BRICKSCOPE_DEBUG=1 shows the traceback)"),
        ],
    )
    def test_errors_are_one_line_with_their_status(self, monkeypatch, capsys, error, status, line):
        def register(subparsers):
            def fail(args):
                raise error

            subparsers.add_parser("boom").set_defaults(func=fail)

        class EntryPoint:
            name, value = "boom", "test:register"

            def load(self):
                return register

        monkeypatch.delenv("BRICKSCOPE_DEBUG", raising=False)
        monkeypatch.setattr(cli, "entry_points", lambda group: [EntryPoint()])
        assert cli.main(["boom"]) == status
        assert capsys.readouterr().err == line + "\n"


class TestOutputRules:
    def test_output_that_is_an_input_is_refused_by_inode(self, tmp_path):
        """The same file under another name (a hard link) is still the input."""
        source = tmp_path / "in.pftrace"
        source.write_bytes(b"data")
        alias = tmp_path / "alias.pftrace"
        os.link(source, alias)
        with pytest.raises(OutputError, match=r"alias\.pftrace: is also an input"):
            check_output(alias, overwrite=True, inputs=[source])

    def test_existing_output_needs_overwrite(self, tmp_path):
        path = tmp_path / "out"
        path.write_text("keep")
        with pytest.raises(OutputError, match="already exists; pass --force"):
            check_output(path, overwrite=False, force_flag="--force")
        assert check_output(path, overwrite=True) == str(path)

    def test_links_pipes_and_directories_are_never_replaced(self, tmp_path):
        link = tmp_path / "link"
        link.symlink_to(tmp_path / "elsewhere")
        pipe = tmp_path / "pipe"
        os.mkfifo(pipe)
        for path, message in ((link, "symbolic link"), (pipe, "not a regular file"), (tmp_path, "is a directory")):
            with pytest.raises(OutputError, match=message):
                check_output(path, overwrite=True)

    def test_atomic_write_leaves_nothing_on_failure(self, tmp_path):
        path = tmp_path / "out.txt"
        path.write_text("old")

        def fail(out):
            out.write(b"half")
            raise OSError("disk full")

        with pytest.raises(OSError, match="disk full"):
            write_atomically(str(path), fail)
        assert path.read_text() == "old" and sorted(os.listdir(tmp_path)) == ["out.txt"]
        write_atomically(str(path), lambda out: out.write(b"new"))
        assert path.read_text() == "new" and sorted(os.listdir(tmp_path)) == ["out.txt"]

    def test_no_overwrite_commit_never_clobbers_a_file_that_appeared(self, tmp_path):
        path = tmp_path / "out.txt"
        output = AtomicOutput(path, overwrite=False)
        with output:
            with output.open() as out:
                out.write(b"mine")
            path.write_text("theirs")  # another process was faster
            with pytest.raises(OutputError, match="already exists"):
                output.commit()
        assert path.read_text() == "theirs" and sorted(os.listdir(tmp_path)) == ["out.txt"]

    def test_stale_temporaries_of_dead_processes_are_removed(self, tmp_path):
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        dead_pid = int(dead.stdout)
        stale = tmp_path / f".out.txt.{dead_pid}.0123abcd.tmp"
        live = tmp_path / f".out.txt.{os.getpid()}.0123abcd.tmp"
        other = tmp_path / f".other.txt.{dead_pid}.0123abcd.tmp"
        for path in (stale, live, other):
            path.write_text("x")
        assert remove_stale_temporaries(str(tmp_path / "out.txt")) == 1
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])
