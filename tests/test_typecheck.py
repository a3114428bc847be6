"""mypy --strict passes over what pyproject.toml's [tool.mypy] names (the library and the
pipeline), run as `make typecheck` runs it: a type error there fails the suite. And the
third-party packages [tool.mypy] does not follow are imported by none of those modules."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # from scratch it checks every file; .mypy_cache makes later runs quick
def test_mypy_strict_passes() -> None:
    env = {**os.environ, "MYPYPATH": "plugins"}  # the checked-out plugins/, as the Makefile
    done = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, f"mypy (make typecheck) failed:\n{done.stdout}{done.stderr}"


def imported_packages(path: Path) -> set[str]:
    """The top-level packages a module imports (relative imports are ours)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def test_no_module_checked_imports_a_package_mypy_skips() -> None:
    # Skipped, a package's names are Any to mypy: a module of ours using one would go
    # unchecked where it touches it, with no error to say so.
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    skipped = {
        pattern.removesuffix(".*")
        for override in config.get("overrides", [])
        if override.get("follow_imports") == "skip"
        for pattern in override["module"]
    }
    assert skipped, "pyproject.toml's [tool.mypy] skips no package: this test has nothing to do"
    checked = [p for name in config["files"] for p in sorted((ROOT / name).rglob("*.py"))]
    assert len(checked) > 100
    using = {
        str(path.relative_to(ROOT)): sorted(imported_packages(path) & skipped) for path in checked
    }
    assert not {k: v for k, v in using.items() if v}, (
        "these modules import packages pyproject.toml's [tool.mypy] does not follow; "
        "take the packages off its follow_imports = skip list"
    )
