"""Imports point down the layers of docs/design.md §2, checked from the source files.

    logbroker (the library)   <- spark_apps.warehouse <- spark_apps.source <- spark_apps.load
                                                      <- spark_apps.audit  <- spark_apps.jobs
    logbroker, spark_apps.warehouse <- hooks <- pipeline_ui <- dags

The library imports neither Airflow nor Spark; the warehouse package (read by the Airflow
pages and hooks) imports no Spark at module level; no module imports a layer above its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# layer -> the first-party packages it may import (itself included)
ALLOWED: dict[str, tuple[str, ...]] = {
    "logbroker": ("logbroker",),
    "spark_apps": (),
    "spark_apps.warehouse": ("logbroker", "spark_apps.warehouse"),
    "spark_apps.source": ("logbroker", "spark_apps.source"),
    "spark_apps.load": (
        "logbroker",
        "spark_apps.warehouse",
        "spark_apps.source",
        "spark_apps.session",
        "spark_apps.load",
    ),
    "spark_apps.audit": (
        "logbroker",
        "spark_apps.warehouse",
        "spark_apps.session",
        "spark_apps.audit",
    ),
    "spark_apps.session": ("spark_apps.source",),
    "spark_apps.pyfiles": ("logbroker", "spark_apps"),  # it archives both: imports their roots
    "spark_apps.jobs": ("spark_apps.load", "spark_apps.audit"),
    "hooks": ("logbroker", "spark_apps.warehouse", "spark_apps.pyfiles", "hooks"),
    "pipeline_ui": ("logbroker", "spark_apps.warehouse", "hooks", "pipeline_ui"),
    "dags": ("logbroker", "spark_apps.warehouse", "hooks"),
}
FIRST_PARTY = ("logbroker", "spark_apps", "hooks", "pipeline_ui")
# Third-party packages a layer must not import at module level (lazily, inside a function,
# is how the warehouse package reaches Spark when a caller hands it a session).
FORBIDDEN_AT_TOP = {
    "logbroker": ("airflow", "pyspark", "great_expectations", "pandas"),
    "spark_apps.warehouse": ("airflow", "pyspark", "great_expectations"),
    "spark_apps.source": ("airflow", "great_expectations"),
    "spark_apps.load": ("airflow", "great_expectations"),
    "spark_apps.audit": ("airflow",),
}


def _modules() -> list[tuple[str, Path]]:
    found = []
    for base, prefix in ((ROOT / "plugins", ""), (ROOT, "")):
        for package in ("logbroker", "hooks", "pipeline_ui", "spark_apps"):
            folder = base / package
            if not folder.is_dir():
                continue
            for path in sorted(folder.rglob("*.py")):
                dotted = ".".join(path.relative_to(base).with_suffix("").parts)
                found.append((prefix + dotted.removesuffix(".__init__"), path))
    found += [(f"dags.{p.stem}", p) for p in sorted((ROOT / "dags").glob("*.py"))]
    return found


def _layer(module: str) -> str:
    for layer in sorted(ALLOWED, key=len, reverse=True):
        if module == layer or module.startswith(layer + "."):
            return layer
    raise AssertionError(f"{module} belongs to no layer of this test: add it to ALLOWED")


def _imports(module: str, path: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, at module level) for every import of `path`."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    top_level = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                names = [f"{base}.{node.module}" if node.module else base]
            else:
                names = [node.module or ""]
        for name in names:
            out.append((name, node.lineno, id(node) in top_level))
    return out


MODULES = _modules()


def test_every_package_is_found() -> None:
    layers = {_layer(m) for m, _ in MODULES}
    assert layers == set(ALLOWED), set(ALLOWED) - layers


@pytest.mark.parametrize("module,path", MODULES, ids=[m for m, _ in MODULES])
def test_imports_point_down(module: str, path: Path) -> None:
    layer = _layer(module)
    wrong = []
    for name, line, top in _imports(module, path):
        if name.split(".")[0] in FIRST_PARTY:
            if not any(name == a or name.startswith(a + ".") for a in ALLOWED[layer]):
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
        elif top and name.split(".")[0] in FORBIDDEN_AT_TOP.get(layer, ()):
            wrong.append(f"{path.relative_to(ROOT)}:{line} imports {name} at module level")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("module,path", MODULES, ids=[m for m, _ in MODULES])
def test_no_sys_path_edits(module: str, path: Path) -> None:
    text = path.read_text()
    assert "sys.path.insert" not in text and "sys.path[:0]" not in text, path
