"""Which message-set walks run: the compiled ones (Cython) or pure Python.

    module      twin of the walks in            exposed here as
    _native     message_set.py (0.7), requests.py, spark_apps/source/entry_kernels.py
                                                COMPILED, IN_USE
    _native08   kafka08/message_set.py (0.8)    COMPILED08, IN_USE08

`make setup` (`pip install -e .`) compiles both `.pyx` with the system's C compiler and zlib;
when that failed or never ran, or when the environment sets LOGBROKER_PURE_PYTHON=1, the
pure-Python walks run, which stay the reference either way. The choice is made once, when
this module is first imported; `logbroker --version` prints `ACTIVE`.

A Spark executor may import this package from the `--py-files` archive
(spark_apps/pyfiles.py), which carries the compiled module beside the sources; Python cannot
load a compiled module from inside an archive, so it is copied out once and loaded from there:

    <tmp>/logbroker-native-<uid>/                 ours only: a directory (not a link) owned by
        _native-<sha256 of its bytes, 16 hex><suffix>   this uid, that no group or other user
        _native08-<sha256 ...><suffix>            may write; a file is loaded only when its
                                                  bytes hash to its name (else written again)

Another local user can create that folder first, in a shared /tmp: a folder that is not ours
only is refused (a warning names it), and the module is loaded from a fresh private folder
(mkdtemp) that is removed once it is loaded. Where it does not load (another platform), the
pure-Python walks run.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import stat
import sys
import tempfile
import warnings
import zipimport
from pathlib import Path
from types import ModuleType

PURE_PYTHON_ENV = "LOGBROKER_PURE_PYTHON"
_PACKAGE = __name__.rpartition(".")[0]


def _from_archive(temporary_root: Path | None = None, module: str = "_native") -> ModuleType | None:
    """The compiled `module` from the archive this package was imported from, or None.
    `temporary_root`: where the private folder goes (default: tempfile's)."""
    loader = __spec__.loader if __spec__ is not None else None
    if not isinstance(loader, zipimport.zipimporter):
        return None
    folder = Path(__spec__.origin or "").parent  # <archive>/logbroker/protocol
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        try:
            data = loader.get_data(str(folder / f"{module}{suffix}"))
        except OSError:
            continue
        root = temporary_root or Path(tempfile.gettempdir())
        cache = root / f"logbroker-native-{os.getuid()}"
        cache.mkdir(mode=0o700, exist_ok=True)
        problem = not_private(cache, os.getuid())
        if problem is None:
            return _load_file(_copy(cache, data, suffix, module), module)
        warnings.warn(
            f"logbroker: not loading the compiled module from {cache}: {problem}; loading it "
            "from a fresh private folder instead",
            RuntimeWarning,
            stacklevel=2,
        )
        fresh = Path(tempfile.mkdtemp(prefix="logbroker-native-", dir=root))  # 0o700, ours
        try:  # a loaded shared object no longer needs its file
            return _load_file(_copy(fresh, data, suffix, module), module)
        finally:
            shutil.rmtree(fresh, ignore_errors=True)
    return None


def not_private(folder: Path, uid: int) -> str | None:
    """Why `folder` is not a place only `uid` can write to, or None when it is."""
    info = folder.lstat()  # a link is refused, not followed
    if not stat.S_ISDIR(info.st_mode):
        return "not a directory (a link, or a file)"
    if info.st_uid != uid:
        return f"owned by uid {info.st_uid}, not {uid}"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"mode {stat.S_IMODE(info.st_mode):o}: others may write to it"
    return None


def _copy(cache: Path, data: bytes, suffix: str, module: str = "_native") -> Path:
    """The module's file in `cache` (a private folder), named by its digest, whose bytes are
    checked against that name: a file there with other bytes (cut short, changed) is
    written again."""
    digest = hashlib.sha256(data).hexdigest()
    target = cache / f"{module}-{digest[:16]}{suffix}"
    try:
        present = hashlib.sha256(target.read_bytes()).hexdigest()
    except FileNotFoundError:
        present = None
    if present != digest:
        fd, temporary = tempfile.mkstemp(dir=cache, suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temporary, target)  # a concurrent worker wrote the same bytes
    return target


def _load_file(target: Path, module: str = "_native") -> ModuleType | None:
    name = f"{_PACKAGE}.{module}"
    spec = importlib.util.spec_from_file_location(name, target)
    if spec is None or spec.loader is None:
        return None
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded
    try:
        spec.loader.exec_module(loaded)
    except BaseException:
        del sys.modules[name]
        raise
    return loaded


def _import(module: str) -> ModuleType | None:
    """The compiled `module` (installed, or from the --py-files archive), None if not built."""
    try:
        return importlib.import_module(f"{_PACKAGE}.{module}")
    except ImportError:
        try:
            return _from_archive(module=module)
        except (ImportError, OSError):
            return None


Loaded = tuple[ModuleType | None, ModuleType | None, ModuleType | None, ModuleType | None, str]


def _load() -> Loaded:
    """(_native if built, if in use; _native08 if built, if in use; what `--version` says)."""
    compiled, compiled08 = _import("_native"), _import("_native08")
    if compiled is None and compiled08 is None:
        return None, None, None, None, "pure Python (extension not built)"
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        return compiled, None, compiled08, None, f"pure Python ({PURE_PYTHON_ENV}=1)"
    if compiled08 is None:  # one built and not the other (setup.py builds both): say so
        active = "compiled (Cython), but the 0.8 walks in pure Python (_native08 not built)"
    elif compiled is None:
        active = "pure Python (extension not built), but the 0.8 walks compiled (_native08)"
    else:
        active = "compiled (Cython)"
    return compiled, compiled, compiled08, compiled08, active


# COMPILED, COMPILED08: the extensions whenever they are built (tests run them even when
# they are not in use); IN_USE, IN_USE08: what the walks run, None for pure Python.
COMPILED, IN_USE, COMPILED08, IN_USE08, ACTIVE = _load()
