"""A module of the test suite that a benchmark reuses, loaded from its file.

tests/ is not an installed package and nothing edits sys.path (tests/test_layers.py checks
it), so a benchmark that needs one of the suite's fixtures (the analysis cluster of
tests/spark/helpers.py, the synthetic warehouse of tests/support/synthetic_warehouse.py)
loads that one file by its path. The file may import installed packages only (logbroker,
spark_apps, third-party ones), never another module of tests/.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load(relative: str) -> ModuleType:
    """The module in file `relative` (from the repository root, e.g. "tests/spark/helpers.py"),
    executed once and registered in sys.modules under its dotted name."""
    name = ".".join(Path(relative).with_suffix("").parts)
    if name in sys.modules:
        return sys.modules[name]
    path = ROOT / relative
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such test-suite module for the benchmark")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None  # a .py file always has both
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # a dataclass looks its module up there while it is built
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
