"""bench/run.py's report: a text table, summary.md and the PNG plots, from the records
(the pieces every benchmark's report shares, and the writing of the files: outputs.py).

Also runnable on its own, to redraw from a run's files without measuring again:

    .venv/bin/python bench/report.py [bench/results]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from outputs import (
    COLORS,
    cdf_axes,
    cell,
    errors_section,
    fmt,
    md_table,
    plot_cdf,
    pyplot,
    run_line,
    save,
    text_table,
    value_label,
)

PEERS = ("rabbitmq", "activemq", "redis")
SYSTEM_ORDER = ("logbroker", "rabbitmq", "activemq", "redis", "redis_c", "tcp")
# logbroker over TLS and SASL_SSL (issue 46), beside its PLAINTEXT rows of the same run, and
# each as a ratio to PLAINTEXT in the same repetition (run.py's secure block).
SECURE_GOALS = (("produce_batch50", 0.7), ("consume", 0.5))  # SASL_SSL ≥ this × PLAINTEXT
SECURE_WORKLOADS = tuple(
    f"{w}_{p}{kind}"
    for w, _ in SECURE_GOALS
    for p in ("ssl", "sasl_ssl")
    for kind in ("", "_ratio")
)
WORKLOADS = (
    "produce_batch1",
    "produce_batch50",
    "consume",
    "produce_and_consume",
    "latency_p50",
    "latency_p99",
    "latency_p999",
    "latency_unpinned_p50",
    "latency_unpinned_p99",
    "latency_unpinned_p999",
    "disk_bytes_per_message",
    "disk_overhead_per_message",
    "growth_first_100mb",
    "growth_final",
    "growth_ratio",
    "group_consume_1",
    "group_consume_2",
    "json_produce_none",
    "json_produce_gzip",
    "json_produce_snappy",
    "json_consume_none",
    "json_consume_gzip",
    "json_consume_snappy",
    "compression_ratio_gzip",
    "compression_ratio_snappy",
    "intake_first_100mb",
    "intake_last_10pct",
    "intake_overall",
    "intake_ratio",
    *SECURE_WORKLOADS,
)
SIZE_KINDS = ("records", "mb", "vs_relay")  # the size sweep's rows: size_<bytes>b_<kind>
RELAY = "tcp"  # whose intake and size rows are the relay's (bench/systems/tcp.py)
INTAKE_GOAL = 0.6  # issue 33: the broker's intake, and its MB/s at 1 KB and above, vs the relay
SIZE_GOAL_FROM = 1000
LOWER_IS_BETTER = {"ms", "bytes"}
# The one-way latency's two placements (run.py): the server apart from its clients, and the
# kernel scheduler's choice.
PLACEMENTS = (("latency", "apart"), ("latency_unpinned", "unpinned"))


def _index(records: Sequence[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["system"], r["workload"]): r for r in records}


def _systems(records: Sequence[dict[str, Any]]) -> list[str]:
    present = {r["system"] for r in records}
    return [s for s in SYSTEM_ORDER if s in present]


def _size_row(workload: str) -> tuple[int, int] | None:
    """(message size, kind's place) of a size sweep row `size_<bytes>b_<kind>`, else None."""
    head, _, rest = workload.partition("_")
    size, _, kind = rest.partition("b_")
    if head != "size" or not size.isdigit() or kind not in SIZE_KINDS:
        return None
    return int(size), SIZE_KINDS.index(kind)


def _sweep(records: Sequence[dict[str, Any]]) -> dict[str, dict[int, dict[str, Any]]]:
    """{kind: {size: {system: record}}} of the size sweep's rows."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for r in records:
        found = _size_row(r["workload"])
        if found:
            size, kind = found
            out.setdefault(SIZE_KINDS[kind], {}).setdefault(size, {})[r["system"]] = r
    return out


def _workloads(records: Sequence[dict[str, Any]]) -> list[str]:
    present = {r["workload"] for r in records}
    sizes = sorted((w for w in present if _size_row(w)), key=lambda w: _size_row(w) or (0, 0))
    rest = sorted(present - set(WORKLOADS) - set(sizes))
    return [w for w in WORKLOADS if w in present] + sizes + rest


def best_peer(
    idx: dict[tuple[str, str], dict[str, Any]], workload: str
) -> tuple[str, float] | None:
    found = [(s, idx[(s, workload)]["median"]) for s in PEERS if (s, workload) in idx]
    if not found:
        return None
    lower = idx[found[0][0], workload]["unit"] in LOWER_IS_BETTER
    return min(found, key=lambda x: x[1]) if lower else max(found, key=lambda x: x[1])


def best_placement(
    idx: dict[tuple[str, str], dict[str, Any]], system: str, stat: str
) -> tuple[float, str] | None:
    """(the lower median of `stat` over the two placements, that placement's name), or None."""
    found = [
        (idx[(system, f"{w}_{stat}")]["median"], name)
        for w, name in PLACEMENTS
        if (system, f"{w}_{stat}") in idx
    ]
    return min(found) if found else None


def ratio_to_best(idx: dict[tuple[str, str], dict[str, Any]], workload: str) -> str:
    best = best_peer(idx, workload)
    mine = idx.get(("logbroker", workload))
    if best is None or mine is None or not best[1]:
        return ""
    return f"{mine['median'] / best[1]:.2f}× {best[0]}"


def table(records: Sequence[dict[str, Any]], info: dict[str, Any]) -> str:
    """A plain text table of the medians (what run.py prints at the end)."""
    idx = _index(records)
    systems = _systems(records)
    rows = [["workload", "unit", *systems, "logbroker/best peer"]]
    for w in _workloads(records):
        unit = next(r["unit"] for r in records if r["workload"] == w)
        rows.append(
            [
                w,
                unit,
                *(fmt(idx[(s, w)]["median"]) if (s, w) in idx else "-" for s in systems),
                ratio_to_best(idx, w),
            ]
        )
    return text_table(rows, left=2)


def goals(idx: dict[tuple[str, str], dict[str, Any]]) -> list[list[str]]:
    """The issue's goals for logbroker, each with the measured value and whether it is met."""
    out = []

    def get(system: str, workload: str) -> float | None:
        r = idx.get((system, workload))
        return None if r is None else float(r["median"])

    def row(
        goal: str,
        measured: float | None,
        target: float | None,
        met: bool | None,
        fmt: str = "{:,.0f}",
    ) -> None:
        out.append(
            [
                goal,
                "-" if measured is None else fmt.format(measured),
                "-" if target is None else fmt.format(target),
                "n/a" if met is None else ("yes" if met else "**no**"),
            ]
        )

    for workload, factor, label in (
        ("produce_batch50", 5, "producer, batch 50"),
        ("consume", 2, "consumer"),
    ):
        best = best_peer(idx, workload)
        mine = get("logbroker", workload)
        target = factor * best[1] if best else None
        row(
            f"{label} ≥ {factor}× the best peer ({best[0] if best else '-'})",
            mine,
            target,
            None if mine is None or target is None else mine >= target,
        )
    for workload, factor in SECURE_GOALS:
        ratio = get("logbroker", f"{workload}_sasl_ssl_ratio")
        row(
            f"{workload} over SASL_SSL ≥ {factor}× PLAINTEXT (same run)",
            ratio,
            factor,
            None if ratio is None else ratio >= factor,
            "{:.2f}",
        )
    rabbit, mine = get("rabbitmq", "produce_batch1"), get("logbroker", "produce_batch1")
    row(
        "producer, batch 1 ≥ 4× RabbitMQ",
        mine,
        4 * rabbit if rabbit else None,
        None if mine is None or rabbit is None else mine >= 4 * rabbit,
    )
    # Each system at its better placement: a multi-threaded peer may lose by being pinned.
    peers = [(best_placement(idx, s, "p50"), s) for s in PEERS]
    peers_found = [(found, s) for found, s in peers if found is not None]
    best_lat = min(peers_found) if peers_found else None
    mine_lat = best_placement(idx, "logbroker", "p50")
    row(
        "latency median ≤ the best peer's, each at its better placement"
        + (
            f" (logbroker {mine_lat[1]}, {best_lat[1]} {best_lat[0][1]})"
            if mine_lat and best_lat
            else ""
        ),
        mine_lat[0] if mine_lat else None,
        best_lat[0][0] if best_lat else None,
        None if mine_lat is None or best_lat is None else mine_lat[0] <= best_lat[0][0],
        "{:.3f} ms",
    )
    p99s = [get("logbroker", f"{w}_p99") for w, _ in PLACEMENTS]
    worst = max((x for x in p99s if x is not None), default=None)
    row(
        "latency p99 ≤ 1 ms (the higher of the two placements)",
        worst,
        1.0,
        None if worst is None else worst <= 1.0,
        "{:.3f} ms",
    )
    mine = get("logbroker", "disk_overhead_per_message")
    row(
        "storage overhead ≤ 10 bytes per message",
        mine,
        10,
        None if mine is None else mine <= 10,
        "{:.1f}",
    )
    mine = get("logbroker", "growth_ratio")
    gb = idx.get(("logbroker", "growth_ratio"), {}).get("stored_gb")
    row(
        f"throughput at {gb or '?':.3g} GB within 10 % of the first 100 MB"
        if gb
        else "throughput at several GB within 10 % of the first 100 MB",
        mine,
        0.9,
        None if mine is None else mine >= 0.9,
        "{:.2f}×",
    )
    mine = get("logbroker", "intake_ratio")
    gb = idx.get(("logbroker", "intake_last_10pct"), {}).get("stored_gb")
    row(
        f"intake over the last 10 % ≥ {INTAKE_GOAL}× the relay"
        + (f" (log at {gb:.3g} GB)" if gb else ""),
        mine,
        INTAKE_GOAL,
        None if mine is None else mine >= INTAKE_GOAL,
        "{:.2f}×",
    )
    ratios = {
        size: float(found["logbroker"]["median"])
        for size, found in _sweep(list(idx.values())).get("vs_relay", {}).items()
        if size >= SIZE_GOAL_FROM and "logbroker" in found
    }
    worst = min(ratios, key=lambda k: ratios[k]) if ratios else None
    row(
        f"message sizes ≥ {SIZE_GOAL_FROM:,} B: MB/s ≥ {INTAKE_GOAL}× the relay's"
        + (f" (lowest at {worst:,} B)" if worst else ""),
        ratios[worst] if worst else None,
        INTAKE_GOAL,
        None if worst is None else ratios[worst] >= INTAKE_GOAL,
        "{:.2f}×",
    )
    return out


def _cpus(info: dict[str, Any], key: str) -> str:
    placement = info.get("parameters", {}).get("latency_placement") or {}
    return ",".join(str(c) for c in placement.get(key, [])) or "?"


def markdown(records: Sequence[dict[str, Any]], info: dict[str, Any]) -> str:
    idx = _index(records)
    systems = _systems(records)
    m = info["machine"]
    parts = [
        "# Broker benchmark: logbroker and its peers on one machine",
        "",
        run_line(info),
        "",
        f"Machine: {m['nproc']} cores ({m['cpu']}), {m['ram_gib']} GiB RAM, {m['filesystem']}, "
        f"Linux {m['kernel']}, Debian {m['debian']}, Python {m['python']}, logbroker at "
        f"{m.get('git', '?')}; load average "
        f"{m['loadavg_start'][0]:.2f} at the start, {m['loadavg_end'][0]:.2f} at the end. "
        "Client and servers share the cores.",
        "",
        "Each cell: median of the repetitions (min–max). Throughput in messages/s of 200-byte "
        "messages; growth rows: median (min–max) over the windows of one run (tcp's growth "
        "rows: plain file appends, the machine's limit). The producer's clock stops when the "
        "server has accepted every message (appended, enqueued), not when it fsynced. "
        "Latency is one way (the 2014 post's end-to-end latency): from just before a producer "
        "process's send to a consumer process, already waiting, having the message; one in "
        "flight; CLOCK_MONOTONIC in both. `latency_*`: the server's processes on CPU "
        f"{_cpus(info, 'server_cpus')}, producer and consumer on CPU "
        f"{_cpus(info, 'client_cpus')} (taskset: Redis's benchmark notes call process placement "
        "necessary for deterministic results); `latency_unpinned_*`: wherever the kernel's "
        "scheduler puts them. `redis_c` is a reference, not a peer: the same Redis "
        "server driven by redis-benchmark (C), the server's ceiling; `tcp` is the machine's.",
        "",
    ]
    rows = [["workload", "unit", *systems, "logbroker / best peer"]]
    for w in _workloads(records):
        unit = next(r["unit"] for r in records if r["workload"] == w)
        cells = [cell(idx.get((s, w))) for s in systems]
        rows.append([f"`{w}`", unit, *cells, ratio_to_best(idx, w)])
    parts += [md_table(rows), ""]
    parts += [
        "## Goals (logbroker)",
        "",
        md_table([["goal", "measured", "target", "met"], *goals(idx)]),
        "",
    ]
    parts += ["## Plots", ""]
    for name, title in (
        ("producer_throughput", "Producer throughput (cf. Figure 4)"),
        ("consumer_throughput", "Consumer throughput (cf. Figure 5)"),
        ("latency", "One-way latency, producer process to waiting consumer process"),
        ("growth", "Producer throughput as stored data grows"),
        ("intake", "The broker's intake against the relay as the log grows"),
        ("sizes", "Effect of message size"),
    ):
        parts.append(f"![{title}]({name}.png)")
    parts += ["", "## Versions, batching, settings", ""]
    vrows = [["system", "server", "client", "batch 1", "batch 50", "consumer"]]
    for s in systems:
        v = info["versions"].get(s, {})
        b = info["batching"].get(s, {})
        vrows.append(
            [
                s,
                v.get("server", ""),
                v.get("client", ""),
                b.get("1", ""),
                b.get("50", ""),
                info["consuming"].get(s, ""),
            ]
        )
    parts += [md_table(vrows), ""]
    for s in systems:
        settings = info["settings"].get(s) or {}
        if settings:
            parts.append(f"- **{s}**: " + "; ".join(f"{k} {v}" for k, v in settings.items()))
    p = info["parameters"]
    parts += [
        "",
        f"Parameters: {p['reps']} repetitions, interleaved; messages per run "
        + ", ".join(f"{s} {p['n'][s]:,}" for s in systems if s in p["n"])
        + " (batch 1: "
        + ", ".join(f"{s} {p['n_batch1'][s]:,}" for s in systems if s in p["n_batch1"])
        + f"); latency {p['latency']:,} messages after {p['latency_warmup']} warm-up; "
        f"JSON {p['json_messages']:,} messages cycling {p['json_events']:,} events; growth "
        f"{p['growth_gb']:g} GB (logbroker; tcp: file appends), {p['growth_peer_gb']:g} GB "
        "(peers); "
        f"pull size {p['fetch_bytes']:,} bytes / 1000 messages; scale {p['scale']:g}.",
        "",
    ]
    if "intake_gb" in p:
        parts += [
            f"Intake (`intake_*`, MB/s of PRODUCE frames): prebuilt frames of "
            f"{p['intake_batch']} × {p['intake_message_bytes']} B over one socket until the "
            f"log holds {p['intake_gb']:g} GB, windows of {p['intake_window_mb']:g} MB; the "
            "tcp column is the relay (1 MiB reads appended to a file on the same disk, fsync "
            "at 10,000 messages' worth or every 1,000 ms, as the broker's flusher). Size sweep "
            f"(`size_*`): {p['sweep_seconds']:g} s per size at batch {p['sweep_batch']}, "
            "MB/s of payload; tcp is the relay, sent PRODUCE frames; `vs_relay`: MB/s over "
            "the relay's in the same repetition.",
            "",
        ]
    if info.get("skipped"):
        parts += [
            "Not measured: " + "; ".join(f"{k} ({v})" for k, v in info["skipped"].items()),
            "",
        ]
    parts += errors_section(info)
    return "\n".join(parts) + "\n"


# -- plots ----------------------------------------------------------------------------------


def _bars(
    ax: Any,
    idx: dict[tuple[str, str], dict[str, Any]],
    systems: list[str],
    workloads: list[tuple[str, str]],
    log: bool = True,
) -> None:
    import numpy as np

    width = 0.8 / max(1, len(workloads))
    x = np.arange(len(systems))
    shades = (1.0, 0.6, 0.35, 0.2)
    for j, (w, label) in enumerate(workloads):
        med, lo, hi, xs, colors = [], [], [], [], []
        for i, s in enumerate(systems):
            r = idx.get((s, w))
            if r is None:
                continue
            xs.append(x[i] + (j - (len(workloads) - 1) / 2) * width)
            med.append(r["median"])
            lo.append(r["median"] - r["min"])
            hi.append(r["max"] - r["median"])
            colors.append(COLORS.get(s, "#333333"))
        if not xs:
            continue
        bars = ax.bar(
            xs,
            med,
            width * 0.95,
            yerr=[lo, hi],
            capsize=3,
            color=colors,
            alpha=shades[j % len(shades)],
            edgecolor="black",
            linewidth=0.5,
            label=label,
        )
        for b, v in zip(bars, med, strict=True):
            value_label(ax, b.get_x() + b.get_width() / 2, v, fmt(v), 7, 3, rotation=90)
    ax.set_xticks(x, systems)
    if log:
        ax.set_yscale("log")
    ax.grid(axis="y", alpha=0.3, which="both")


def plots(records: Sequence[dict[str, Any]], info: dict[str, Any], outdir: Path) -> None:
    plt = pyplot()
    idx = _index(records)
    systems = _systems(records)
    stamp = f"run {info['run_id']}, {info['machine']['nproc']} cores shared by clients and servers"

    fig, ax = plt.subplots(figsize=(9, 5))
    _bars(
        ax,
        idx,
        systems,
        [
            ("produce_batch1", "batch 1"),
            ("produce_batch50", "batch 50"),
            ("produce_batch50_ssl", "batch 50, SSL"),
            ("produce_batch50_sasl_ssl", "batch 50, SASL_SSL"),
        ],
    )
    ax.set_ylabel("messages/s (log)")
    ax.set_title("Producer throughput, 200-byte messages (cf. the paper's Figure 4)")
    ax.legend(title="batch, security", fontsize=8)
    save(fig, outdir, "producer_throughput", stamp)

    fig, ax = plt.subplots(figsize=(10, 5))
    _bars(
        ax,
        idx,
        systems,
        [
            ("consume", "one consumer, pre-loaded"),
            ("consume_ssl", "pre-loaded, SSL"),
            ("consume_sasl_ssl", "pre-loaded, SASL_SSL"),
            ("produce_and_consume", "while producing"),
            ("group_consume_1", "group of 1"),
            ("group_consume_2", "group of 2"),
        ],
    )
    ax.set_ylabel("messages/s (log)")
    ax.set_title("Consumer throughput, ~1000 messages / 200 KB per pull (cf. Figure 5)")
    ax.legend(fontsize=8)
    save(fig, outdir, "consumer_throughput", stamp)

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    _bars(
        ax1,
        idx,
        # redis_c has no latency rows
        [s for s in systems if any((s, f"{w}_p50") in idx for w, _ in PLACEMENTS)],
        [
            (f"{w}_{stat}", f"{label}, {name}")
            for w, name in PLACEMENTS
            for stat, label in (("p50", "median"), ("p99", "p99"))
        ],
    )
    ax1.set_ylabel("ms (log)")
    ax1.set_title("One-way latency, producer process to waiting consumer, one in flight")
    ax1.legend(fontsize=8)
    for (w, name), style in zip(PLACEMENTS, ("-", ":"), strict=True):
        for s, reps in info.get("series", {}).get(w, {}).items():
            samples = [x for rep in reps for x in rep]
            plot_cdf(ax2, samples, style, f"{s}, {name}", COLORS.get(s))
    cdf_axes(ax2)
    save(fig, outdir, "latency", stamp)

    fig, ax = plt.subplots(figsize=(10, 5))
    for s, windows in info.get("series", {}).get("growth", {}).items():
        if windows:
            ax.plot(
                [w[0] / 1e9 for w in windows],
                [w[1] for w in windows],
                label=s,
                color=COLORS.get(s),
                marker="." if len(windows) < 60 else None,
            )
    ax.set_yscale("log")
    ax.set_xlabel("payload stored (GB)")
    ax.set_ylabel("producer messages/s, batch 50 (log)")
    ax.set_title("Producer throughput as stored data grows (cf. the 2014 post)")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    save(fig, outdir, "growth", stamp)

    intake_plot(info, outdir, stamp)
    sizes_plot(records, outdir, stamp)


def _label(system: str) -> str:
    return "relay (tcp)" if system == RELAY else system


def intake_plot(info: dict[str, Any], outdir: Path, stamp: str) -> None:
    """intake.png: MB/s of frames per window against the bytes stored, every repetition
    (the first drawn solid, the others faint)."""
    plt = pyplot()
    series = info.get("series", {}).get("intake", {})
    if not series:
        return
    fig, ax = plt.subplots(figsize=(10, 5))
    for s, reps in series.items():
        for i, windows in enumerate(reps):
            ax.plot(
                [w[0] / 1e9 for w in windows],
                [w[1] for w in windows],
                label=_label(s) + (" (repetition 1; the others faint)" if len(reps) > 1 else "")
                if i == 0
                else None,
                color=COLORS.get(s),
                alpha=1.0 if i == 0 else 0.3,
                marker="." if len(windows) < 80 and i == 0 else None,
            )
    ax.set_ylim(bottom=0)
    ax.set_xlabel("bytes stored (GB)")
    ax.set_ylabel("MB/s of PRODUCE frames")
    ax.set_title("Intake: prebuilt frames of 50 × 200 B over one socket, broker and relay")
    ax.grid(alpha=0.3)
    ax.legend()
    save(fig, outdir, "intake", stamp)


def sizes_plot(records: Sequence[dict[str, Any]], outdir: Path, stamp: str) -> None:
    """sizes.png: records/s and MB/s against the message size, medians with min-max bars."""
    plt = pyplot()
    sweep = _sweep(records)
    if not sweep:
        return
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    for ax, kind, ylabel in (
        (axes[0], "records", "records/s (log)"),
        (axes[1], "mb", "MB/s of payload (log)"),
    ):
        by_size = sweep.get(kind, {})
        present = {s for found in by_size.values() for s in found}
        for s in [x for x in SYSTEM_ORDER if x in present]:
            sizes = sorted(size for size, found in by_size.items() if s in found)
            med = [by_size[size][s]["median"] for size in sizes]
            lo = [m - by_size[size][s]["min"] for size, m in zip(sizes, med, strict=True)]
            hi = [by_size[size][s]["max"] - m for size, m in zip(sizes, med, strict=True)]
            ax.errorbar(
                sizes,
                med,
                yerr=[lo, hi],
                label=_label(s),
                color=COLORS.get(s),
                marker="o",
                capsize=3,
                linestyle="--" if s == RELAY else "-",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes, log)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, which="both")
        ax.legend()
    axes[0].set_title("Records/s by message size, batch 50 (cf. the 2014 post)")
    axes[1].set_title("MB/s by message size, batch 50")
    save(fig, outdir, "sizes", stamp)


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "results")
    recs = json.loads((out / "summary.json").read_text())
    run = json.loads((out / "run.json").read_text())
    (out / "summary.md").write_text(markdown(recs, run))
    plots(recs, run, out)
    print(table(recs, run))
