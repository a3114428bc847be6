"""server.properties checked at start, and the socket buffers it sets, on real broker processes.

Every known key is checked: a value of the wrong type or out of range stops the broker with
one line naming key, value and what is allowed (exit code 2, no traceback); an unknown key is
a warning naming it. socket.send.buffer and socket.receive.buffer reach every accepted
socket: the broker logs what the kernel reports for them, and `ss` (when installed) shows the
accepted socket's buffers from outside the broker.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from logbroker.config import BrokerConfig, ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]

BAD = [
    ("port", "-5", "port=-5 is out of range: port must be 0 to 65535"),
    ("port", "65536", "port=65536 is out of range: port must be 0 to 65535"),
    ("port", "abc", "port=abc: not an integer"),
    ("num.partitions", "0", "num.partitions=0 is out of range: num.partitions must be 1 or more"),
    ("log.file.size", "-1", "log.file.size=-1 is out of range: log.file.size must be 9 or more"),
    ("log.flush.interval", "0", "log.flush.interval=0 is out of range"),
    ("log.retention.hours", "-3", "log.retention.hours=-3 is out of range"),
    ("log.retention.size", "-2", "log.retention.size=-2 is out of range"),
    ("log.cleanup.interval.mins", "0", "log.cleanup.interval.mins=0 is out of range"),
    ("metrics.port", "-2", "metrics.port=-2 is out of range: metrics.port must be -1 to 65535"),
    ("socket.send.buffer", "-7", "socket.send.buffer=-7 is out of range"),
    ("zk.sessiontimeout.ms", "0", "zk.sessiontimeout.ms=0 is out of range"),
    ("max.socket.request.bytes", "1", "max.socket.request.bytes=1 is out of range"),
    ("brokerid", "-1", "brokerid=-1 is out of range: brokerid must be 0 or more"),
    ("enable.zookeeper", "maybe", "enable.zookeeper=maybe: expected true or false"),
    ("topic.partition.count.map", "a:0", "topic.partition.count.map: a:0 is out of range"),
    ("topic.partition.count.map", "a:x", "topic.partition.count.map=a:x: expected topic:number"),
    (
        "topic.log.retention.hours",
        "emoji😀:5",
        "topic.log.retention.hours: topic name 'emoji😀' contains the illegal character '😀'",
    ),
    ("hostname", "::1", "hostname='::1': must be a host name or IPv4 address, without ':'"),
    ("zk.connect", "/only-a-chroot", "zk.connect=/only-a-chroot: a ZooKeeper connect string"),
]


@pytest.mark.parametrize(("key", "value", "message"), BAD, ids=[f"{k}={v}" for k, v, _ in BAD])
def test_a_bad_value_is_refused_naming_key_value_and_range(
    key: str, value: str, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, {key: value})
    assert str(info.value).startswith(message), str(info.value)


def test_the_defaults_and_the_sample_configs_are_valid() -> None:
    BrokerConfig()
    for name in ("server", "server-1", "standalone"):
        load_config(ROOT / "include" / "config" / f"{name}.properties")
    # the edges of a range are allowed
    edges = {"port": "0", "log.retention.size": "-1", "socket.send.buffer": "-1"}
    config = load_config(None, {**edges, "metrics.port": "65535", "log.file.size": "9"})
    assert (config.port, config.log_retention_size, config.log_file_size) == (0, -1, 9)


def test_an_unknown_key_is_a_warning_that_names_it(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="logbroker.config"):
        config = load_config(None, {"log.file.sise": "100", "frobnicate": "1"})
    assert config.extra == {"log.file.sise": "100", "frobnicate": "1"}
    messages = [r.getMessage() for r in caplog.records]
    assert (
        "unknown configuration key log.file.sise ignored (did you mean log.file.size?)" in messages
    )
    assert "unknown configuration key frobnicate ignored" in messages


def _broker(*overrides: str, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    command = [sys.executable, "-m", "logbroker.cli", "broker"]
    for override in ("enable.zookeeper=false", *overrides):
        command += ["--override", override]
    return subprocess.run(command, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("port=-5", "port=-5 is out of range: port must be 0 to 65535"),
        ("num.partitions=0", "num.partitions=0 is out of range: num.partitions must be 1"),
        ("log.file.size=-1", "log.file.size=-1 is out of range: log.file.size must be 9"),
    ],
)
def test_the_broker_refuses_to_start_with_one_clear_line(
    tmp_path, override: str, line: str
) -> None:
    result = _broker(f"log.dir={tmp_path / 'logs'}", override)
    assert result.returncode == 2
    (only,) = result.stderr.decode().splitlines()  # one line, no traceback
    assert only.startswith(f"logbroker broker: {line}")
    assert not (tmp_path / "logs").exists()  # refused before anything was created


def test_socket_buffers_are_applied_to_accepted_connections(broker_factory) -> None:
    send, receive = 65536, 131072
    broker = broker_factory(socket_send_buffer=send, socket_receive_buffer=receive)
    # Linux doubles the value set (the rest is its bookkeeping) and reports the double.
    assert re.search(
        rf"SO_SNDBUF {2 * send} bytes, SO_RCVBUF {2 * receive} bytes "
        rf"\(socket.send.buffer={send}, socket.receive.buffer={receive};",
        broker.log_since(),
    ), broker.log_since()
    ss = shutil.which("ss")
    if ss is None:
        return  # the log line above is the check where iproute2 is not installed
    with socket.create_connection(broker.address) as client:
        port = client.getsockname()[1]
        # the broker's end of this connection: local = the broker's port, peer = ours
        shown = subprocess.run(
            [
                ss,
                "-tmnH",
                "state",
                "established",
                f"( sport = :{broker.port} and dport = :{port} )",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    skmem = re.search(r"skmem:\(r\d+,rb(\d+),t\d+,tb(\d+)", shown)
    assert skmem, shown
    assert (int(skmem.group(1)), int(skmem.group(2))) == (2 * receive, 2 * send)
