"""The warehouse's filesystem on Spark's side: Hadoop's FileSystem through Spark's JVM.

The warehouse package (pipeline_warehouse) needs no Spark: it reads and writes through any
WarehouseFS. The jobs plug this one in (`open_warehouse(uri, spark)`); the Airflow side
keeps fsspec's.

`org.apache.hadoop.fs.FileSystem` of each path's scheme (`file://`, `hdfs://`, `s3a://`,
`viewfs://`, ...), reached as `spark._jvm.org.apache.hadoop.fs` with the session's Hadoop
configuration, so the same code commits an hour on HDFS. It keeps the interface and the
guarantees of filesystem.py (WarehouseFS). Reads of `file:` URIs take Python's own I/O
(hundreds of small JSON files would otherwise cost a py4j round trip each); the result is the
same. So do whole-file writes and mkdirs of `file:` URIs (no Hadoop `.crc` side files to keep);
renames and deletes keep Hadoop's, which move and delete a file's `.crc` with it.

A whole-file write (a checkpoint, a commit record) replaces the file in one step with
`FileContext.rename(src, dst, Options.Rename.OVERWRITE)`: on HDFS FileSystem.rename refuses an
existing target, and a delete before the rename would leave no file if the writer died between
the two. A store with no FileContext binding (no `fs.AbstractFileSystem.<scheme>.impl`) falls
back to FileSystem's rename, and to that delete and rename when its rename refuses.
"""

from __future__ import annotations

from typing import Any

from pipeline_warehouse.checkpoint import Warehouse
from pipeline_warehouse.filesystem import (
    FileEntry,
    FsspecFS,
    WarehouseFileSystemError,
    as_uri,
    is_local,
    parent,
    parquet_files,
    temporary_name,
)


def open_warehouse(uri: str, spark: Any) -> Warehouse:
    """The warehouse at `uri`, read and changed through `spark`'s Hadoop FileSystem."""
    return Warehouse(uri, HadoopFS(spark))


