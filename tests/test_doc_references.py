"""The repository's docs and docstrings cite files and modules that exist, inside the repository.

A reader who follows `spark_apps/load/commit.py`, `load/cli.py`, `spark_hash.py`,
`spark_apps.load.plan` or `docs/design.md §3.6` from a docstring must land on it in this
clone: a module moved or renamed by a refactor leaves a dangling name, and a citation of a
document outside the repository (a team's shared notes) leads nowhere for anyone else.

    paths      every line of every tracked text file: a path from a top-level folder
               (`spark_apps/load/run.py`) exists
    prose      the docs (*.md), the comments of requirements.in, Makefile and the configs,
               and the docstrings and comments of every *.py (not its code: a string there
               may name a file the code is about to write):
                 file names  a partial path from one of our folders (`load/cli.py`) ends a
                             tracked path; a bare file name (`spark_hash.py`) is a tracked
                             file's (a few outside the repository are listed in EXTERNAL)
                 dotted      `spark_apps.load.plan`, `logbroker.storage.log.Log`: each part a
                             package, a module, or a word the module's text has
                 former      a module the history had and the tree has not (`audit_layout`,
                             `warehouse_fs.LocalFS`): named dotted, in backticks, or at all
                             when its name has an underscore (a plain word such as `state`
                             is prose too often)
"""

from __future__ import annotations

import functools
import io
import re
import subprocess
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

