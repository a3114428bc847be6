"""The repository's docs and docstrings cite files that exist, inside the repository.

A reader who follows `spark_apps/load/commit.py` or `docs/design.md §3.6` from a docstring
must land on it in this clone: a file moved by a refactor leaves a dangling path, and a
citation of a document outside the repository (a team's shared notes) leads nowhere for
anyone else. Checked over every tracked text file.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TEXT_SUFFIXES = {".py", ".md", ".json", ".toml", ".yaml", ".yml", ".cfg", ".properties", ".sh"}
# A repository path as prose cites it: a top-level folder, then a file with a known suffix.
CITED_PATH = re.compile(
    r"\b((?:plugins|dags|include|tests|bench|scripts|docs|spark_apps)/[A-Za-z0-9_./-]+"
    r"\.(?:py|md|json|yaml|yml|properties|avsc|txt|sh|cfg))\b"
)
# Documents that live outside the repository, under names a citation would use.
OUTSIDE = re.compile(r"\.\./shared|/work/shared|\bDESIGN\.md|\bSTACK\.md|KAFKA07_PROTOCOL")
# Paths that are cited as examples of what does not exist, on purpose.
NOT_FILES = {
    "bench/NAME.py",  # a placeholder in prose
    "spark_apps/hourly_load.py",  # the old flat path, as the README check's own test names it
    "tests/storage/test_no_such.py",  # ditto
}


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    files = [ROOT / name for name in listed.split("\0") if name]
    return [
        f
        for f in files
        if f.suffix in TEXT_SUFFIXES and f.is_file() and "bench/results" not in f.as_posix()
    ]


def test_cited_repository_paths_exist():
    dangling = []
    for path in _tracked_text_files():
        text = path.read_text(errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            for cited in CITED_PATH.findall(line):
                if cited not in NOT_FILES and not (ROOT / cited).exists():
                    dangling.append(f"{path.relative_to(ROOT)}:{number}: {cited}")
    assert not dangling, "paths cited but not in the repository:\n" + "\n".join(dangling)


def test_nothing_cites_documents_outside_the_repository():
    outside = []
    for path in _tracked_text_files():
        if path == Path(__file__).resolve():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                outside.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not outside, "cite docs/design.md instead of:\n" + "\n".join(outside)
