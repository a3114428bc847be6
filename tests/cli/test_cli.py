"""The `logbroker` command, run as a user runs it: a subprocess against a real cluster."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from logbroker.cli import SUBCOMMANDS
from logbroker.stack.zookeeper import find_free_port


def logbroker(
    *args: str, stdin: bytes | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "logbroker.cli", *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
    )


def test_help_teaches_by_example():
    top = logbroker("--help")
    assert top.returncode == 0
    for module in SUBCOMMANDS:
        name = module.__name__.rsplit(".", 1)[-1].replace("_", "-")
        assert re.search(rf"\n    {name}[ \n]", top.stdout.decode()), name
        sub = logbroker(name, "--help")
        assert sub.returncode == 0, sub.stderr
        assert b"examples:" in sub.stdout and f"logbroker {name}".encode() in sub.stdout


def test_bad_arguments_are_explained():
    result = logbroker("offsets", "--broker", "127.0.0.1:1", "--topic", "t")
    assert result.returncode == 2 and b"--partition" in result.stderr
    result = logbroker(
        "offsets", "--broker", "127.0.0.1:1", "--topic", "t", "--partition", "0", "--time", "-1"
    )
    assert result.returncode == 1 and b"cannot connect to broker 127.0.0.1:1" in result.stderr


@pytest.fixture
def cluster(zk_chroot, broker_factory):
    brokers = [broker_factory(i, zk=zk_chroot, num_partitions=2) for i in (0, 1)]
    return zk_chroot.connect, brokers


def test_topics_produce_offsets_and_describe(cluster, tmp_path):
    zk, brokers = cluster
    created = logbroker("topics", "--zookeeper", zk, "create", "page-views", "--partitions", "3")
    assert created.returncode == 0, created.stderr
    assert created.stdout.decode().splitlines() == [
        "created page-views on broker 0: 3 partitions",
        "created page-views on broker 1: 3 partitions",
    ]
    listed = logbroker("topics", "--zookeeper", zk, "list")
    assert "page-views  (6 partitions; broker 0: 3, broker 1: 3)" in listed.stdout.decode()

    lines = [f"line {i}" for i in range(500)]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n")
    produced = logbroker(
        "produce",
        "--zookeeper",
        zk,
        "--topic",
        "page-views",
        "--file",
        str(source),
        "--acks",
        "--batch-size",
        "100",
    )
    assert produced.returncode == 0, produced.stderr
    assert b"sent 500 of 500 messages" in produced.stderr

    described = logbroker("topics", "--zookeeper", zk, "describe", "page-views")
    rows = [line.split() for line in described.stdout.decode().splitlines()[1:]]
    assert len(rows) == 6
    total_bytes = sum(int(r[4]) for r in rows)  # LATEST column
    assert total_bytes == sum(4 + 6 + len(line) for line in lines)  # size, header, payload
    broker = brokers[0]
    for row in rows:
        if row[1] == "0":
            end = logbroker(
                "offsets",
                "--broker",
                f"{broker.host}:{broker.port}",
                "--topic",
                "page-views",
                "--partition",
                row[2],
                "--time",
                "-1",
            )
            assert end.stdout.decode().split() == [row[4]]


def test_produce_with_keys_and_compression_from_stdin(cluster):
    zk, _brokers = cluster
    stdin = b"".join(f"user-{i % 3}\tclick {i}\n".encode() for i in range(30))
    result = logbroker(
        "produce",
        "--zookeeper",
        zk,
        "--topic",
        "keyed",
        "--key-separator",
        "\t",
        "--compression",
        "gzip",
        "--sync",
        stdin=stdin,
    )
    assert result.returncode == 0, result.stderr
    assert b"sent 30 of 30" in result.stderr


def test_lines_in_through_produce_come_out_through_consume_group_and_lag(cluster):
    zk, _brokers = cluster
    lines = [f'{{"n": {i}, "page": "/p{i % 7}"}}' for i in range(300)]
    produced = logbroker(
        "produce",
        "--zookeeper",
        zk,
        "--topic",
        "roundtrip",
        "--acks",
        stdin=("\n".join(lines) + "\n").encode(),
    )
    assert produced.returncode == 0, produced.stderr
    consumed = logbroker(
        "consume",
        "--zookeeper",
        zk,
        "--topic",
        "roundtrip",
        "--group",
        "cli-group",
        "--from-beginning",
        "--timeout-ms",
        "3000",
    )
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.decode().splitlines()) == sorted(lines)
    assert b"consumed 300 messages" in consumed.stderr

    lag = logbroker("lag", "--zookeeper", zk, "--group", "cli-group")
    assert lag.returncode == 0, lag.stderr
    rows = [line.split() for line in lag.stdout.decode().splitlines()[1:-1]]
    assert rows and all(row[0] == "roundtrip" for row in rows)
    assert all(row[3] == row[4] and row[5] == "0" for row in rows)  # committed == latest
    assert lag.stdout.decode().splitlines()[-1].startswith("total lag: 0 bytes")

    # the same group again: everything was committed, nothing is delivered twice
    again = logbroker(
        "consume",
        "--zookeeper",
        zk,
        "--topic",
        "roundtrip",
        "--group",
        "cli-group",
        "--timeout-ms",
        "1500",
    )
    assert again.stdout == b""


def test_consume_print_offsets_and_max_messages(cluster):
    zk, _brokers = cluster
    logbroker("produce", "--zookeeper", zk, "--topic", "few", "--acks", stdin=b"a\nb\nc\n")
    out = logbroker(
        "consume",
        "--zookeeper",
        zk,
        "--topic",
        "few",
        "--from-beginning",
        "--max-messages",
        "2",
        "--print-offsets",
        "--timeout-ms",
        "3000",
    )
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.decode().splitlines()]
    assert len(rows) == 2
    for partition, offset, next_offset, payload in rows:
        assert "-" in partition and int(next_offset) == int(offset) + 4 + 6 + len(payload)


# tqdm is in the `cli` extra, not in the library's dependencies: without it the command does
# the same work and shows no bar. `sys.modules["tqdm"] = None` makes `import tqdm` fail.
_WITHOUT_TQDM = (
    "import runpy, sys; sys.modules['tqdm'] = None; "
    "sys.argv[0] = 'logbroker'; runpy.run_module('logbroker.cli', run_name='__main__')"
)


@pytest.mark.parametrize("tqdm_installed", [True, False], ids=["with-tqdm", "without-tqdm"])
def test_produce_runs_the_same_with_and_without_tqdm(cluster, tmp_path, tqdm_installed):
    zk, _brokers = cluster
    topic = "bars" if tqdm_installed else "no-bars"
    lines = [f"{i:08d} " + "x" * 60 for i in range(20_000)]  # > 1 MiB: the bar's threshold
    source = tmp_path / "big.txt"
    source.write_text("\n".join(lines) + "\n")
    argv = ["produce", "--zookeeper", zk, "--topic", topic, "--file", str(source), "--acks"]
    argv += ["--batch-size", "2000"]
    prefix = [sys.executable] if tqdm_installed else [sys.executable, "-c", _WITHOUT_TQDM]
    if tqdm_installed:
        prefix += ["-m", "logbroker.cli"]
    result = subprocess.run([*prefix, *argv], capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert b"sent 20000 of 20000 messages" in result.stderr
    # tqdm draws `topic: 100%|####| 1.41M/1.41M`; without it, only the summary line is printed
    assert (f"{topic}: 100%".encode() in result.stderr) == tqdm_installed, result.stderr
    if not tqdm_installed:
        assert len(result.stderr.decode().splitlines()) == 1, result.stderr

    described = logbroker("topics", "--zookeeper", zk, "describe", topic)
    rows = [line.split() for line in described.stdout.decode().splitlines()[1:]]
    assert sum(int(r[4]) for r in rows) == sum(4 + 6 + len(line) for line in lines)


def test_progress_bar_without_tqdm_does_nothing():
    script = (
        "import sys; sys.modules['tqdm'] = None\n"
        "from logbroker.commands.progress import NoProgressBar, progress_bar\n"
        "bar = progress_bar(total=10, file=sys.stderr)\n"
        "bar.update(5); bar.close()\n"
        "print(type(bar).__name__)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().strip() == "NoProgressBar" and result.stderr == b""


# -- errors: one clear line and a non-zero exit code, never a traceback ------------------------


def _one_line(stderr: bytes) -> str:
    lines = stderr.decode().splitlines()
    assert len(lines) == 1, stderr.decode()
    return lines[0]


def test_an_unreachable_zookeeper_is_one_line_and_exit_code_1():
    port = find_free_port()  # nothing listens there
    runs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "logbroker.cli", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for name, args in {
            "topics": ["topics", "--zookeeper", f"127.0.0.1:{port}", "list"],
            "lag": ["lag", "--zookeeper", f"127.0.0.1:{port}/live", "--group", "g"],
            "consume": ["consume", "--zookeeper", f"127.0.0.1:{port}", "--topic", "t"],
        }.items()
    }
    for name, run in runs.items():
        _, stderr = run.communicate(timeout=120)
        assert run.returncode == 1, (name, stderr)
        line = _one_line(stderr)  # no traceback, no kazoo warning per attempt
        assert line.startswith(f"logbroker {name}: cannot connect to ZooKeeper at 127.0.0.1:{port}")


def test_a_chroot_not_there_yet_is_one_line_without_kazoos_warning(zk_chroot):
    """README's walk-through once ran the mirror before the analysis cluster's chroot existed:
    besides its own line, kazoo's two-line UserWarning ("No chroot path exists")."""
    missing = zk_chroot.connect + "/analysis"
    lag = logbroker("lag", "--zookeeper", missing, "--group", "mirror-analysis")
    assert lag.returncode == 1
    assert _one_line(lag.stderr) == (
        f"logbroker lag: no consumer group 'mirror-analysis' in {missing}"
    )


