"""Kafka 0.7 clients written by others, run unchanged against a real logbroker broker.

Two clients from the npm registry, pinned in tests/compat/node/package-lock.json and
installed with `npm ci --prefix tests/compat/node` (see tests/compat/README.md):

    franz-kafka 0.7.5 (Danny Coates)
        produce  magic 1; none, gzip, or snappy as a raw block (needs the `snappy` addon)
        fetch    magic 1 only (it assumes a 10-byte header), through gzip/snappy wrappers;
                 stops at a partial last message
        offsets  time -1 / -2 through its request client (franz-kafka/client)
    kafka 0.2.3 (Marcus Westin, then Tagged; "westin" in names here)
        produce  magic 0, one request per send
        fetch    magic 0 only
        offsets  sends a time of its own making (far in the future), never -1 / -2

Neither sends MULTIFETCH or MULTIPRODUCE. Each scenario runs a small driver script from
tests/compat/node/ (the client's own API, nothing patched) in a `node` subprocess against
a broker subprocess, and checks what arrived with raw requests (compat_wire.py).

The whole module skips when `node` or the installed packages are missing; the snappy
scenarios also skip when the optional `snappy` 6.x addon did not build.
"""

from __future__ import annotations

import base64
import json
import random
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import compat_wire as wire
import pytest

from logbroker.protocol import compression
from logbroker.protocol.message_set import build_message_set, iter_messages
from logbroker.protocol.requests import EARLIEST_TIME, LATEST_TIME
from logbroker.stack.broker import BrokerProcess

NODE_DIR = Path(__file__).parent / "node"
NODE = shutil.which("node")
MODULES = NODE_DIR / "node_modules"

pytestmark = [
    pytest.mark.skipif(NODE is None, reason="node is not installed (the npm clients need Node)"),
    pytest.mark.skipif(
        not (MODULES / "franz-kafka" / "package.json").is_file()
        or not (MODULES / "kafka" / "package.json").is_file(),
        reason="npm clients not installed: run `npm ci --prefix tests/compat/node`",
    ),
]


def node(script: str, *args: object, stdin: Any = None, timeout: float = 40.0) -> dict[str, Any]:
    """Run tests/compat/node/<script> and return its JSON line; fail with its stderr."""
    assert NODE is not None
    proc = subprocess.run(
        [NODE, script, *map(str, args)],
        cwd=NODE_DIR,
        input=json.dumps(stdin if stdin is not None else {}).encode(),
        capture_output=True,
        timeout=timeout,
    )
    out = proc.stdout.decode().strip().splitlines()
    assert proc.returncode == 0, (
        f"{script} exited {proc.returncode}\nstdout: {proc.stdout.decode()}\n"
        f"stderr: {proc.stderr.decode()}"
    )
    return json.loads(out[-1])  # type: ignore[no-any-return]


def b64(payloads: list[bytes]) -> list[str]:
    return [base64.b64encode(p).decode() for p in payloads]


def unb64(items: list[str]) -> list[bytes]:
    return [base64.b64decode(s) for s in items]


def binary_payloads(n: int, seed: int) -> list[bytes]:
    """Varied payloads: empty, short, all 256 byte values, up to 700 bytes."""
    rng = random.Random(seed)
    out = [b"", bytes(range(256))]
    while len(out) < n:
        out.append(rng.randbytes(rng.choice([1, 7, 40, 300, 700])))
    return out[:n]


def payloads_of(data: bytes) -> list[bytes]:
    """Payloads of a raw log, through compression, with logbroker's own decoder."""
    return [m.payload for m in iter_messages(data)]


def batches_of(data: bytes) -> list[list[bytes]]:
    """The payloads inside each top-level entry (each compressed wrapper) of a raw log."""
    return [
        payloads_of(data[offset : offset + 10 + len(payload)])
        for offset, _, _, _, payload in wire.parse_entries(data)
    ]


def in_batches(payloads: list[bytes], size: int) -> list[list[bytes]]:
    return [payloads[i : i + size] for i in range(0, len(payloads), size)]


