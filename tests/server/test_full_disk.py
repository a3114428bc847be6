"""A broker whose log.dir fills up: it keeps exactly what it acknowledged, serves nothing that
failed, tells every producer, and goes on at the right offset once there is room again.

The disk really fills: log.dir is a 1 MiB tmpfs mounted for the test (root may mount here),
half taken by a filler file that is deleted to free space. Where mounting is not permitted
the broker runs under RLIMIT_FSIZE instead: a write past the limit fails in the kernel with
EFBIG after writing what fits, the same short-then-failed write a full disk gives, and
"freeing space" raises the limit of the running broker with prlimit.
"""

from __future__ import annotations

import resource
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from logbroker.client.connection import BrokerConnection
from logbroker.client.simple_consumer import SimpleConsumer
from logbroker.protocol.errors import StorageError
from logbroker.protocol.message_set import build_message_set
from logbroker.protocol.requests import AckedProduceRequest, ProduceRequest, encode_request
from logbroker.protocol.responses import decode_acked_produce_response
from logbroker.stack.broker import BrokerProcess
from logbroker.stack.zookeeper import find_free_port

TOPIC = "full"
DISK_BYTES = 1 << 20
PAYLOAD_BYTES = 10_000  # entries of 10,010 bytes: a failing write stops mid-entry


class SmallDisk:
    """log.dir on a filesystem that really fills up (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.mount = root / "disk"
        self.mount.mkdir()
        self.rlimits: dict[int, tuple[int, int]] = {}
        self.mounted = self._try_mount()
        self.filler = self.mount / "filler"
        if self.mounted:
            self.filler.write_bytes(b"\0" * (DISK_BYTES // 2))
        else:  # one segment file may grow to this, the rest fails with EFBIG
            self.rlimits[resource.RLIMIT_FSIZE] = (DISK_BYTES // 2, resource.RLIM_INFINITY)
        self.log_dir = self.mount / "logs"

    def _try_mount(self) -> bool:
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(self.mount)],
            capture_output=True,
            check=False,
        )
        return result.returncode == 0

    def free_space(self, broker: BrokerProcess) -> None:
        if self.mounted:
            self.filler.unlink()
        else:
            assert broker.pid is not None
            unlimited = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
            resource.prlimit(broker.pid, resource.RLIMIT_FSIZE, unlimited)

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.mount)], check=False)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    disk = SmallDisk(tmp_path)
    try:
        yield disk
    finally:
        disk.unmount()


@pytest.fixture
def broker(small_disk: SmallDisk, tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        tmp_path / "broker",  # broker.log stays off the small disk
        overrides={
            "log.dir": str(small_disk.log_dir),
            "metrics.port": str(find_free_port()),
            "log.file.size": str(100 * DISK_BYTES),  # no roll: one segment takes it all
        },
        rlimits=small_disk.rlimits,
    )
    try:
        yield proc.start()
    finally:
        proc.stop()


def payload(i: int) -> bytes:
    return f"{i:08d}".encode() * (PAYLOAD_BYTES // 8)


def acked_produce(conn: BrokerConnection, i: int) -> tuple[int, int, int]:
    """(error code, offset, next offset) of producing message i, acknowledged."""
    request = AckedProduceRequest(
        False, (ProduceRequest(TOPIC, 0, build_message_set([payload(i)])),)
    )
    (result,) = decode_acked_produce_response(conn.request(request))
    return result.error, result.offset, result.next_offset


def stored(broker: BrokerProcess) -> list[tuple[int, bytes]]:
    """(offset, payload) of every message the broker serves for the partition."""
    out: list[tuple[int, bytes]] = []
    with SimpleConsumer(*broker.address, timeout=30) as consumer:
        offset = 0
        while True:
            messages, offset = consumer.fetch_messages(TOPIC, 0, offset)
            if not messages:
                return out
            out += [(m.offset, m.payload) for m in messages]


def latest_offset(broker: BrokerProcess) -> int:
    with SimpleConsumer(*broker.address, timeout=30) as consumer:
        return consumer.latest_offset(TOPIC, 0)


def storage_errors(broker: BrokerProcess) -> int:
    port = broker.settings()["metrics.port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    for line in text.splitlines():
        labels = ('kind="storage"', f'topic="{TOPIC}"')
        if line.startswith("logbroker_errors_total{") and all(x in line for x in labels):
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_full_disk_keeps_exactly_what_was_acknowledged(
    small_disk: SmallDisk, broker: BrokerProcess
) -> None:
    acked: list[tuple[int, bytes]] = []
    end = 0
    with BrokerConnection(*broker.address, timeout=30) as conn:
        # Fill the disk: every acknowledged message lands right after the previous one.
        for i in range(DISK_BYTES // PAYLOAD_BYTES):
            code, offset, next_offset = acked_produce(conn, i)
            if code:
                break
            assert offset == end
            acked.append((offset, payload(i)))
            end = next_offset
        else:
            pytest.fail(f"the disk never filled ({end} bytes acknowledged)")
        assert code == StorageError.code, f"a full disk answered code {code}"
        assert acked, "nothing fitted on the disk"
        refused = i

        # Nothing of the failed write is visible, in the log or in the file.
        assert latest_offset(broker) == end
        (segment,) = (small_disk.log_dir / f"{TOPIC}-0").glob("*.kafka")
        assert segment.stat().st_size == end
        assert stored(broker) == acked

        # Asking again on the same connection is answered the same way, and nothing moves.
        assert acked_produce(conn, refused)[0] == StorageError.code
        assert latest_offset(broker) == end

    # A 0.7 produce gets no answer: its connection is closed so the producer knows.
    with socket.create_connection(broker.address, timeout=30) as plain:
        big = build_message_set([payload(refused) * 10])
        plain.sendall(encode_request(ProduceRequest(TOPIC, 0, big)))
        assert closed_by_peer(plain), "a produce that could not be written was dropped silently"
    assert storage_errors(broker) >= 3
    assert latest_offset(broker) == end

    # Room again: appends go on at the right offset.
    small_disk.free_space(broker)
    with BrokerConnection(*broker.address, timeout=30) as conn:
        for i in range(refused, refused + 10):
            code, offset, next_offset = acked_produce(conn, i)
            assert (code, offset) == (0, end)
            acked.append((offset, payload(i)))
            end = next_offset
    assert stored(broker) == acked

    # A restart serves exactly what was acknowledged: after a clean stop, and after kill -9.
    assert broker.stop() == 0
    broker.start()
    assert stored(broker) == acked
    broker.kill()
    broker.start()
    assert stored(broker) == acked
    assert latest_offset(broker) == end
