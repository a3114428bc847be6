"""A picture of a fault run: the faults, the leaders and the throughput on one time axis.

    plot(history, verdict, path)     False (nothing written) when matplotlib is not installed

Three rows, seconds since the run started on the x axis:
1. acknowledged writes a second, per partition (lines), and unknown writes a second (red);
2. each partition's leader (broker id; -1 when offline), as ZooKeeper's states said;
3. the faults, one bar per fault from its start to its undoing, labelled with the broker hit.

matplotlib is the benchmark's dependency (bench/requirements.txt), not the library's: it is
imported here only, when a plot is asked for.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from .history import History
from .nemesis import KINDS


def plot(history: History, verdict: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    start = history["meta"]["started"]
    partitions = int(history["meta"]["partitions"])
    end = max(history["meta"].get("ended", start) - start, 1.0)
    seconds = list(range(int(end) + 1))
    fig, (rate, leaders, faults) = plt.subplots(
        3, 1, figsize=(12, 7), sharex=True, gridspec_kw={"height_ratios": [3, 1.5, 2]}
    )
    for p in range(partitions):
        acked = Counter(
            int(op["complete"] - start)
            for op in history["ops"]
            if op["type"] == "ok" and op["partition"] == p
        )
        rate.plot(seconds, [acked[s] for s in seconds], label=f"p{p} acknowledged", lw=1)
    unknown = Counter(
        int((op["complete"] or op["invoke"]) - start) for op in history["ops"] if op["type"] != "ok"
    )
    rate.bar(seconds, [unknown[s] for s in seconds], color="tab:red", label="unknown", width=1.0)
    rate.set_ylabel("writes / s")
    rate.legend(loc="upper right", fontsize=7, ncol=partitions + 1)
    stats = verdict["stats"]
    rate.set_title(
        f"seed {history['meta']['seed']}: {'VALID' if verdict['valid'] else 'INVALID'}, "
        f"{stats['acknowledged']} acknowledged (acks=-1), {stats['acks1_acknowledged']} "
        f"(acks=1, {stats['acks1_lost']} lost), {stats['unknown']} unknown, "
        f"{sum(stats['faults'].values())} faults"
    )
    for p in range(partitions):
        seen = sorted(
            (s["t"] - start, s["leader"]) for s in history["states"] if s["partition"] == p
        )
        if seen:
            times, ids = zip(*seen, strict=True)
            leaders.step([*times, end], [*ids, ids[-1]], where="post", label=f"p{p}", lw=1)
    leaders.set_ylabel("leader")
    leaders.set_yticks(sorted({-1, *history["meta"]["brokers"]}))
    leaders.legend(loc="upper right", fontsize=7, ncol=partitions)
    for event in history.get("faults", []):
        if event.get("skipped"):
            continue
        row = KINDS.index(event["kind"])
        left, width = event["start"] - start, max(event["end"] - event["start"], 0.2)
        faults.broken_barh([(left, width)], (row - 0.35, 0.7), color=f"C{row}")
        faults.text(left, row, f" b{event['target']}", va="center", fontsize=7)
    faults.set_yticks(range(len(KINDS)), KINDS, fontsize=8)
    faults.set_ylim(-0.6, len(KINDS) - 0.4)
    faults.set_xlabel("seconds into the run")
    faults.set_xlim(0, end)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