@pytest.fixture
def fast_broker(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    """A broker that flushes (so exposes) every message at once, with two partitions."""
    return broker_factory(log_flush_interval=1, num_partitions=2)


def snappy_addon_works() -> bool:
    """franz-kafka calls snappy.compress(buf, callback): only the 6.x addon has that API."""
    if NODE is None or not (MODULES / "snappy").is_dir():
        return False
    probe = (
        "var s=require('snappy');var t=setTimeout(function(){process.exit(1)},2000);"
        "s.compress(Buffer.from('probe'),function(e,d){clearTimeout(t);process.exit(e?1:0)})"
    )
    return subprocess.run([NODE, "-e", probe], cwd=NODE_DIR, capture_output=True).returncode == 0


needs_snappy = pytest.mark.skipif(
    not snappy_addon_works(),
    reason="the optional snappy 6.x addon (callback API) is not built in tests/compat/node",
)


# -- franz-kafka 0.7.5 ------------------------------------------------------------------


def test_franz_produce_then_franz_consume_on_a_default_broker(
    standalone_broker: BrokerProcess,
) -> None:
    """Its producer to its consumer, exactly, in order, on the default (1 s flush) broker."""
    port, payloads = standalone_broker.port, binary_payloads(60, seed=1)
    assert node(
        "franz_produce.js", "--port", port, "--topic", "franz.rt", stdin={"payloads": b64(payloads)}
    ) == {"written": 60}
    got = node("franz_consume.js", "--port", port, "--topic", "franz.rt", "--count", 60)
    assert unb64(got["messages"]) == payloads


def test_franz_produce_is_stored_verbatim_magic_1(fast_broker: BrokerProcess) -> None:
    """Its sets are stored byte for byte: magic 1, attributes 0, CRC over the payload."""
    payloads = binary_payloads(45, seed=2)
    node(
        "franz_produce.js",
        "--port",
        fast_broker.port,
        "--topic",
        "franz.bytes",
        "--batch-size",
        7,
        stdin={"payloads": b64(payloads)},
    )
    end = sum(10 + len(p) for p in payloads)
    assert wire.wait_for_end(fast_broker.address, "franz.bytes", 0, end) == end
    data = wire.read_log(fast_broker.address, "franz.bytes")
    # franz-kafka builds exactly what build_message_set builds for magic 1 ...
    assert data == build_message_set(payloads, magic=1)
    # ... which a hand parser reads as magic 1 / attributes 0 entries with valid CRCs,
    entries = wire.parse_entries(data)
    assert [(e[1], e[2]) for e in entries] == [(1, 0)] * len(payloads)
    assert [e[4] for e in entries] == payloads
    # and the segment file on disk holds the same bytes.
    segment = fast_broker.log_dir / "franz.bytes-0" / ("0" * 20 + ".kafka")
    assert segment.read_bytes() == data


def test_franz_gzip_produce_and_consume(fast_broker: BrokerProcess) -> None:
    payloads = binary_payloads(50, seed=3)
    node(
        "franz_produce.js",
        "--port",
        fast_broker.port,
        "--topic",
        "franz.gzip",
        "--compression",
        "gzip",
        "--batch-size",
        10,
        stdin={"payloads": b64(payloads)},
    )
    data = wire.wait_for_entries(fast_broker.address, "franz.gzip", 0, 5)
    wrappers = wire.parse_entries(data)
    assert [(e[1], e[2] & 3) for e in wrappers] == [(1, compression.GZIP)] * 5
    # One wrapper per batch, each holding its batch in order. franz-kafka compresses each
    # request asynchronously (zlib on the thread pool) and writes it when that finishes,
    # so the batches themselves may reach the broker in any order.
    assert sorted(batches_of(data)) == sorted(in_batches(payloads, 10))
    got = node(
        "franz_consume.js", "--port", fast_broker.port, "--topic", "franz.gzip", "--count", 50
    )
    # franz-kafka gunzips each wrapper asynchronously (zlib on the thread pool) and emits
    # the inner messages when that finishes, so wrappers may interleave: compare as bags.
    assert Counter(unb64(got["messages"])) == Counter(payloads)


@needs_snappy
def test_franz_snappy_produce_and_consume(fast_broker: BrokerProcess) -> None:
    """franz-kafka sends raw snappy blocks (no snappy-java framing); 0.7 accepted those."""
    payloads = [f"snappy-{i:03d}".encode() for i in range(30)]  # inner sets of 170 bytes
    node(
        "franz_produce.js",
        "--port",
        fast_broker.port,
        "--topic",
        "franz.snappy",
        "--compression",
        "snappy",
        "--batch-size",
        10,
        stdin={"payloads": b64(payloads)},
    )
    data = wire.wait_for_entries(fast_broker.address, "franz.snappy", 0, 3)
    wrappers = wire.parse_entries(data)
    assert [(e[1], e[2] & 3) for e in wrappers] == [(1, compression.SNAPPY)] * 3
    assert all(e[4][:1] != b"\x82" for e in wrappers)  # raw blocks, not snappy-java streams
    assert sorted(batches_of(data)) == sorted(in_batches(payloads, 10))  # see the gzip test
    got = node(
        "franz_consume.js", "--port", fast_broker.port, "--topic", "franz.snappy", "--count", 30
    )
    assert Counter(unb64(got["messages"])) == Counter(payloads)


@needs_snappy
def test_franz_snappy_batch_whose_raw_block_starts_with_0x82(fast_broker: BrokerProcess) -> None:
    payloads = [f"p-{i}".encode() for i in range(10)]  # 10 x 13 bytes: inner set of 130
    node(
        "franz_produce.js",
        "--port",
        fast_broker.port,
        "--topic",
        "franz.snappy82",
        "--compression",
        "snappy",
        "--batch-size",
        10,
        stdin={"payloads": b64(payloads)},
    )
    data = wire.wait_for_entries(fast_broker.address, "franz.snappy82", 0, 1, timeout=3)
    assert payloads_of(data) == payloads


def test_our_produce_then_franz_consume(fast_broker: BrokerProcess) -> None:
    """Raw PRODUCE frames of build_message_set (magic 1) read back by franz-kafka."""
    address, plain = fast_broker.address, binary_payloads(60, seed=4)
    for start in range(0, 60, 20):
        wire.produce(address, "ours.plain", 0, build_message_set(plain[start : start + 20]))
    end = sum(10 + len(p) for p in plain)
    assert wire.wait_for_end(address, "ours.plain", 0, end) == end  # (visible once flushed)
    got = node(
        "franz_consume.js", "--port", fast_broker.port, "--topic", "ours.plain", "--count", 60
    )
    assert unb64(got["messages"]) == plain

    zipped = [f"zipped-{i}".encode() for i in range(40)]
    for start in range(0, 40, 10):
        wire.produce(
            address,
            "ours.gzip",
            0,
            build_message_set(zipped[start : start + 10], codec=compression.GZIP),
        )
    got = node(
        "franz_consume.js", "--port", fast_broker.port, "--topic", "ours.gzip", "--count", 40
    )
    assert Counter(unb64(got["messages"])) == Counter(zipped)


def test_franz_offsets_and_fetch_errors(fast_broker: BrokerProcess) -> None:
    address, port = fast_broker.address, fast_broker.port
    payloads = [f"offset-{i:02d}".encode() for i in range(20)]  # entries of 19 bytes
    requests: list[dict[str, Any]] = [
        {"op": "offsets", "topic": "franz.off", "partition": 0, "time": LATEST_TIME, "max": 10},
        {"op": "offsets", "topic": "franz.off", "partition": 0, "time": EARLIEST_TIME, "max": 10},
    ]
    before = node("franz_requests.js", "--port", port, stdin={"requests": requests})["results"]
    assert before == [{"error": None, "offsets": [0]}, {"error": None, "offsets": [0]}]

    wire.produce(address, "franz.off", 0, build_message_set(payloads))
    end = 19 * 20
    requests += [
        {"op": "offsets", "topic": "franz.off", "partition": 0, "time": LATEST_TIME, "max": 1},
        {"op": "fetch", "topic": "franz.off", "partition": 0, "offset": 0, "maxSize": 19 * 3 + 7},
        {"op": "fetch", "topic": "franz.off", "partition": 0, "offset": 19 * 5, "maxSize": 19 * 2},
        {"op": "fetch", "topic": "franz.off", "partition": 0, "offset": end, "maxSize": 1000},
        {"op": "fetch", "topic": "franz.off", "partition": 0, "offset": end + 19, "maxSize": 1000},
        {"op": "fetch", "topic": "franz.off", "partition": 2, "offset": 0, "maxSize": 1000},
        {"op": "fetch", "topic": "franz.off", "partition": 0, "offset": 0, "maxSize": 12},
    ]
    r = node("franz_requests.js", "--port", port, stdin={"requests": requests})["results"]
    assert r[0] == {"error": None, "offsets": [end, 0]}  # latest, max 10: end then segment 0
    assert r[1] == {"error": None, "offsets": [0]}  # earliest
    assert r[2] == {"error": None, "offsets": [end]}  # latest, max 1
    # 3 whole messages and a 7-byte partial one that franz-kafka leaves for the next fetch
    assert r[3]["error"] is None and r[3]["bytesParsed"] == 19 * 3
    assert [m["magic"] for m in r[3]["messages"]] == [1, 1, 1]
    assert unb64([m["payload"] for m in r[3]["messages"]]) == payloads[:3]
    assert unb64([m["payload"] for m in r[4]["messages"]]) == payloads[5:7]
    assert r[5] == {"error": None, "bytesParsed": 0, "messages": []}  # at the end: empty
    assert r[6]["error"] == "OffsetOutOfRange" and r[6]["messages"] == []
    assert r[7]["error"] == "WrongPartition"  # num.partitions = 2
    # Smaller than the first message: the broker sends the 12 bytes it has (0.7 never
    # trims), and franz-kafka reports the message as larger than its buffer. A broker
    # that trimmed to whole messages would send nothing, and the client would spin.
    assert r[8] == {"error": "message larger than buffer", "bytesParsed": 0, "messages": []}
    assert wire.fetch(address, "franz.off", 0, 0, 12) == (0, build_message_set(payloads)[:12])


def test_franz_consumer_with_a_fetch_size_that_cuts_messages(fast_broker: BrokerProcess) -> None:
    """Every fetch ends inside a message; the client resumes after the last whole one."""
    payloads = [f"cut-{i:010d}".encode() for i in range(40)]
    entry = 10 + len(payloads[0])  # 24 bytes: size, magic, attributes, CRC, 14-byte payload
    wire.produce(fast_broker.address, "franz.cut", 0, build_message_set(payloads))
    # 9 bytes of a 4th message end every full fetch. (Not 1 to 3 bytes: franz-kafka reads
    # the next size field without checking that 4 bytes are left, and throws RangeError.
    # Real 0.7 brokers send the same untrimmed bytes, so that is the client's own bug.)
    max_size = entry * 3 + 9
    assert len(wire.fetch(fast_broker.address, "franz.cut", 0, 0, max_size)[1]) == max_size
    got = node(
        "franz_consume.js",
        "--port",
        fast_broker.port,
        "--topic",
        "franz.cut",
        "--count",
        40,
        "--max-fetch-size",
        max_size,
    )
    assert unb64(got["messages"]) == payloads


def test_franz_two_partitions(fast_broker: BrokerProcess) -> None:
    """franz-kafka spreads batches over both partitions; reading both returns them all."""
    payloads = [f"two-{i}".encode() for i in range(40)]
    node(
        "franz_produce.js",
        "--port",
        fast_broker.port,
        "--topic",
        "franz.two",
        "--partitions",
        2,
        "--batch-size",
        5,
        stdin={"payloads": b64(payloads)},
    )
    total = sum(10 + len(p) for p in payloads)
    ends = [wire.latest(fast_broker.address, "franz.two", p) for p in (0, 1)]
    assert all(ends) and sum(ends) == total
    per_partition = [
        payloads_of(wire.read_log(fast_broker.address, "franz.two", p)) for p in (0, 1)
    ]
    assert Counter(per_partition[0] + per_partition[1]) == Counter(payloads)
    got = node(
        "franz_consume.js",
        "--port",
        fast_broker.port,
        "--topic",
        "franz.two",
        "--count",
        40,
        "--from",
        "0-0:0,0-1:0",
    )
    assert Counter(unb64(got["messages"])) == Counter(payloads)


# -- kafka 0.2.3 (Marcus Westin / Tagged) -----------------------------------------------


def test_westin_produce_then_westin_consume(fast_broker: BrokerProcess) -> None:
    """Magic 0 both ways; the offsets it reports are byte positions after each message."""
    payloads = [f"westin message {i}" for i in range(30)]
    assert node(
        "westin_produce.js",
        "--port",
        fast_broker.port,
        "--topic",
        "westin.rt",
        stdin={"payloads": payloads},
    ) == {"written": 30}
    data = wire.read_log(fast_broker.address, "westin.rt")
    assert data == build_message_set([p.encode() for p in payloads], magic=0)
    assert [(e[1], e[2]) for e in wire.parse_entries(data)] == [(0, 0)] * 30
    got = node(
        "westin_consume.js", "--port", fast_broker.port, "--topic", "westin.rt", "--count", 30
    )
    assert got["messages"] == payloads and got["errors"] == []
    next_offsets, pos = [], 0
    for p in payloads:
        pos += 9 + len(p)
        next_offsets.append(pos)
    assert got["offsets"] == next_offsets


def test_our_magic_0_produce_then_westin_consume(fast_broker: BrokerProcess) -> None:
    payloads = [f"ours-{i}" for i in range(50)]
    for start in range(0, 50, 25):
        chunk = [p.encode() for p in payloads[start : start + 25]]
        wire.produce(fast_broker.address, "westin.ours", 0, build_message_set(chunk, magic=0))
    got = node(
        "westin_consume.js", "--port", fast_broker.port, "--topic", "westin.ours", "--count", 50
    )
    assert got["messages"] == payloads and got["errors"] == []
    # starting from the middle (a message boundary) works too
    middle = sum(9 + len(p) for p in payloads[:30])
    got = node(
        "westin_consume.js",
        "--port",
        fast_broker.port,
        "--topic",
        "westin.ours",
        "--count",
        20,
        "--offset",
        middle,
    )
    assert got["messages"] == payloads[30:]


def test_westin_offsets_request(fast_broker: BrokerProcess) -> None:
    """Its OFFSETS carries a time far in the future: the 'explicit time' branch of 0.7."""
    port = fast_broker.port
    assert node("westin_offsets.js", "--port", port, "--topic", "westin.none", "--max", 5) == {
        "offsets": []
    }
    wire.produce(
        fast_broker.address, "westin.off", 0, build_message_set([b"a", b"bb", b"ccc"], magic=0)
    )
    end = 9 * 3 + 6
    assert wire.offsets(fast_broker.address, "westin.off", 0, LATEST_TIME, 5) == [end, 0]
    assert node("westin_offsets.js", "--port", port, "--topic", "westin.off", "--max", 5) == {
        "offsets": [end, 0]
    }
    assert node("westin_offsets.js", "--port", port, "--topic", "westin.off", "--max", 1) == {
        "offsets": [end]
    }


def test_westin_fetch_past_the_end_is_offset_out_of_range(fast_broker: BrokerProcess) -> None:
    wire.produce(fast_broker.address, "westin.oor", 0, build_message_set([b"only"], magic=0))
    got = node(
        "westin_consume.js",
        "--port",
        fast_broker.port,
        "--topic",
        "westin.oor",
        "--count",
        1,
        "--offset",
        100,
        "--max-errors",
        1,
    )
    assert got == {"messages": [], "offsets": [], "errors": [[1, "OffsetOutOfRange"]]}
