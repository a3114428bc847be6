"""Files of the warehouse, on any Hadoop filesystem URI (`file://`, `hdfs://`, `s3a://`).

Two implementations of one small interface (`WarehouseFS`):

- `HadoopFS`: Hadoop's FileSystem API through Spark's JVM (py4j), with the SparkContext's
  Hadoop configuration: whatever Spark can read, this can list, read, write and rename. The
  applications use it for every change (staging, renames, deletes). Reads of `file:` URIs take
  a shortcut through Python's own I/O (hundreds of small JSON files cost one py4j round trip
  each otherwise); the result is the same.
- `LocalFS`: Python's I/O for `file:` URIs and plain paths, for readers without a JVM (the
  hour states in a web page, tests).

Renames: `rename()` is one filesystem rename (atomic for a file or a directory on HDFS and on a
local filesystem). `replace_dir()` puts a staged directory in place of an existing one with two
renames: the old one moves aside under `_replaced/`, the new one moves in, the old one is
deleted. A crash between the two renames leaves the old directory aside; `recover_replaced()`
(run at the start of the next run) puts it back, so a reader never loses an hour for good.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class FileEntry:
    """One entry of a directory listing: its full URI, last path element and kind."""

    uri: str
    name: str
    is_dir: bool
    size: int


def join(base: str, *parts: str) -> str:
    """`base` and path elements joined with '/' (URIs, not OS paths)."""
    out = base.rstrip("/")
    for part in parts:
        out = f"{out}/{part.strip('/')}"
    return out


def as_uri(location: str) -> str:
    """A warehouse location as a URI: a plain local path becomes `file:///abs/path`."""
    if "://" in location or location.startswith("file:"):
        return location.rstrip("/") if location.rstrip("/") else location
    return Path(location).resolve().as_uri()


def is_local(uri: str) -> bool:
    return uri.startswith("file:") or "://" not in uri


def local_path(uri: str) -> Path:
    """The OS path of a `file:` URI (or of a plain path)."""
    if uri.startswith("file:"):
        return Path(unquote(urlparse(uri).path))
    return Path(uri)


class WarehouseFS(Protocol):
    def exists(self, uri: str) -> bool: ...
    def list(self, uri: str) -> list[FileEntry]: ...
    def read_bytes(self, uri: str) -> bytes: ...
    def read_text(self, uri: str) -> str: ...


class LocalFS:
    """The interface over Python's I/O: `file:` URIs and plain paths only."""

    def exists(self, uri: str) -> bool:
        return local_path(uri).exists()

    def list(self, uri: str) -> list[FileEntry]:
        """The entries of directory `uri`, sorted by name; [] when it does not exist."""
        base = uri.rstrip("/")
        try:
            with os.scandir(local_path(uri)) as it:
                entries = [
                    FileEntry(
                        uri=f"{base}/{e.name}",
                        name=e.name,
                        is_dir=e.is_dir(),
                        size=0 if e.is_dir() else e.stat().st_size,
                    )
                    for e in it
                ]
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(entries, key=lambda e: e.name)

    def read_bytes(self, uri: str) -> bytes:
        return local_path(uri).read_bytes()

    def read_text(self, uri: str) -> str:
        return self.read_bytes(uri).decode("utf-8")

    def write_bytes(self, uri: str, data: bytes) -> None:
        path = local_path(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)

    def write_text(self, uri: str, text: str) -> None:
        self.write_bytes(uri, text.encode("utf-8"))

    def delete(self, uri: str, recursive: bool = True) -> bool:
        path = local_path(uri)
        if path.is_dir():
            if recursive:
                shutil.rmtree(path)
            else:
                path.rmdir()
            return True
        if path.exists():
            path.unlink()
            return True
        return False


