"""The mirror's benchmark: `logbroker mirror` next to the plain consumer and producer alone.

    .venv/bin/python bench/mirror.py                 # the full run (1,000,000 messages; 50,000/s lag)
    .venv/bin/python bench/mirror.py --quick         # seconds: indicative ratios only

One ZooKeeper, a source cluster (chroot /live) and a target cluster (/analysis), one broker
process each, all on 127.0.0.1. 200-byte random messages in sets of 50, in one run:

  consumer_alone_{none,snappy}   a group consumer reads N pre-loaded messages (deep: every
                                 message handed out, snappy sets decompressed) - msgs/s
  producer_alone_{none,snappy}   a plain producer (acks none) sends the same N messages to the
                                 target in sets of 50 (snappy: compressed per set) - msgs/s,
                                 until the target broker has them all
  mirror_{none,snappy}           the mirror (in this process, --until-caught-up) copies the N
                                 messages from source to target: first to last acknowledged
                                 write - msgs/s (snappy: inner messages; sets forwarded as is)
  lag_p50/p99_ms                 a producer sends numbered, time-stamped messages at a steady
                                 --rate (sets of 50) to the source; `logbroker mirror` (its own
                                 process) copies them; a consumer process on the target notes
                                 arrival - produce time per message

Goals (issue 10, on 2 cores): mirror_none >= 0.5 x min(consumer_alone_none,
producer_alone_none); mirror_snappy >= consumer_alone_snappy (msgs/s); lag p99 <= 100 ms at
50,000 messages/s. Writes mirror.json and mirror.png (with matplotlib; bench/requirements.txt)
to --output-dir (default bench/results).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import random
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from logbroker.client.cluster import Cluster
from logbroker.client.group_consumer import GroupConsumer
from logbroker.client.producer import Producer
from logbroker.coordination import paths
from logbroker.coordination.rebalance import Whitelist
from logbroker.mirror import MirrorMaker
from logbroker.mirror.events import AuditedEvents
from logbroker.mirror.metrics import MirrorMetrics
from logbroker.mirror.settings import TargetSettings
from logbroker.serde.framing import prefix
from logbroker.stack.broker import BrokerProcess
from logbroker.stack.zookeeper import ZooKeeperServer

SIZE, PER_SET = 200, 50
_STAMP = struct.Struct(">qq")  # produce time (ns since the epoch), sequence number


def pool(n: int = 5000) -> list[bytes]:
    """Framed events of SIZE bytes (schema id 1, a header timestamp, random body): what a
    mirror copies in production, so it reads every event time as it does there."""
    rng = random.Random(SIZE)
    start_ms = 1_795_000_000_000
    events = []
    for i in range(n):
        zigzag = (start_ms + i) << 1
        varint = bytearray()
        while zigzag >= 0x80:
            varint.append(zigzag & 0x7F | 0x80)
            zigzag >>= 7
        varint.append(zigzag)
        head = prefix(1) + bytes(varint)
        events.append(head + rng.randbytes(SIZE - len(head)))
    return events


def produce(broker: BrokerProcess, topic: str, n: int, codec: str) -> float:
    """Send n messages in sets of 50 (acks none); seconds until the broker holds them all."""
    data = pool()
    with Producer(broker_list=f"0:127.0.0.1:{broker.address[1]}", compression_codec=codec) as p:
        start = time.perf_counter()
        for i in range(0, n, PER_SET):
            p.send_batch([(topic, None, data[(i + j) % len(data)]) for j in range(PER_SET)])
        sent = p.stats.sent_messages
    assert sent == n, f"sent {sent} of {n}"
    with Cluster(broker.zk_connect or "") as cluster:
        expected = None
        while True:
            rows = cluster.describe(topic) if topic in cluster.topics() else []
            latest = sum(r.latest for r in rows)
            if expected is None or latest != expected:
                expected = latest
            if rows and latest == expected and _settled(cluster, topic, latest):
                return time.perf_counter() - start
            time.sleep(0.01)


def _settled(cluster: Cluster, topic: str, latest: int) -> bool:
    time.sleep(0.05)
    return sum(r.latest for r in cluster.describe(topic)) == latest


def consume_alone(zk: str, topic: str, n: int) -> float:
    consumer = GroupConsumer(f"alone-{topic}", zk, autocommit_enable=False, fetch_size=1 << 20)
    try:
        stream = consumer.create_message_streams({topic: 1})[topic][0]
        start = time.perf_counter()
        for got, _ in enumerate(stream, 1):
            if got == n:
                break
        return time.perf_counter() - start
    finally:
        consumer.close()


def mirror_copy(live: str, analysis: str, topic: str, n_inner: int, per_message: int) -> float:
    metrics = MirrorMetrics()
    mirror = MirrorMaker(
        {"zk.connect": live, "groupid": f"mirror-{topic}", "autocommit.interval.ms": "1000"},
        TargetSettings(zk_connect=analysis, broker_list=None),
        Whitelist(topic),
        until_caught_up=True,
        metrics=metrics,
        events=AuditedEvents(None, metrics),  # reads every payload's header, as shipped
    )
    marks: list[float] = []

    def sample() -> None:
        while not done.is_set():
            forwarded = mirror.metrics.value("logbroker_mirror_messages_total", topic=topic)
            if forwarded and not marks:
                marks.append(time.perf_counter())
            if forwarded * per_message >= n_inner:
                marks.append(time.perf_counter())
                return
            time.sleep(0.01)  # reading the registry takes the GIL from the mirror

    done = threading.Event()
    sampler = threading.Thread(target=sample, daemon=True)
    start = time.perf_counter()
    sampler.start()
    result = mirror.run()
    done.set()
    sampler.join()
    assert result.exit_code == 0, result.error
    if len(marks) < 2:
        return time.perf_counter() - start
    # the first acknowledged batch already carried messages: count it in from the start
    return marks[1] - start if marks[1] - marks[0] < 0.01 else marks[1] - marks[0]


def _target_reader(zk: str, topic: str, out: str, expected: int) -> None:
    consumer = GroupConsumer("lag-reader", zk, autocommit_enable=False, fetch_wait_max_ms=10)
    lags = []
    stream = consumer.create_message_streams({topic: 1})[topic][0]
    for m in stream:
        sent_ns, _ = _STAMP.unpack_from(m.payload)
        lags.append((time.time_ns() - sent_ns) / 1e6)
        if len(lags) >= expected:
            break
    consumer.close()
    Path(out).write_text(json.dumps(lags))


def _wait_owned(zk: str, group: str, topic: str, timeout_s: float = 60.0) -> None:
    with Cluster(zk) as cluster:
        deadline = time.monotonic() + timeout_s
        path = paths.consumer_owners_path(group, topic)
        while not (cluster.zk.exists(path) and cluster.zk.get_children(path)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"group {group} did not take {topic} within {timeout_s:g} s")
            time.sleep(0.05)
    time.sleep(0.5)  # its fetcher starts right after the claim


def lag(
    work: Path, source: BrokerProcess, live: str, analysis: str, rate: int, seconds: float
) -> dict[str, float]:
    topic = "lag"
    for connect in (live, analysis):  # the reader owns its partition before the first send
        with Cluster(connect) as cluster:
            cluster.create_topic(topic, 1)
    consumer_config, producer_config = (
        work / "lag-consumer.properties",
        work / "lag-producer.properties",
    )
    consumer_config.write_text(
        f"zk.connect={live}\ngroupid=lag-mirror\nautooffset.reset=smallest\n"
    )
    producer_config.write_text(f"zk.connect={analysis}\n")
    mirror = subprocess.Popen(
        [sys.executable, "-m", "logbroker.cli", "mirror", "--consumer.config", str(consumer_config),
         "--producer.config", str(producer_config), "--whitelist", topic],
    )  # fmt: skip
    total = int(rate * seconds) // PER_SET * PER_SET
    out = work / "lags.json"
    reader = multiprocessing.get_context("spawn").Process(
        target=_target_reader, args=(analysis, topic, str(out), total)
    )
    reader.start()
    for connect, group in ((live, "lag-mirror"), (analysis, "lag-reader")):
        _wait_owned(connect, group, topic)  # not timed: a group still joining is not lag
    filler = b"x" * (SIZE - _STAMP.size)
    interval = PER_SET / rate
    with Producer(broker_list=f"0:127.0.0.1:{source.address[1]}") as p:
        next_at = time.perf_counter()
        for i in range(0, total, PER_SET):
            now_ns = time.time_ns()
            p.send_batch(
                [(topic, None, _STAMP.pack(now_ns, i + j) + filler) for j in range(PER_SET)]
            )
            next_at += interval
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        achieved = total / (time.perf_counter() - (next_at - total / rate))
    reader.join(120)
    mirror.send_signal(signal.SIGTERM)
    mirror.wait(60)
    if reader.is_alive():
        reader.kill()
        return {
            "lag_rate_target": rate,
            "lag_rate_achieved": achieved,
            "lag_error": "reader did not get every message",
        }
    lags = sorted(json.loads(out.read_text()))
    pick = lambda q: lags[min(len(lags) - 1, int(len(lags) * q))]  # noqa: E731
    return {
        "lag_rate_target": rate,
        "lag_rate_achieved": round(achieved),
        "lag_p50_ms": round(pick(0.50), 2),
        "lag_p99_ms": round(pick(0.99), 2),
        "lag_max_ms": round(lags[-1], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="100,000 messages, 5 s of lag at 10,000/s"
    )
    parser.add_argument(
        "--messages", type=int, help="messages per workload (default 1,000,000; quick 100,000)"
    )
    parser.add_argument(
        "--rate", type=int, help="lag workload rate, msgs/s (default 50,000; quick 10,000)"
    )
    parser.add_argument(
        "--lag-seconds", type=float, help="lag workload length (default 30; quick 5)"
    )
    parser.add_argument("--output-dir", type=Path, default=Path(__file__).with_name("results"))
    args = parser.parse_args(argv)
    n = args.messages or (100_000 if args.quick else 1_000_000)
    n = n // PER_SET * PER_SET
    rate = args.rate or (10_000 if args.quick else 50_000)
    seconds = args.lag_seconds or (5.0 if args.quick else 30.0)
    work = Path(tempfile.mkdtemp(prefix="bench-mirror-"))
    zk = ZooKeeperServer(work / "zk")
    zk.start()
    brokers = []
    try:
        live = zk.create_chroot("/live").connect
        analysis = zk.create_chroot("/analysis").connect
        source = BrokerProcess(
            work / "source", 0, zk_connect=live, overrides={"num.partitions": "1"}
        ).start()
        target = BrokerProcess(
            work / "target", 0, zk_connect=analysis, overrides={"num.partitions": "1"}
        ).start()
        brokers = [source, target]
        results: dict[str, float | int | str] = {
            "messages": n,
            "message_bytes": SIZE,
            "per_set": PER_SET,
        }
        for codec in ("none", "snappy"):
            topic = f"bench-{codec}"
            print(f"preloading {n} messages ({codec}) ...", flush=True)
            produce(source, topic, n, codec)
            results[f"producer_alone_{codec}"] = round(
                n / produce(target, f"alone-{codec}", n, codec)
            )
            results[f"consumer_alone_{codec}"] = round(n / consume_alone(live, topic, n))
            per_message = 1 if codec == "none" else PER_SET
            results[f"mirror_{codec}"] = round(
                n / mirror_copy(live, analysis, topic, n, per_message)
            )
            print({k: v for k, v in results.items() if codec in k}, flush=True)
        results.update(lag(work, source, live, analysis, rate, seconds))
        slower = min(float(results["consumer_alone_none"]), float(results["producer_alone_none"]))
        results["ratio_mirror_none_to_slower_alone"] = round(
            float(results["mirror_none"]) / slower, 2
        )
        results["ratio_mirror_snappy_to_consumer_snappy"] = round(
            float(results["mirror_snappy"]) / float(results["consumer_alone_snappy"]), 2
        )
    finally:
        for b in brokers:
            b.stop()
        zk.stop()
    info = {"quick": args.quick, "nproc": os.cpu_count(), "python": platform.python_version(),
            "command": " ".join([Path(sys.executable).name, *sys.argv])}  # fmt: skip
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / "mirror.json").write_text(
        json.dumps({"results": results, "info": info}, indent=2) + "\n"
    )
    print(json.dumps(results, indent=2))
    plot(results, info, args.output_dir / "mirror.png")
    return 0


def plot(results: dict[str, float | int | str], info: dict[str, object], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (bench/requirements.txt): no plot", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(8, 4.5))
    names = ["consumer_alone", "producer_alone", "mirror"]
    for k, codec in enumerate(("none", "snappy")):
        values = [float(results[f"{name}_{codec}"]) for name in names]
        xs = [i + k * 0.38 for i in range(len(names))]
        bars = ax.bar(xs, values, width=0.36, label=codec)
        ax.bar_label(bars, labels=[f"{v / 1000:.0f}k" for v in values], fontsize=8)
    ax.set_xticks([i + 0.19 for i in range(len(names))], names)
    ax.set_ylabel("messages/s (200 bytes, sets of 50)")
    ax.set_title(
        f"Mirror throughput; lag p99 {results.get('lag_p99_ms', '?')} ms at {results.get('lag_rate_achieved', '?')}/s"
    )
    ax.legend(title="compression")
    fig.text(0.01, 0.01, f"{info['nproc']} cores, quick={info['quick']}", fontsize=7, color="gray")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
