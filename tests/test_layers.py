"""Imports point down the layers of docs/design.md §2, checked from the source files: between
the project's packages, and between the library's own packages (LIBRARY).

    logbroker (the library)  <- pipeline_warehouse <- spark_apps.hadoop_fs     <- spark_apps.load
                                                   <- spark_apps.summary_counts <- spark_apps.audit
                             <- spark_apps.source                               <- spark_apps.load
    spark_apps.load, spark_apps.audit <- spark_apps.jobs
    logbroker, pipeline_warehouse <- hooks <- pipeline_ui <- dags
    logbroker (its stacks included)  <- harness (the tests' tools, in the checkout only)

The library imports neither Airflow nor Spark; the warehouse package (read by the Airflow
pages and hooks) imports no Spark at all, not even lazily: the Spark jobs plug Hadoop's
filesystem into it (spark_apps.hadoop_fs) and count load summaries with their own queries
(spark_apps.summary_counts); no module imports a layer above its own.
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
    "pipeline_warehouse": ("logbroker", "pipeline_warehouse"),
    "spark_apps.source": ("logbroker", "spark_apps.source"),
    "spark_apps.hadoop_fs": ("pipeline_warehouse", "spark_apps.hadoop_fs"),
    "spark_apps.summary_counts": ("pipeline_warehouse", "spark_apps.summary_counts"),
    "spark_apps.load": (
        "logbroker",
        "pipeline_warehouse",
        "spark_apps.hadoop_fs",
        "spark_apps.summary_counts",
        "spark_apps.source",
        "spark_apps.session",
        "spark_apps.load",
    ),
    "spark_apps.audit": (
        "logbroker",
        "pipeline_warehouse",
        "spark_apps.hadoop_fs",
        "spark_apps.summary_counts",
        "spark_apps.session",
        "spark_apps.audit",
    ),
    "spark_apps.session": ("spark_apps.source", "spark_apps.class_archive"),
    # the JVM options that map Spark's class archive: the sessions' and the submits' own
    "spark_apps.class_archive": (),
    # it archives the three: imports their roots
    "spark_apps.pyfiles": ("logbroker", "pipeline_warehouse", "spark_apps"),
    "spark_apps.jobs": ("spark_apps.load", "spark_apps.audit"),
    "hooks": (
        "logbroker",
        "pipeline_warehouse",
        "spark_apps.pyfiles",
        "spark_apps.class_archive",
        "hooks",
    ),
    "pipeline_ui": ("logbroker", "pipeline_warehouse", "hooks", "pipeline_ui"),
    "dags": ("logbroker", "pipeline_warehouse", "hooks"),
    # the tests' tools (not installed): on the library and its stacks, never the other way
    "harness": ("logbroker", "harness"),
}
FIRST_PARTY = ("logbroker", "pipeline_warehouse", "spark_apps", "hooks", "pipeline_ui", "harness")
# Third-party packages a layer must not import at module level (lazily, inside a function,
# is how the jobs reach Spark only when they run one)...
FORBIDDEN_AT_TOP = {
    "logbroker": ("airflow", "pyspark", "great_expectations", "pandas"),
    "spark_apps.source": ("airflow", "great_expectations"),
    "spark_apps.load": ("airflow", "great_expectations"),
    "spark_apps.audit": ("airflow",),
}
# ... and anywhere, lazily or not: the warehouse package is read by the Airflow pages and
# hooks, which have no Spark (the Spark jobs plug their Hadoop filesystem into it).
FORBIDDEN = {"pipeline_warehouse": ("airflow", "pyspark", "great_expectations", "pandas")}


def _modules() -> list[tuple[str, Path]]:
    found = []
    for base, prefix in ((ROOT / "plugins", ""), (ROOT, "")):
        for package in ("logbroker", "pipeline_warehouse", "hooks", "pipeline_ui", "spark_apps"):
            folder = base / package
            if not folder.is_dir():
                continue
            for path in sorted(folder.rglob("*.py")):
                dotted = ".".join(path.relative_to(base).with_suffix("").parts)
                found.append((prefix + dotted.removesuffix(".__init__"), path))
    found += [(f"dags.{p.stem}", p) for p in sorted((ROOT / "dags").glob("*.py"))]
    for path in sorted((ROOT / "harness").rglob("*.py")):
        dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found.append((dotted.removesuffix(".__init__"), path))
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
        elif name.split(".")[0] in FORBIDDEN.get(layer, ()):
            wrong.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not wrong, "\n".join(wrong)


# Inside the library, its packages by docs/design.md §2, bottom up: each may import the ones
# named (and itself). The broker (server) hands its replica fetchers the client's connection:
# the one sideways import, and only in server/broker.py, the composition of a broker.
LIBRARY: dict[str, tuple[str, ...]] = {
    "protocol": (),
    "coordination": ("protocol",),
    # who a connection is (TLS contexts and principals, listeners, certificates; SASL and
    # its credentials) and what it may do (the ACLs): on Python's ssl, kazoo, the protocol's
    # error codes and the replication state's listener names
    "security": ("protocol", "coordination"),
    "config": ("protocol", "coordination", "security"),
    "storage": ("protocol", "config"),
    "serde": ("protocol",),
    "client": ("protocol", "coordination", "config", "security"),
    "replication": ("protocol", "coordination", "config", "storage"),
    "server": (
        "protocol",
        "coordination",
        "config",
        "storage",
        "replication",
        "client",
        "security",
    ),
    "audit": ("protocol", "client", "serde"),
    # the mirror's two .properties files carry their clusters' credentials (security.client)
    "mirror": ("protocol", "coordination", "config", "client", "serde", "audit", "security"),
    # the stacks run brokers, Airflow, Spark and PostgreSQL as processes: no server, no
    # storage; `make up`'s secures its brokers (certificates, users, ACLs: security)
    "stack": (
        "protocol",
        "coordination",
        "config",
        "client",
        "serde",
        "audit",
        "include_files",
        "security",
    ),
    "logging_setup": (),
    "include_files": (),  # where include/'s files are installed
    "commands": (
        "protocol",
        "coordination",
        "config",
        "storage",
        "serde",
        "client",
        "replication",
        "server",
        "audit",
        "mirror",
        "stack",
        "logging_setup",
        "security",
    ),
    "cli": ("commands", "logging_setup", "protocol"),
}
SIDEWAYS = {("server", "client"): {"logbroker.server.broker"}}
LIBRARY_MODULES = [(m, p) for m, p in MODULES if m.startswith("logbroker.")]


@pytest.mark.parametrize("module,path", LIBRARY_MODULES, ids=[m for m, _ in LIBRARY_MODULES])
def test_the_librarys_packages_import_down(module: str, path: Path) -> None:
    own = module.split(".")[1]
    assert own in LIBRARY, f"{module}: add its package to LIBRARY"
    wrong = []
    for name, line, _top in _imports(module, path):
        parts = name.split(".")
        if parts[0] != "logbroker" or len(parts) < 2 or parts[1] in (own, "__version__"):
            continue
        other = parts[1]
        allowed = other in LIBRARY[own]
        if allowed and (own, other) in SIDEWAYS:
            allowed = module in SIDEWAYS[(own, other)]
        if not allowed:
            wrong.append(f"{path.relative_to(ROOT)}:{line} ({own}) imports {name}")
    assert not wrong, "\n".join(wrong)


# Every Python file of the repository, not only the packages: the installed project is what
# imports resolve against, from the DAGs, the benchmarks, the scripts and the tests alike.
SOURCES = sorted(
    path
    for folder in ("plugins", "spark_apps", "dags", "harness", "bench", "scripts", "tests")
    for path in (ROOT / folder).rglob("*.py")
)
_PATH_METHODS = {"insert", "append", "extend", "remove", "pop", "clear", "__setitem__"}


def _is_sys_path(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def _sys_path_edits(source: str, filename: str = "<source>") -> list[str]:
    """'line: what' for every change of the import path in `source`: sys.path called with a
    list method, assigned, sliced into or deleted from; site.addsitedir; PYTHONPATH edited."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if _is_sys_path(target) or (
                isinstance(target, ast.Subscript) and _is_sys_path(target.value)
            ):
                found.append(f"{node.lineno}: sys.path assigned")
            if (
                isinstance(target, ast.Subscript)
                and isinstance(target.slice, ast.Constant)
                and target.slice.value == "PYTHONPATH"
            ):
                found.append(f"{node.lineno}: PYTHONPATH edited")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if _is_sys_path(node.func.value) and node.func.attr in _PATH_METHODS:
                found.append(f"{node.lineno}: sys.path.{node.func.attr}")
            if node.func.attr == "addsitedir":
                found.append(f"{node.lineno}: addsitedir")
        if isinstance(node, ast.Call) and any(k.arg == "PYTHONPATH" for k in node.keywords):
            found.append(f"{node.lineno}: PYTHONPATH edited")
        if isinstance(node, ast.Dict) and any(
            isinstance(k, ast.Constant) and k.value == "PYTHONPATH" for k in node.keys
        ):
            found.append(f"{node.lineno}: PYTHONPATH edited")
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "sys"
            and any(alias.name == "path" for alias in node.names)
        ):
            found.append(f"{node.lineno}: from sys import path")
    return found