class HadoopFS:
    """Hadoop's FileSystem of a SparkSession, for any URI it can reach (see the module doc)."""

    def __init__(self, spark: SparkSession) -> None:
        sc = spark.sparkContext
        self._jvm: Any = sc._jvm
        self._conf: Any = sc._jsc.hadoopConfiguration()  # type: ignore[union-attr]
        self._local = LocalFS()

    def _path(self, uri: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(uri)

    def _fs(self, uri: str) -> tuple[Any, Any]:
        path = self._path(uri)
        return path.getFileSystem(self._conf), path

    # -- reads ----------------------------------------------------------------------------
    def exists(self, uri: str) -> bool:
        if is_local(uri):
            return self._local.exists(uri)
        fs, path = self._fs(uri)
        return bool(fs.exists(path))

    def list(self, uri: str) -> list[FileEntry]:
        """The entries of directory `uri`, sorted by name; [] when it does not exist."""
        if is_local(uri):
            return self._local.list(uri)
        fs, path = self._fs(uri)
        if not fs.exists(path):
            return []
        base = uri.rstrip("/")
        entries = []
        for status in fs.listStatus(path):
            name = str(status.getPath().getName())
            entries.append(
                FileEntry(
                    uri=f"{base}/{name}",
                    name=name,
                    is_dir=bool(status.isDirectory()),
                    size=int(status.getLen()),
                )
            )
        return sorted(entries, key=lambda e: e.name)

    def read_bytes(self, uri: str) -> bytes:
        if is_local(uri):
            return self._local.read_bytes(uri)
        fs, path = self._fs(uri)
        stream = fs.open(path)
        try:
            data = self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
        finally:
            stream.close()
        return bytes(data)

    def read_text(self, uri: str) -> str:
        return self.read_bytes(uri).decode("utf-8")

    # -- changes --------------------------------------------------------------------------
    def mkdirs(self, uri: str) -> None:
        fs, path = self._fs(uri)
        fs.mkdirs(path)

    def write_bytes(self, uri: str, data: bytes) -> None:
        """Write a whole file: to a hidden temporary name beside it, then one rename."""
        if is_local(uri):
            self._local.write_bytes(uri, data)  # the same, without Hadoop's .crc side files
            return
        parent, _, name = uri.rstrip("/").rpartition("/")
        tmp = f"{parent}/.{name}.{uuid.uuid4().hex[:8]}.tmp"
        fs, tmp_path = self._fs(tmp)
        stream = fs.create(tmp_path, True)
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()
        target = self._path(uri)
        if fs.exists(target):
            fs.delete(target, False)
        if not fs.rename(tmp_path, target):
            fs.delete(tmp_path, False)
            raise OSError(f"could not rename {tmp} to {uri}")

    def write_text(self, uri: str, text: str) -> None:
        self.write_bytes(uri, text.encode("utf-8"))

    def delete(self, uri: str, recursive: bool = True) -> bool:
        fs, path = self._fs(uri)
        return bool(fs.delete(path, recursive))

    def rename(self, src: str, dst: str) -> None:
        fs, src_path = self._fs(src)
        dst_path = self._path(dst)
        parent = dst_path.getParent()
        if parent is not None:
            fs.mkdirs(parent)
        if not fs.rename(src_path, dst_path):
            raise OSError(f"could not rename {src} to {dst}")

    def replace_dir(self, staged: str, target: str) -> None:
        """Put directory `staged` at `target`, replacing what was there (see the module doc)."""
        parent, _, name = target.rstrip("/").rpartition("/")
        aside = join(parent, "_replaced", f"{name}.{uuid.uuid4().hex[:8]}")
        had_old = self.exists(target)
        if had_old:
            self.rename(target, aside)
        self.rename(staged, target)
        if had_old:
            self.delete(aside)

    def recover_replaced(self, parent: str) -> list[str]:
        """Put back directories that a crashed replace_dir() left aside; return their names."""
        restored = []
        for entry in self.list(join(parent, "_replaced")):
            name = entry.name.rsplit(".", 1)[0]
            target = join(parent, name)
            if self.exists(target):
                self.delete(entry.uri)
            else:
                self.rename(entry.uri, target)
                restored.append(name)
        return restored

    def copy_from_local(self, local_dir: str, uri: str) -> None:
        """Copy a local file or directory tree to `uri`."""
        fs, path = self._fs(uri)
        fs.copyFromLocalFile(False, True, self._path(as_uri(local_dir)), path)

    def copy_to_local(self, uri: str, local_dir: str) -> None:
        fs, path = self._fs(uri)
        fs.copyToLocalFile(False, path, self._path(as_uri(local_dir)), True)
