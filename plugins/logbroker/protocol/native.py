"""Which message-set walks run: the compiled ones (`_native`, Cython) or pure Python.

`make setup` (`pip install -e .`) compiles `_native.pyx` with the system's C compiler and
zlib; when that failed or never ran, or when the environment sets LOGBROKER_PURE_PYTHON=1,
message_set.py's pure-Python walks run, which stay the reference either way. The choice is
made once, when message_set is first imported; `logbroker --version` prints `ACTIVE`.

A Spark executor may import this package from the `--py-files` archive
(spark_apps/pyfiles.py), which carries the compiled module beside the sources; Python cannot
load a compiled module from inside an archive, so it is copied out once (to
`<tmp>/logbroker-native-<uid>/`, named by its digest) and loaded from there. Where it does
not load (another platform), the pure-Python walks run.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import tempfile
import zipimport
from pathlib import Path
from types import ModuleType

PURE_PYTHON_ENV = "LOGBROKER_PURE_PYTHON"
_NAME = __name__.rpartition(".")[0] + "._native"


def _from_archive() -> ModuleType | None:
    """The compiled module from the archive this package was imported from, or None."""
    loader = __spec__.loader if __spec__ is not None else None
    if not isinstance(loader, zipimport.zipimporter):
        return None
    folder = Path(__spec__.origin or "").parent  # <archive>/logbroker/protocol
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        try:
            data = loader.get_data(str(folder / f"_native{suffix}"))
        except OSError:
            continue
        cache = Path(tempfile.gettempdir()) / f"logbroker-native-{os.getuid()}"
        cache.mkdir(mode=0o700, exist_ok=True)
        target = cache / f"_native-{hashlib.sha256(data).hexdigest()[:16]}{suffix}"
        if not target.exists():
            fd, temporary = tempfile.mkstemp(dir=cache, suffix=".tmp")
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(temporary, target)  # a concurrent worker wrote the same bytes
        spec = importlib.util.spec_from_file_location(_NAME, target)
        if spec is None or spec.loader is None:
            return None
        module = importlib.util.module_from_spec(spec)
        sys.modules[_NAME] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[_NAME]
            raise
        return module
    return None


def _load() -> tuple[ModuleType | None, ModuleType | None, str]:
    """(the compiled module if built, the one to use, what `--version` says)."""
    compiled: ModuleType | None
    try:
        from . import _native as compiled
    except ImportError:
        try:
            compiled = _from_archive()
        except (ImportError, OSError):
            compiled = None
    if compiled is None:
        return None, None, "pure Python (extension not built)"
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        return compiled, None, f"pure Python ({PURE_PYTHON_ENV}=1)"
    return compiled, compiled, "compiled (Cython)"


# COMPILED: the extension whenever it is built (tests run it even when it is not in use);
# IN_USE: what message_set runs, None for pure Python.
COMPILED, IN_USE, ACTIVE = _load()
