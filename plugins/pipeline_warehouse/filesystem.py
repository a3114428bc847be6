"""The warehouse's filesystem: one interface, two implementations (one here, one plugged in).

Paths are URI strings (`file:///data/wh/page_views`, `hdfs://nn:8020/wh`, `memory://wh`);
`join` appends parts with `/`. Nothing here assumes a local path.

    FsspecFS   (this module)  Python's side: fsspec's filesystem of the URI's scheme
               (`file://`, WebHDFS, `s3://` where s3fs is installed, `memory://`, ...), for
               readers that must not start a JVM: the Airflow pages, the hooks, the audit's
               asset announcements, tests.
    HadoopFS   (spark_apps/hadoop_fs.py, the Spark jobs' own) Spark's side: Hadoop's
               FileSystem through Spark's JVM, with the session's Hadoop settings: whatever
               the jobs' Spark reads, this can list, write and rename. The load and the audit
               change the warehouse through it.

What the calls guarantee, on both:

    list(uri)            direct children as FileEntry, sorted by name; [] when `uri` is missing
    write_bytes(uri, b)  the whole file or nothing: written to a hidden temporary name beside
                         it, then renamed over it (atomic on POSIX and HDFS; a delete and a
                         rename on a store with no FileContext binding: hadoop_fs.py)
    rename(src, dst)     one rename, atomic on HDFS and POSIX; `dst` must not exist (an error
                         that names both), its parent is made
    delete(uri)          recursive; False when nothing was there
    parquet_rows(uri)    rows of the Parquet data files directly in directory `uri`, from
                         their footers (no Spark job); parquet_file_rows(uri): of one file

An `hdfs://` warehouse is read on the Python side through WebHDFS (`python_uri`): the
namenode's HTTP port serves the same files without Hadoop's native client (libhdfs).
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

WEBHDFS_PORT = 9870  # Hadoop 3's namenode HTTP port, where WebHDFS answers


class WarehouseFileSystemError(OSError):
    """A filesystem call failed: the message names the call and the paths."""


@dataclass(frozen=True)
class FileEntry:
    """One entry of a directory listing: its full URI, last path element, kind and size."""

    uri: str
    name: str
    is_dir: bool
    size: int
    modified_ms: int = 0


class WarehouseFS(Protocol):
    def exists(self, uri: str) -> bool: ...
    def list(self, uri: str) -> list[FileEntry]: ...
    def read_bytes(self, uri: str) -> bytes: ...
    def read_text(self, uri: str) -> str: ...
    def mkdirs(self, uri: str) -> None: ...
    def write_bytes(self, uri: str, data: bytes) -> None: ...
    def write_text(self, uri: str, text: str) -> None: ...
    def rename(self, src: str, dst: str) -> None: ...
    def delete(self, uri: str, recursive: bool = True) -> bool: ...
    def parquet_rows(self, uri: str) -> int: ...
    def parquet_file_rows(self, uri: str) -> int: ...


# -- paths ---------------------------------------------------------------------------------


def join(base: str, *parts: str) -> str:
    """`base` and path elements joined with '/' (URIs, not OS paths)."""
    out = base.rstrip("/")
    for part in parts:
        out = f"{out}/{part.strip('/')}"
    return out


def parent(uri: str) -> str:
    return uri.rstrip("/").rsplit("/", 1)[0]


def basename(uri: str) -> str:
    return uri.rstrip("/").rsplit("/", 1)[-1]


_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def as_uri(location: str, root: Path | None = None) -> str:
    """A warehouse location as a URI: 'wh' or '/data/wh' -> 'file:///abs/wh' (relative to
    `root`, else the working directory; '..' taken out); URIs are kept, without a trailing '/'."""
    if location.startswith("file:"):
        return Path(unquote(urlparse(location).path)).absolute().as_uri()
    if _SCHEME.match(location):
        return location.rstrip("/")
    path = Path(location)
    if not path.is_absolute() and root is not None:
        path = root / path
    return Path(os.path.normpath(path.absolute())).as_uri()


def is_local(uri: str) -> bool:
    return uri.startswith("file:") or not _SCHEME.match(uri)


def local_path(uri: str) -> Path:
    """The OS path of a `file:` URI (or of a plain path)."""
    if uri.startswith("file:"):
        return Path(unquote(urlparse(uri).path))
    return Path(uri)


def visible(entry: FileEntry) -> bool:
    """Hadoop's rule: names starting with '_' or '.' are metadata, not data."""
    return not entry.name.startswith(("_", "."))


def parquet_files(fs: WarehouseFS, directory: str) -> list[FileEntry]:
    """The Parquet data files directly in `directory` ([] when it does not exist)."""
    return [
        e for e in fs.list(directory) if not e.is_dir and visible(e) and e.name.endswith(".parquet")
    ]


def temporary_name(uri: str) -> str:
    """A hidden name beside `uri` for writing it whole before a rename."""
    return join(parent(uri), f".{basename(uri)}.{uuid.uuid4().hex[:12]}.tmp")


def python_uri(uri: str, webhdfs_port: int = WEBHDFS_PORT) -> str:
    """The URI through which Python reads the same files: `hdfs://nn[:port]/p` becomes
    `webhdfs://nn:<webhdfs_port>/p` (Hadoop's HTTP API: no native client needed); every
    other URI is kept."""
    parsed = urlparse(uri)
    if parsed.scheme != "hdfs":
        return uri
    return f"webhdfs://{parsed.hostname}:{webhdfs_port}{parsed.path}"