class HadoopFS:
    """Hadoop's FileSystem of a SparkSession, for any URI it can reach (see the module doc)."""

    def __init__(self, spark: Any, python_io_for_files: bool = True) -> None:
        """`python_io_for_files`: `file:` URIs through Python's I/O (False: through Hadoop,
        as every other scheme; the tests of the Hadoop path)."""
        sc = spark.sparkContext
        self._jvm: Any = sc._jvm
        self._conf: Any = sc._jsc.hadoopConfiguration()
        self._local = FsspecFS()
        self._python_io_for_files = python_io_for_files
        # FileContext per scheme://authority (each one is a client of its store, e.g. HDFS's
        # DFSClient); None where the scheme has no FileContext binding
        self._contexts: dict[str, Any] = {}
        rename = getattr(self._jvm.org.apache.hadoop.fs, "Options$Rename")
        self._overwrite: Any = sc._gateway.new_array(rename, 1)  # Java varargs: an array
        self._overwrite[0] = rename.OVERWRITE

    def _path(self, uri: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(uri)

    def _fs(self, uri: str) -> tuple[Any, Any]:
        path = self._path(uri)
        return path.getFileSystem(self._conf), path

    def _context(self, path: Any) -> Any:
        """The FileContext of `path`'s filesystem, or None when its scheme has none."""
        location = path.toUri()
        key = f"{location.getScheme()}://{location.getAuthority()}"
        if key not in self._contexts:
            try:
                context = self._jvm.org.apache.hadoop.fs.FileContext.getFileContext(
                    location, self._conf
                )
            except Exception as exc:  # py4j's error, carrying the Java exception's name
                if "UnsupportedFileSystemException" not in str(exc):
                    raise
                context = None
            self._contexts[key] = context
        return self._contexts[key]

    def _is_local(self, uri: str) -> bool:
        return self._python_io_for_files and is_local(uri)

    # -- reads ----------------------------------------------------------------------------
    def exists(self, uri: str) -> bool:
        if self._is_local(uri):
            return self._local.exists(uri)
        fs, path = self._fs(uri)
        return bool(fs.exists(path))

    def list(self, uri: str) -> list[FileEntry]:
        if self._is_local(uri):
            return self._local.list(uri)
        fs, path = self._fs(uri)
        if not fs.exists(path) or not fs.getFileStatus(path).isDirectory():
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
                    modified_ms=int(status.getModificationTime()),
                )
            )
        return sorted(entries, key=lambda e: e.name)

    def read_bytes(self, uri: str) -> bytes:
        if self._is_local(uri):
            return self._local.read_bytes(uri)
        fs, path = self._fs(uri)
        try:
            stream = fs.open(path)
        except Exception as exc:
            if "FileNotFoundException" in str(exc):
                raise FileNotFoundError(uri) from None
            raise
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def read_text(self, uri: str) -> str:
        return self.read_bytes(uri).decode("utf-8")

    def parquet_rows(self, uri: str) -> int:
        """Rows of the Parquet files in directory `uri`, from their footers: no Spark job
        (a `spark.read.parquet(uri).count()` costs ~0.2 s even for a few files)."""
        if self._is_local(uri):
            return self._local.parquet_rows(uri)
        return sum(self.parquet_file_rows(e.uri) for e in parquet_files(self, uri))

    def parquet_file_rows(self, uri: str) -> int:
        """Rows of one Parquet file, from its footer."""
        if self._is_local(uri):
            return self._local.parquet_file_rows(uri)
        parquet = self._jvm.org.apache.parquet.hadoop
        reader = parquet.ParquetFileReader.open(
            parquet.util.HadoopInputFile.fromPath(self._path(uri), self._conf)
        )
        try:
            return int(reader.getRecordCount())
        finally:
            reader.close()

    # -- changes --------------------------------------------------------------------------
    def mkdirs(self, uri: str) -> None:
        if self._is_local(uri):  # no side files to keep: ~40 ms of py4j a load saved
            self._local.mkdirs(uri)
            return
        fs, path = self._fs(uri)
        if not fs.mkdirs(path):
            raise WarehouseFileSystemError(f"mkdirs {uri} failed")

    def write_bytes(self, uri: str, data: bytes) -> None:
        """Write a whole file: to a hidden temporary name beside it, then one rename."""
        if self._is_local(uri):
            self._local.write_bytes(uri, data)  # the same, without Hadoop's .crc side files
            return
        temporary = temporary_name(uri)
        fs, temporary_path = self._fs(temporary)
        stream = fs.create(temporary_path, True)
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()
        target = self._path(uri)
        try:
            replaced = self._replace(fs, temporary_path, target)
        except Exception as exc:  # py4j's error: its Java exception's line, not the stack
            fs.delete(temporary_path, False)
            reason = getattr(exc, "java_exception", exc)
            raise WarehouseFileSystemError(
                f"write {uri}: could not rename {temporary} over it: {reason}"
            ) from exc
        if not replaced:
            fs.delete(temporary_path, False)
            raise WarehouseFileSystemError(f"write {uri}: could not rename {temporary} over it")

    def _replace(self, fs: Any, source: Any, target: Any) -> bool:
        """`source` renamed to `target`, replacing a file there in one step (see the module
        doc); False when the store refused."""
        context = self._context(target)
        if context is not None:
            context.rename(source, target, self._overwrite)  # raises when it cannot
            return True
        if fs.rename(source, target):  # POSIX-like stores replace in one step
            return True
        if fs.exists(target) and fs.isFile(target):  # not atomic: no FileContext here
            fs.delete(target, False)
            return bool(fs.rename(source, target))
        return False

    def write_text(self, uri: str, text: str) -> None:
        self.write_bytes(uri, text.encode("utf-8"))

    def rename(self, src: str, dst: str) -> None:
        fs, source = self._fs(src)
        target = self._path(dst)
        if fs.exists(target):  # Hadoop would move a directory *into* an existing one
            raise WarehouseFileSystemError(f"rename {src} -> {dst}: the target exists")
        fs.mkdirs(self._path(parent(dst)))
        if not fs.rename(source, target):
            raise WarehouseFileSystemError(f"rename {src} -> {dst} failed")

    def delete(self, uri: str, recursive: bool = True) -> bool:
        fs, path = self._fs(uri)
        return bool(fs.delete(path, recursive))

    def copy_from_local(self, local_dir: str, uri: str) -> None:
        """Copy a local file or directory tree to `uri`."""
        fs, path = self._fs(uri)
        fs.copyFromLocalFile(False, True, self._path(as_uri(local_dir)), path)

    def copy_to_local(self, uri: str, local_dir: str) -> None:
        fs, path = self._fs(uri)
        fs.copyToLocalFile(False, path, self._path(as_uri(local_dir)), True)
