"""The archive of our Python packages that spark-submit ships to executors (`--py-files`).

Spark pickles the data source's classes and the load's task functions by reference, so every
Python worker must import `spark_apps`, `pipeline_warehouse` and `logbroker`. Where the
project is installed (this machine, an image built from the Dockerfile) they already can;
executors on other hosts get them from this archive, which spark-submit puts on their
PYTHONPATH:

    <cache>/pyfiles-<sha256 of the sources, 16 hex>.zip
        logbroker/...           the library (plugins/logbroker), with its compiled module for
                                this Python (protocol/_native*.so, which
                                logbroker.protocol.native copies out of the archive to load:
                                the same walks as here)
        pipeline_warehouse/...  the warehouse's files (plugins/pipeline_warehouse)
        spark_apps/...          the Spark applications

The name is a digest of the files' paths and bytes, so an unchanged tree reuses the same
archive (same path and mtime: numba's cache of the compiled readers, keyed by the archive's
path and stat, stays valid), and a change makes a new one. Entries carry a fixed timestamp,
so the same sources always give the same bytes.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import os
import tempfile
import zipfile
from pathlib import Path

PACKAGES = ("logbroker", "pipeline_warehouse", "spark_apps")
FIXED_TIME = (2026, 1, 1, 0, 0, 0)


def package_dirs() -> dict[str, Path]:
    """Where the packages of the archive are imported from here."""
    import logbroker
    import pipeline_warehouse
    import spark_apps

    return {
        "logbroker": Path(logbroker.__file__).resolve().parent,
        "pipeline_warehouse": Path(pipeline_warehouse.__file__).resolve().parent,
        "spark_apps": Path(spark_apps.__file__).resolve().parent,
    }


def _sources(dirs: dict[str, Path]) -> list[tuple[str, Path]]:
    """The packages' .py files and their compiled modules for this Python (built in place)."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    files = []
    for name, folder in sorted(dirs.items()):
        for path in sorted(folder.rglob("*")):
            shipped = path.suffix == ".py" or path.name.endswith(suffixes)
            if shipped and path.is_file() and "__pycache__" not in path.parts:
                files.append((f"{name}/{path.relative_to(folder).as_posix()}", path))
    return files


def default_cache_dir() -> Path:
    configured = os.environ.get("LOGBROKER_PYFILES_DIR")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "logbroker"


def build_archive(cache_dir: Path | None = None) -> Path:
    """The archive of the current sources (built once per distinct tree); its path."""
    files = _sources(package_dirs())
    digest = hashlib.sha256()
    for arcname, path in files:
        digest.update(arcname.encode() + b"\0" + path.read_bytes() + b"\0")
    folder = cache_dir or default_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / f"pyfiles-{digest.hexdigest()[:16]}.zip"
    if archive.exists():
        return archive
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".pyfiles-", suffix=".zip.tmp")
    os.close(fd)
    try:
        with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as out:
            for arcname, path in files:
                info = zipfile.ZipInfo(arcname, FIXED_TIME)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                out.writestr(info, path.read_bytes())
        os.replace(temporary, archive)  # a concurrent builder wrote the same bytes
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return archive