TEXT_SUFFIXES = {
    ".py",
    ".md",
    ".json",
    ".toml",
    ".yaml",
    ".yml",
    ".cfg",
    ".properties",
    ".sh",
    ".in",
}
# Files whose comments are prose (besides *.md and the *.py docstrings and comments).
COMMENTED_SUFFIXES = {".in", ".toml", ".yaml", ".yml", ".cfg", ".properties", ".sh"}
COMMENTED_NAMES = {"Makefile", "Dockerfile", "requirements.txt"}
TOP_FOLDERS = ("plugins", "dags", "include", "tests", "bench", "scripts", "docs", "spark_apps")
# A repository path as prose cites it: a top-level folder, then a file with a known suffix.
CITED_PATH = re.compile(
    r"\b((?:" + "|".join(TOP_FOLDERS) + r")/[A-Za-z0-9_./-]+"
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
# Files of other projects that prose names, under a name or path that looks like one of ours.
EXTERNAL = {
    "stomp.py",  # the STOMP client on PyPI (bench/systems/activemq.py)
    "protocol/types.py",  # kafka-python's (protocol/kafka08/types.py)
}
# Our packages as a dotted name starts (pyproject.toml's [tool.setuptools.packages.find]).
PACKAGES = {
    "logbroker": "plugins/logbroker",
    "pipeline_warehouse": "plugins/pipeline_warehouse",
    "hooks": "plugins/hooks",
    "pipeline_ui": "plugins/pipeline_ui",
    "spark_apps": "spark_apps",
}
# Avro records' full names: the namespace is `logbroker`, the name no module's.
AVRO_NAMES = {"logbroker.EventHeader", "logbroker.AuditCount", "logbroker.demo.PageView"}
FILE_SUFFIXES = {"py", "pyx", "md", "json", "yaml", "yml", "txt", "avsc", "html", "png", "csv"}

# A file name or partial path as prose cites it; never the tail of an absolute path, a URL,
# or ../ (the lookbehind refuses a start just after '/', '.' or ':').
FILE_NAME = re.compile(r"(?<![\w./:@~-])((?:[\w-]+/)*[\w-]+\.(?:py|md))\b")
DOTTED = re.compile(r"(?<![\w.])((?:" + "|".join(PACKAGES) + r")(?:\.[A-Za-z_]\w*)+)")


def _tracked_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def _tracked_text_files() -> list[Path]:
    return [
        ROOT / name
        for name in _tracked_files()
        if Path(name).suffix in TEXT_SUFFIXES and "bench/results" not in name
    ]


@functools.cache
def _read_python(source: str) -> tuple[tuple[tuple[int, str], ...], frozenset[str]]:
    """A module's prose (its comments and docstrings, by line) and the identifiers its code
    uses, in one pass of the tokenizer (cached: the tree and the prose check both ask)."""
    lines: list[tuple[int, str]] = []
    names = set()
    statement_start = True  # a string that starts a statement is a docstring (or one)
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.NAME:
                names.add(token.string)
            elif token.type == tokenize.COMMENT or (
                token.type == tokenize.STRING and statement_start
            ):
                row = token.start[0]
                lines += [(row + k, part) for k, part in enumerate(token.string.splitlines())]
            if token.type not in (tokenize.COMMENT, tokenize.NL):
                statement_start = token.type in (
                    tokenize.NEWLINE,
                    tokenize.INDENT,
                    tokenize.DEDENT,
                    tokenize.ENCODING,
                )
    except (tokenize.TokenError, SyntaxError):  # not Python after all: all of it is prose
        return tuple(enumerate(source.splitlines(), 1)), frozenset()
    return tuple(lines), frozenset(names)


@dataclass(frozen=True)
class Tree:
    """What the repository holds, as the prose checks need it."""

    paths: frozenset[str]  # tracked files, relative
    tails: frozenset[str]  # every tracked path's endings: `load/cli.py`, `cli.py`
    folders: frozenset[str]  # every folder name on a tracked path
    former: frozenset[str]  # module names the history had, that name nothing now
    former_files: frozenset[str]  # module names the history had, now other files' stems

    @staticmethod
    def of(root: Path, paths: list[str], history: list[str]) -> Tree:
        """The tree of `paths` under `root`; `history` the paths its commits ever touched."""
        tails = {"/".join(p.split("/")[i:]) for p in paths for i in range(p.count("/") + 1)}
        folders = {part for p in paths for part in p.split("/")[:-1]}
        modules = [p for p in paths if p.endswith(".py")]
        stems = {Path(p).stem for p in modules}
        had = {Path(p).stem for p in history if p.endswith(".py")}
        had |= {part for p in history if p.endswith(".py") for part in p.split("/")[:-1]}
        gone = had - stems - folders
        for module in modules:  # ... and not a name the code uses now
            gone -= _read_python((root / module).read_text(errors="replace"))[1]
        other_stems = {Path(p).stem for p in paths if not p.endswith(".py")}
        return Tree(
            paths=frozenset(paths),
            tails=frozenset(tails),
            folders=frozenset(folders),
            former=frozenset(gone - other_stems),
            former_files=frozenset(gone & other_stems),
        )


@functools.cache
def _tree() -> Tree:
    shallow = subprocess.run(
        ["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    if shallow == "true":
        pytest.skip("a shallow clone: the modules the history had are not all in it")
    history = subprocess.run(
        ["git", "log", "--format=", "--name-only", "--no-renames", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return Tree.of(ROOT, _tracked_files(), history)


def prose_lines(text: str, name: str) -> list[tuple[int, str]]:
    """(line number, text) of what a file says to its reader: see the module doc."""
    suffix = Path(name).suffix
    if suffix == ".md":
        return list(enumerate(text.splitlines(), 1))
    if suffix in COMMENTED_SUFFIXES or Path(name).name in COMMENTED_NAMES:
        return [
            (number, line[line.index("#") :])
            for number, line in enumerate(text.splitlines(), 1)
            if "#" in line
        ]
    if suffix != ".py":
        return []
    return list(_read_python(text)[0])


def _word_in(word: str, path: Path) -> bool:
    return path.is_file() and re.search(rf"\b{re.escape(word)}\b", path.read_text()) is not None


def _dotted_problem(dotted: str, root: Path) -> str | None:
    """Why `dotted` (spark_apps.load.plan.Plan) names nothing here, or None."""
    if dotted in AVRO_NAMES:
        return None
    first, *rest = dotted.split(".")
    at = root / PACKAGES[first]
    for i, part in enumerate(rest):
        if part in FILE_SUFFIXES and i == len(rest) - 1:
            return None  # `logbroker.py`: a file's name, not a module path
        if (at / part).is_dir():
            at = at / part
        elif (at / f"{part}.py").is_file() or (at / f"{part}.pyx").is_file():
            module = at / f"{part}.py"
            after = rest[i + 1 : i + 2]
            if after and module.is_file() and not _word_in(after[0], module):
                return f"no {after[0]} in {module.relative_to(root)}"
            return None
        elif _word_in(part, at / "__init__.py"):
            return None  # a name the package exports
        else:
            return f"no module {part} in {at.relative_to(root)}"
    return None


def stale_references(text: str, name: str, tree: Tree, root: Path = ROOT) -> list[str]:
    """`line: reference (why)` for each file or module `text`'s prose names that is not here."""
    found = []
    for number, line in prose_lines(text, name):
        for cited in FILE_NAME.findall(line):
            first = cited.split("/")[0]
            if cited in EXTERNAL or cited in NOT_FILES or cited.startswith("__"):
                continue
            if first in TOP_FOLDERS:
                missing = cited not in tree.paths and not (root / cited).exists()
            elif "/" in cited:  # from one of our folders, else another project's
                missing = first in tree.folders and cited not in tree.tails
            else:
                missing = cited not in tree.tails
            if missing:
                found.append(f"{number}: {cited} (no such file)")
        for dotted in DOTTED.findall(line):
            why = _dotted_problem(dotted, root)
            if why:
                found.append(f"{number}: {dotted} ({why})")
        for match in re.finditer(r"(?<![\w./-])(\w+)(\.\w+)?", line):
            word, after = match.group(1), match.group(2) or ""
            dotted_on = bool(after) and after[1:] not in FILE_SUFFIXES
            if (word in tree.former_files and dotted_on) or (
                word in tree.former
                and (dotted_on or "_" in word or line[max(match.start() - 1, 0)] == "`")
                and after[1:] != "py"  # `loading.py`: reported as a file above
            ):
                found.append(f"{number}: {word}{after} (no module {word})")
    return found


def test_cited_repository_paths_exist():
    dangling = []
    for path in _tracked_text_files():
        if path == Path(__file__).resolve():
            continue  # its planted stale names
        text = path.read_text(errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            for cited in CITED_PATH.findall(line):
                if cited not in NOT_FILES and not (ROOT / cited).exists():
                    dangling.append(f"{path.relative_to(ROOT)}:{number}: {cited}")
    assert not dangling, "paths cited but not in the repository:\n" + "\n".join(dangling)


def test_prose_names_files_and_modules_that_exist():
    tree = _tree()
    here = Path(__file__).resolve()
    stale = []
    for name in _tracked_files():
        path = ROOT / name
        if path == here or "bench/results" in name:
            continue  # this file names stale ones on purpose; results keep their day's words
        if path.suffix in TEXT_SUFFIXES or path.name in COMMENTED_NAMES:
            text = path.read_text(errors="replace")
            stale += [f"{name}:{where}" for where in stale_references(text, name, tree)]
    assert not stale, "names of files or modules that are not here:\n" + "\n".join(stale)


def test_nothing_cites_documents_outside_the_repository():
    outside = []
    for path in _tracked_text_files():
        if path == Path(__file__).resolve():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                outside.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not outside, "cite docs/design.md instead of:\n" + "\n".join(outside)


# A module whose docstring and comments name what a refactor left behind, beside its code.
PLANTED = '''"""The load's entry: the work is in loading.py, the layout in `audit_layout`, read
through warehouse_fs.LocalFS, and the report in audit_quality; see load/no_such.py, and
spark_apps.load.no_such and spark_apps.load.spark_hash.no_such_name for the rest."""

# the walk is spark_apps/entry_scan.py's
PLANNED = "loading.py"  # code, not prose: a file this module may write
'''
LIVE = """# requirements.in: the walk of entries (spark_apps/source/entry_scan.py,
# `source/entry_scan.py`, entry_scan.py), and spark_apps.load.spark_hash.spark_xxhash64,
# spark_apps.source.entry_scan.PlainRun; not ours: kafka/io.py, stomp.py
"""


def test_a_stale_name_planted_in_a_docstring_is_caught(tmp_path: Path) -> None:
    """Each kind of stale reference, planted in a module's docstring and comments, in a tree
    that once had the modules named (as the history says) and has them no more."""
    for path in ("spark_apps/load/spark_hash.py", "spark_apps/source/entry_scan.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("def spark_xxhash64(): ...\nclass PlainRun: ...\n")
    (tmp_path / "spark_apps/load/cli.py").write_text(PLANTED)
    had = ["spark_apps/loading.py", "spark_apps/audit_layout.py", "spark_apps/warehouse_fs.py"]
    had += ["spark_apps/audit_quality.py", "spark_apps/entry_scan.py"]
    tree = Tree.of(tmp_path, [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.py")], had)

    found = stale_references(PLANTED, "spark_apps/load/cli.py", tree, tmp_path)

    assert found == [
        "1: loading.py (no such file)",
        "1: audit_layout (no module audit_layout)",
        "2: load/no_such.py (no such file)",
        "2: warehouse_fs.LocalFS (no module warehouse_fs)",
        "2: audit_quality (no module audit_quality)",
        "3: spark_apps.load.no_such (no module no_such in spark_apps/load)",
        "3: spark_apps.load.spark_hash.no_such_name "
        "(no no_such_name in spark_apps/load/spark_hash.py)",
        "5: spark_apps/entry_scan.py (no such file)",
    ]
    assert stale_references(LIVE, "requirements.in", tree, tmp_path) == []
    planted_md = "The layout: `audit_layout`, read through `warehouse_fs.LocalFS`.\n"
    assert len(stale_references(planted_md, "docs/audit.md", tree, tmp_path)) == 2
