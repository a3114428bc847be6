"""The audited producer beside the plain producer, on the same pre-encoded events.

What the audit costs a producer: both send the same Avro events (about 200 bytes each, framed,
headers filled, encoded once before timing) in batches of 50 to one broker, with the same acks;
the audited one also counts every batch per topic and 10-minute window and publishes AuditCount
deltas when windows close and at the end (the final flush is inside its timing). Repetitions
alternate in one run (plain then audited, then audited then plain, ...), so both see the same
machine; the figure is the median of each, by wall clock and by the producer's own CPU time
(what the audit adds, whatever else the machine runs). Goal (issue 10): audited >= 0.85 x plain.

It starts a private ZooKeeper and one broker on free 127.0.0.1 ports under a temporary
directory, and stops both by PID. Results: bench/results/audited_producer.json and
audited_producer.png (the plot needs matplotlib: pip install -r bench/requirements.txt; without
it, `--plot-only` redraws the PNG later from the JSON with any Python that has it).

    .venv/bin/python bench/audited_producer.py                   # ~1 min
    .venv/bin/python bench/audited_producer.py --quick           # a few seconds, to check it runs
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
TOPIC = "page_views"
BATCH = 50


def page_view(i: int) -> dict[str, Any]:
    return {
        "member_id": 1_000_000 + i,
        "session_id": f"session-{i % 977:08d}-{i % 13:04d}",
        "page": f"/jobs/view/{3_000_000 + i}?trk=public_jobs_topcard-title&refId=abc{i % 91}",
        "referrer": "https://www.example.com/feed/?trk=guest_homepage",
        "user_agent": "Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101 Firefox/120.0",
        "duration_ms": 10 + i % 500,
    }


def prepare(producer: Any, events: int) -> list[Any]:
    return [
        producer.prepare(TOPIC, [page_view(i + k) for k in range(BATCH)])
        for i in range(0, events, BATCH)
    ]


def timed(send: Any, batches: list[Any], finish: Any) -> tuple[float, float]:
    """(events per wall second, events per CPU second of this process)."""
    started, cpu = time.perf_counter(), time.process_time()
    for batch in batches:
        send(batch)
    finish()
    events = sum(len(b.payloads) for b in batches)
    return events / (time.perf_counter() - started), events / (time.process_time() - cpu)


def run(events: int, reps: int, acks: str, work: Path) -> dict[str, Any]:
    # imported here so that --plot-only runs with any Python that has matplotlib
    from logbroker.audit.producer import AuditedProducer
    from logbroker.client.producer import Producer
    from logbroker.serde import SchemaRegistry, load_schema_file
    from logbroker.stack.broker import BrokerProcess
    from logbroker.stack.zookeeper import ZooKeeperServer

    with ZooKeeperServer(work / "zk") as zk:
        cluster = zk.create_chroot("/bench")
        with (
            BrokerProcess(work / "broker", broker_id=0, zk_connect=cluster.connect) as broker,
            SchemaRegistry(cluster.connect + "/registry") as registry,
        ):
            registry.register(TOPIC, load_schema_file(ROOT / "include/schemas/page_views.avsc"))
            plain = Producer(broker_list=f"{broker.host}:{broker.port}", acks=acks)
            audited = AuditedProducer(
                Producer(broker_list=f"{broker.host}:{broker.port}", acks=acks), registry
            )
            batches = prepare(audited, events)
            sizes = [len(p) for b in batches for p in b.payloads]
            warm = batches[: max(1, len(batches) // 10)]
            timed(lambda b: plain.send(TOPIC, b.payloads), warm, lambda: None)
            timed(audited.send_prepared, warm, audited.flush)
            rates: dict[str, list[tuple[float, float]]] = {"plain": [], "audited": []}
            for rep in range(reps):
                # alternate who goes first: the second of a pair meets a broker still
                # digesting the first one's fire-and-forget burst
                for side in ("plain", "audited") if rep % 2 == 0 else ("audited", "plain"):
                    if side == "plain":
                        rates[side].append(
                            timed(lambda b: plain.send(TOPIC, b.payloads), batches, lambda: None)
                        )
                    else:
                        rates[side].append(timed(audited.send_prepared, batches, audited.flush))
            audited.close()
            plain.close()
            publisher = audited.publisher
            assert publisher is not None
            counted = publisher.published_count
    plain_median = statistics.median(r[0] for r in rates["plain"])
    audited_median = statistics.median(r[0] for r in rates["audited"])
    plain_cpu = statistics.median(r[1] for r in rates["plain"])
    audited_cpu = statistics.median(r[1] for r in rates["audited"])
    return {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "events_per_rep": events,
        "batch": BATCH,
        "acks": acks,
        "reps": reps,
        "event_bytes": {"min": min(sizes), "max": max(sizes), "mean": statistics.mean(sizes)},
        "plain_msgs_per_s": [r[0] for r in rates["plain"]],
        "audited_msgs_per_s": [r[0] for r in rates["audited"]],
        "plain_median": plain_median,
        "audited_median": audited_median,
        "ratio": audited_median / plain_median,
        # the producer's own CPU per event: what the audit adds, whatever else runs on the machine
        "plain_msgs_per_cpu_s": [r[1] for r in rates["plain"]],
        "audited_msgs_per_cpu_s": [r[1] for r in rates["audited"]],
        "cpu_ratio": audited_cpu / plain_cpu,
        "goal_ratio": 0.85,
        "audit_counted": counted,  # every event the audited producer sent, warm-up included
        "audit_counted_all": counted == events * reps + sum(len(b.payloads) for b in warm),
    }


def plot(results: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: no plot (pip install -r bench/requirements.txt; then --plot-only)")
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    reps = range(1, results["reps"] + 1)
    ax.plot(reps, results["plain_msgs_per_s"], "o-", label="plain producer")
    ax.plot(reps, results["audited_msgs_per_s"], "s-", label="audited producer")
    ax.axhline(0.85 * results["plain_median"], color="grey", ls="--", label="goal: 0.85 x plain")
    ax.set_xlabel("repetition (interleaved)")
    ax.set_ylabel("events/s")
    ax.set_ylim(bottom=0)
    ax.set_title(
        f"Audited vs plain producer: ratio {results['ratio']:.3f} "
        f"({results['event_bytes']['mean']:.0f}-byte events, batch {results['batch']}, acks {results['acks']})",
        fontsize=9,
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=200_000, help="events per repetition")
    parser.add_argument("--reps", type=int, default=7, help="repetitions of each (interleaved)")
    parser.add_argument("--acks", choices=("none", "ack"), default="none")
    parser.add_argument("--quick", action="store_true", help="20,000 events, 5 repetitions")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--plot-only", action="store_true", help="redraw the PNG from the JSON")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = args.out / "audited_producer.json", args.out / "audited_producer.png"
    if args.plot_only:
        plot(json.loads(json_path.read_text()), png_path)
        return 0
    if args.quick:
        args.events, args.reps = 20_000, 5
    with tempfile.TemporaryDirectory(prefix="bench-audited-") as tmp:
        results = run(args.events, args.reps, args.acks, Path(tmp))
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    plot(results, png_path)
    print(
        f"plain {results['plain_median']:,.0f} events/s, audited {results['audited_median']:,.0f} "
        f"events/s: ratio {results['ratio']:.3f} (goal >= 0.85); per CPU second of the "
        f"producer: ratio {results['cpu_ratio']:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