# -- directory swaps (the audit's results) -----------------------------------------------


REPLACED = "_replaced"


def replace_dir(fs: WarehouseFS, staged: str, target: str) -> None:
    """Put directory `staged` at `target`, replacing what was there. Two renames: the old one
    moves aside under `_replaced/` beside it, the new one moves in, the old one is deleted. A
    crash between the renames leaves the old directory aside; `recover_replaced` puts it back."""
    aside = join(parent(target), REPLACED, f"{basename(target)}.{uuid.uuid4().hex[:8]}")
    had_old = fs.exists(target)
    if had_old:
        fs.rename(target, aside)
    fs.rename(staged, target)
    if had_old:
        fs.delete(aside)


def recover_replaced(fs: WarehouseFS, directory: str) -> list[str]:
    """Put back what a crashed replace_dir() left aside in `directory`; the names put back."""
    restored = []
    for entry in fs.list(join(directory, REPLACED)):
        name = entry.name.rsplit(".", 1)[0]
        target = join(directory, name)
        if fs.exists(target):
            fs.delete(entry.uri)
        else:
            fs.rename(entry.uri, target)
            restored.append(name)
    return restored


# -- fsspec --------------------------------------------------------------------------------


class FsspecFS:
    """The interface over fsspec, for any URI fsspec has a filesystem for.

    One fsspec filesystem per scheme and authority, made on first use (fsspec caches them
    too). An `hdfs://` URI is served through WebHDFS (`python_uri`), never through fsspec's
    own `hdfs://`, which is pyarrow's client over Hadoop's native library (libhdfs) and a JVM;
    the entries listed keep the caller's URI.
    """

    def __init__(self, storage_options: dict[str, Any] | None = None) -> None:
        self._options = dict(storage_options or {})
        self._filesystems: dict[str, Any] = {}

    def _fs(self, uri: str) -> tuple[Any, str]:
        from fsspec.core import url_to_fs

        uri = python_uri(uri)
        parsed = urlparse(uri)
        key = f"{parsed.scheme}://{parsed.netloc}"
        if key in self._filesystems:
            fs = self._filesystems[key]
            return fs, fs._strip_protocol(uri)
        fs, path = url_to_fs(uri, **self._options)
        self._filesystems[key] = fs
        return fs, path

    def exists(self, uri: str) -> bool:
        fs, path = self._fs(uri)
        return bool(fs.exists(path))

    def list(self, uri: str) -> list[FileEntry]:
        fs, path = self._fs(uri)
        try:
            infos = fs.ls(path, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return []
        base = uri.rstrip("/")
        entries = []
        for info in infos:
            name = str(info["name"]).rstrip("/").rsplit("/", 1)[-1]
            if info.get("type") != "directory" and str(info["name"]).rstrip("/") == path.rstrip(
                "/"
            ):
                return []  # `uri` is a file
            modified = info.get("mtime") or info.get("modificationTime") or 0
            if hasattr(modified, "timestamp"):
                modified = modified.timestamp() * 1000
            elif isinstance(modified, float):
                modified *= 1000
            entries.append(
                FileEntry(
                    uri=f"{base}/{name}",
                    name=name,
                    is_dir=info.get("type") == "directory",
                    size=int(info.get("size") or 0),
                    modified_ms=int(modified),
                )
            )
        return sorted(entries, key=lambda e: e.name)

    def read_bytes(self, uri: str) -> bytes:
        fs, path = self._fs(uri)
        try:
            return bytes(fs.cat_file(path))
        except IsADirectoryError:
            raise FileNotFoundError(uri) from None

    def read_text(self, uri: str) -> str:
        return self.read_bytes(uri).decode("utf-8")

    def mkdirs(self, uri: str) -> None:
        fs, path = self._fs(uri)
        fs.makedirs(path, exist_ok=True)

    def write_bytes(self, uri: str, data: bytes) -> None:
        fs, path = self._fs(uri)
        fs.makedirs(self._fs(parent(uri))[1], exist_ok=True)
        temporary = self._fs(temporary_name(uri))[1]
        fs.pipe_file(temporary, data)
        try:
            fs.mv(temporary, path)  # local: os.replace; elsewhere the store's own move
        except Exception:
            fs.rm(temporary)
            raise

    def write_text(self, uri: str, text: str) -> None:
        self.write_bytes(uri, text.encode("utf-8"))

    def rename(self, src: str, dst: str) -> None:
        fs, source = self._fs(src)
        target = self._fs(dst)[1]
        if fs.exists(target):
            raise WarehouseFileSystemError(f"rename {src} -> {dst}: the target exists")
        fs.makedirs(self._fs(parent(dst))[1], exist_ok=True)
        fs.mv(source, target, recursive=True)

    def delete(self, uri: str, recursive: bool = True) -> bool:
        fs, path = self._fs(uri)
        if not fs.exists(path):
            return False
        fs.rm(path, recursive=recursive)
        return True

    def parquet_rows(self, uri: str) -> int:
        return sum(self.parquet_file_rows(e.uri) for e in parquet_files(self, uri))

    def parquet_file_rows(self, uri: str) -> int:
        """Rows of one Parquet file, from its footer."""
        import pyarrow.parquet as pq

        fs, path = self._fs(uri)
        with fs.open(path, "rb") as handle:
            return int(pq.ParquetFile(handle).metadata.num_rows)