def test_every_kind_of_sys_path_edit_is_found() -> None:
    edits = [
        "sys.path.insert(0, 'x')",
        "sys.path.append('x')",
        "sys.path[:0] = ['x']",
        "sys.path = ['x']",
        "sys.path += ['x']",
        "del sys.path[0]",
        "site.addsitedir('x')",
        "os.environ['PYTHONPATH'] = 'x'",
        "env = dict(os.environ, PYTHONPATH='x')",
        "env = {**os.environ, 'PYTHONPATH': 'x'}",
        "from sys import argv, path",
    ]
    for edit in edits:
        assert _sys_path_edits(edit), edit
    reads = "import sys\nprint(sys.path[0], list(sys.path), os.environ.get('PYTHONPATH'))"
    assert _sys_path_edits(reads) == []


def test_the_scan_covers_bench_scripts_and_tests() -> None:
    for path in (
        ROOT / "bench" / "run.py",
        ROOT / "bench" / "systems" / "tcp.py",
        ROOT / "scripts" / "demo.py",
        Path(__file__).resolve(),
        *(path for _, path in MODULES),
    ):
        assert path in SOURCES, path


@pytest.mark.parametrize("path", SOURCES, ids=[str(p.relative_to(ROOT)) for p in SOURCES])
def test_no_sys_path_edits(path: Path) -> None:
    """Imports resolve against the installed project (make setup: pip install -e .) and, for a
    script, its own directory, which Python puts first: nothing edits the import path."""
    edits = _sys_path_edits(path.read_text(), str(path))
    assert not edits, "\n".join(f"{path.relative_to(ROOT)}:{e}" for e in edits)
