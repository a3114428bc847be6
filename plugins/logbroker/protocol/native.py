"""Which message-set walks run: the compiled ones (`_native`, Cython) or pure Python.

`make setup` (`pip install -e .`) compiles `_native.pyx` with the system's C compiler and
zlib; when that failed or never ran, or when the environment sets LOGBROKER_PURE_PYTHON=1,
message_set.py's pure-Python walks run, which stay the reference either way. The choice is
made once, when message_set is first imported; `logbroker --version` prints `ACTIVE`.

A Spark executor may import this package from the `--py-files` archive
(spark_apps/pyfiles.py), which carries the compiled module beside the sources; Python cannot
load a compiled module from inside an archive, so it is copied out once and loaded from there:

    <tmp>/logbroker-native-<uid>/                 ours only: a directory (not a link) owned by
        _native-<sha256 of its bytes, 16 hex><suffix>   this uid, that no group or other user
                                                  may write; the file is loaded only when its
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
_NAME = __name__.rpartition(".")[0] + "._native"


def _from_archive(temporary_root: Path | None = None) -> ModuleType | None:
    """The compiled module from the archive this package was imported from, or None.
    `temporary_root`: where the private folder goes (default: tempfile's)."""
    loader = __spec__.loader if __spec__ is not None else None
    if not isinstance(loader, zipimport.zipimporter):
        return None
    folder = Path(__spec__.origin or "").parent  # <archive>/logbroker/protocol
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        try:
            data = loader.get_data(str(folder / f"_native{suffix}"))
        except OSError:
            continue
        root = temporary_root or Path(tempfile.gettempdir())
        cache = root / f"logbroker-native-{os.getuid()}"
        cache.mkdir(mode=0o700, exist_ok=True)
        problem = not_private(cache, os.getuid())
        if problem is None:
            return _load_file(_copy(cache, data, suffix))
        warnings.warn(
            f"logbroker: not loading the compiled module from {cache}: {problem}; loading it "
            "from a fresh private folder instead",
            RuntimeWarning,
            stacklevel=2,
        )
        fresh = Path(tempfile.mkdtemp(prefix="logbroker-native-", dir=root))  # 0o700, ours
        try:  # a loaded shared object no longer needs its file
            return _load_file(_copy(fresh, data, suffix))
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


def _copy(cache: Path, data: bytes, suffix: str) -> Path:
    """The module's file in `cache` (a private folder), named by its digest, whose bytes are
    checked against that name: a file there with other bytes (cut short, changed) is
    written again."""
    digest = hashlib.sha256(data).hexdigest()
    target = cache / f"_native-{digest[:16]}{suffix}"
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


def _load_file(target: Path) -> ModuleType | None:
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
