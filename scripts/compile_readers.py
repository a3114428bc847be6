#!/usr/bin/env python3
"""Compile the Spark reader's numba code once, into its on-disk cache (`make setup` runs this).

spark_apps/source/avro_compiled.py and load/event_names.py are compiled by numba on first use
and cached beside their sources (`__pycache__/*.nbi, *.nbc`). Without this step, the first
load after a checkout would compile them in every Spark Python worker at once (~6 s of CPU
each); with it, a worker loads the cache in a fraction of a second. (The fetch walk itself,
entry_kernels.py, is Cython: `make setup`'s install compiles it.)
The functions are called the way the reader calls them (same argument types: numba keeps
one compiled version per signature), on a few framed events.

    .venv/bin/python scripts/compile_readers.py
"""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

from fastavro import parse_schema, schemaless_writer

from logbroker.protocol.message_set import build_message_set
from spark_apps.load.event_names import NameKeys
from spark_apps.source.avro_compiled import CompiledReader
from spark_apps.source.avro_vector import compile_schema
from spark_apps.source.entry_scan import plain_run
from spark_apps.source.ranges import PartitionRange, digest_input, read_chunk

ROOT = Path(__file__).resolve().parent.parent

SCHEMA = {
    "type": "record",
    "name": "Warm",
    "fields": [
        {"name": "n", "type": "long"},
        {"name": "s", "type": ["null", "string"]},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}


def main() -> int:
    started = time.monotonic()
    # From scratch: numba's cache of a function does not notice a change in another module's
    # function compiled into it (avro_compiled.varint in event_names' kernel).
    for folder in ("spark_apps/source", "spark_apps/load"):
        for cached in ROOT.glob(f"{folder}/__pycache__/*.nb[ic]"):
            cached.unlink()
    parsed = parse_schema(SCHEMA)
    payloads = []
    for i in range(3):
        out = io.BytesIO(b"\x00\x00\x00\x00\x01")
        out.seek(5)
        schemaless_writer(out, parsed, {"n": i, "s": None if i else "x", "tags": ["a"] * i})
        payloads.append(out.getvalue())
    log = build_message_set(payloads)
    where = PartitionRange("warm", 0, 0, 0, len(log))
    chunk, end = read_chunk(memoryview(log), 0, where)
    assert end == len(log) and len(chunk) == 3
    digest_input(memoryview(log), 0, where)
    NameKeys().add(plain_run(memoryview(log), check_crc=False))  # the rows_sha256 thread's
    columns = CompiledReader(compile_schema(SCHEMA)).read(chunk.values, 1)
    assert columns["tags"].to_pylist() == [[], ["a"], ["a", "a"]]
    print(f"compiled the Spark reader's numba code in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
