# SPDX-License-Identifier: Apache-2.0
"""Every document the code and docs cite is in the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITATION = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.md)\b")
SKIP = {".venv", "node_modules", ".git", "build", "dist"}


def cited() -> list[tuple[Path, str]]:
    found = []
    for path in ROOT.rglob("*"):
        if path.suffix not in (".py", ".md") or SKIP.intersection(path.relative_to(ROOT).parts):
            continue
        for name in CITATION.findall(path.read_text(encoding="utf-8", errors="replace")):
            found.append((path, name))
    return found


def resolves(source: Path, name: str) -> bool:
    candidates = [ROOT / name, source.parent / name, ROOT / "docs" / name]
    candidates += [package / name for package in ROOT.glob("exporters/*")]
    return any(candidate.is_file() for candidate in candidates)


def test_every_cited_markdown_file_exists():
    citations = cited()
    missing = sorted({f"{source.relative_to(ROOT)}: {name}" for source, name in citations if not resolves(source, name)})
    assert len(citations) > 20  # the scan sees the docs' own cross-references
    assert missing == []