def test_offsets_arguments_are_checked_before_connecting():
    base = ["offsets", "--broker", "127.0.0.1:1", "--topic", "t"]  # nothing listens on port 1
    result = logbroker(*base, "--partition", "0", "--time", "-5")
    assert result.returncode == 2
    assert (
        "argument --time: expected -1 (the latest offset), -2 (the earliest) or a time in ms "
        "since the epoch (0 or more), got '-5'"
    ) in result.stderr.decode()
    result = logbroker(*base, "--partition", "-1", "--time", "-1")
    assert result.returncode == 2
    assert "argument --partition: must be 0 or more, got -1" in result.stderr.decode()
    result = logbroker(*base, "--partition", "0", "--time", "-1", "--max", "0")
    assert result.returncode == 2 and b"argument --max: must be 1 or more" in result.stderr
    for ok_time in ("-2", "0", "1700000000000"):  # these get as far as connecting
        result = logbroker(*base, "--partition", "0", "--time", ok_time)
        assert result.returncode == 1 and b"cannot connect to broker" in result.stderr


def test_offsets_for_a_partition_the_broker_does_not_have_says_so(standalone_broker):
    broker = standalone_broker
    result = logbroker(
        "offsets", "--broker", f"{broker.host}:{broker.port}", "--topic", "t",
        "--partition", "7", "--time", "-1",
    )  # fmt: skip
    assert result.returncode == 1
    line = _one_line(result.stderr)
    assert line.startswith(f"logbroker offsets: broker {broker.host}:{broker.port} closed")
    assert "refused OFFSETS for partition 7 of 't'" in line


