"""Which message-set walks run: the compiled ones (`_native`, Cython) or pure Python.

`make setup` (`pip install -e .`) compiles `_native.pyx` with the system's C compiler and
zlib; when that failed or never ran, or when the environment sets LOGBROKER_PURE_PYTHON=1,
message_set.py's pure-Python walks run, which stay the reference either way. The choice is
made once, when message_set is first imported; `logbroker --version` prints `ACTIVE`.
"""

from __future__ import annotations

import os
from types import ModuleType

PURE_PYTHON_ENV = "LOGBROKER_PURE_PYTHON"


def _load() -> tuple[ModuleType | None, ModuleType | None, str]:
    """(the compiled module if built, the one to use, what `--version` says)."""
    try:
        from . import _native
    except ImportError:
        return None, None, "pure Python (extension not built)"
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        return _native, None, f"pure Python ({PURE_PYTHON_ENV}=1)"
    return _native, _native, "compiled (Cython)"


# COMPILED: the extension whenever it is built (tests run it even when it is not in use);
# IN_USE: what message_set runs, None for pure Python.
COMPILED, IN_USE, ACTIVE = _load()