def test_an_illegal_topic_is_refused_before_connecting(tmp_path):
    emoji = "emoji😀"
    for args in (
        ["topics", "--zookeeper", "127.0.0.1:1", "create", emoji, "--partitions", "1"],
        ["topics", "--zookeeper", "127.0.0.1:1", "describe", emoji],
        ["produce", "--broker-list", "127.0.0.1:1", "--topic", emoji],
        ["consume", "--zookeeper", "127.0.0.1:1", "--topic", emoji],
        [
            "offsets",
            "--broker",
            "127.0.0.1:1",
            "--topic",
            emoji,
            "--partition",
            "0",
            "--time",
            "-1",
        ],
    ):
        result = logbroker(*args, stdin=b"a line\n")
        assert result.returncode == 2, args
        assert (
            f"topic name '{emoji}' contains the illegal character '😀' at position 5"
        ) in result.stderr.decode(), args
    result = logbroker("topics", "--zookeeper", "127.0.0.1:1", "create", "t", "--partitions", "0")
    assert result.returncode == 2 and b"argument --partitions: must be 1 or more" in result.stderr


def test_a_refused_topic_is_one_line_with_the_brokers_own_reason(zk_chroot, broker_factory):
    # Two brokers with different limits: the reason is the refusing broker's, not a default.
    broker_factory(0, zk=zk_chroot)
    broker_factory(1, zk=zk_chroot, max_partitions_per_topic=16)
    zk = zk_chroot.connect
    result = logbroker("topics", "--zookeeper", zk, "create", "manyparts", "--partitions", "100000")
    assert result.returncode == 1
    assert _one_line(result.stderr) == (
        "logbroker topics: broker 0 refused topic 'manyparts': a topic has 1 to 1024 "
        "partitions per broker (max.partitions.per.topic), not 100000"
    )
    result = logbroker("topics", "--zookeeper", zk, "create", "wide", "--partitions", "20")
    assert result.returncode == 1
    assert _one_line(result.stderr) == (
        "logbroker topics: broker 1 refused topic 'wide' (already created on broker 0): "
        "a topic has 1 to 16 partitions per broker (max.partitions.per.topic), not 20"
    )
    listed = logbroker("topics", "--zookeeper", zk, "list").stdout.decode()
    assert "manyparts" not in listed


def test_a_bad_name_is_refused_with_the_rule_it_breaks():
    result = logbroker("topics", "--zookeeper", "127.0.0.1:1", "create", "a b", "--partitions", "1")
    assert result.returncode == 2
    assert (
        "topic name 'a b' contains the illegal character ' ' at position 1 "
        "(a topic name is ASCII letters, digits, '.', '_' and '-')"
    ) in result.stderr.decode()
    result = logbroker(
        "topics", "--zookeeper", "127.0.0.1:1", "create", "x" * 250, "--partitions", "1"
    )
    assert (
        result.returncode == 2
        and "is 250 characters, over the limit of 249" in result.stderr.decode()
    )


def test_create_if_not_exists_leaves_a_replicated_topic_as_it_is(cluster):
    zk, _ = cluster
    create = ("topics", "--zookeeper", zk, "create", "orders", "--replication-factor", "2")
    first = logbroker(*create, "--partitions", "2", "--if-not-exists")
    assert first.returncode == 0 and b"created orders: 2 partitions" in first.stdout, first.stderr
    again = logbroker(*create, "--partitions", "4", "--if-not-exists")
    assert again.returncode == 0, again.stderr
    assert again.stdout == b"orders exists already: 2 partitions, 2 replicas each\n"
    refused = logbroker(*create, "--partitions", "2")
    assert refused.returncode == 1 and b"exists already" in refused.stderr
