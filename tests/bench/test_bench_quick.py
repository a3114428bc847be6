"""The benchmark's quick mode keeps bench/ working: it runs, and writes the records it should.

Nothing here is about speed: no number is compared with anything. The peers (RabbitMQ,
ActiveMQ, Redis, and Redis driven by redis-benchmark) are measured only where bench/install-peers.sh installed them; nothing is
installed here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from logbroker.cli import main
from logbroker.commands.bench import default_bench_dir, split_bench_dir

BENCH = Path(__file__).resolve().parents[2] / "bench"
FIELDS = {"system", "workload", "unit", "median", "min", "max", "reps", "run_id"}
COMMON = {
    "produce_batch1": "msgs/s",
    "produce_batch50": "msgs/s",
    "consume": "msgs/s",
    "produce_and_consume": "msgs/s",
    "latency_unpinned_p50": "ms",
    "latency_unpinned_p99": "ms",
    "latency_unpinned_p999": "ms",
}
# The placed latency (the server on CPU 0, its clients on CPU 1) needs both CPUs.
PLACED = {"latency_p50": "ms", "latency_p99": "ms", "latency_p999": "ms"}
if {0, 1} <= os.sched_getaffinity(0):
    COMMON.update(PLACED)
STORED = {  # every system that stores messages, on top of COMMON
    "disk_bytes_per_message": "bytes",
    "disk_overhead_per_message": "bytes",
    "group_consume_1": "msgs/s",
    "group_consume_2": "msgs/s",
    "growth_first_100mb": "msgs/s",
    "growth_final": "msgs/s",
    "growth_ratio": "x",
}
SIZES = (10, 100, 1000, 10_000, 100_000)  # the size sweep: produce_for, batch 50
SWEPT = {
    **{f"size_{n}b_records": "msgs/s" for n in SIZES},
    **{f"size_{n}b_mb": "MB/s" for n in SIZES},
}
VS_RELAY = {f"size_{n}b_vs_relay": "x" for n in SIZES}  # each system's MB/s / the relay's
INTAKE = {  # logbroker and the relay
    "intake_first_100mb": "MB/s",
    "intake_last_10pct": "MB/s",
    "intake_overall": "MB/s",
}
SWEEPS = ("redis",)  # the peers whose clients have produce_for
LOGBROKER_ONLY = {
    **INTAKE,
    "intake_ratio": "x",
    **SWEPT,
    **VS_RELAY,
    **{f"json_produce_{c}": "msgs/s" for c in ("none", "gzip", "snappy")},
    **{f"json_consume_{c}": "msgs/s" for c in ("none", "gzip", "snappy")},
    "compression_ratio_gzip": "x",
    "compression_ratio_snappy": "x",
    # over SSL and SASL_SSL, and as ratios to PLAINTEXT's of the same repetition (issue 46)
    **{f"{w}_{p}": "msgs/s" for w in ("produce_batch50", "consume") for p in ("ssl", "sasl_ssl")},
    **{f"{w}_{p}_ratio": "x" for w in ("produce_batch50", "consume") for p in ("ssl", "sasl_ssl")},
}


def installed_peers() -> set[str]:
    """The peers run.py will measure, by their own `available()`: asked in a Python started
    in bench/, where `systems` imports from as it does for run.py (no sys.path edit)."""
    ask = (
        "import json, systems; names = (*systems.PEERS, 'redis_c'); "
        "print(json.dumps([n for n in names if systems.load(n).available()[0]]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", ask], cwd=BENCH, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return set(json.loads(proc.stdout.splitlines()[-1]))


@pytest.mark.slow
def test_quick_run_writes_every_record(tmp_path: Path) -> None:
    out = tmp_path / "results"
    proc = subprocess.run(
        [
            sys.executable,
            str(BENCH / "run.py"),
            "--quick",
            "--output-dir",
            str(out),
            "--workdir",
            str(tmp_path / "work"),
        ],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    records = json.loads((out / "summary.json").read_text())
    assert records and all(set(r) >= FIELDS for r in records)
    assert len({r["run_id"] for r in records}) == 1  # one run_id per invocation
    for r in records:
        assert r["min"] <= r["median"] <= r["max"], r
        assert r["reps"] >= 1

    found: dict[str, dict[str, str]] = {}
    for r in records:
        found.setdefault(r["system"], {})[r["workload"]] = r["unit"]
    expected = {"logbroker", "tcp"} | installed_peers()
    assert set(found) == expected
    assert found["logbroker"] == {**COMMON, **STORED, **LOGBROKER_ONLY}
    growth = {w: u for w, u in STORED.items() if w.startswith("growth")}
    # growth: plain file appends; intake and the sizes: the relay
    assert found["tcp"] == {**COMMON, **growth, **INTAKE, **SWEPT}
    for peer in expected - {"logbroker", "tcp", "redis_c"}:
        assert found[peer] == {**COMMON, **STORED, **(SWEPT | VS_RELAY if peer in SWEEPS else {})}
    if "redis_c" in expected:  # the C client's reference row: throughput only
        assert set(found["redis_c"]) == {"produce_batch1", "produce_batch50", "consume"}

    run = json.loads((out / "run.json").read_text())
    assert run["run_id"] == records[0]["run_id"] and run["errors"] == []
    summary = (out / "summary.md").read_text()
    assert "| `produce_batch50` |" in summary
    assert "| intake over the last 10 % ≥ 0.6× the relay" in summary
    assert "| message sizes ≥ 1,000 B: MB/s ≥ 0.6× the relay's" in summary
    assert "| produce_batch50 over SASL_SSL ≥ 0.7× PLAINTEXT (same run)" in summary
    # the size rows in the order of the sizes, not of their names
    rows = [line.split("`")[1] for line in summary.splitlines() if line.startswith("| `size_")]
    assert rows[::3] == [f"size_{n}b_records" for n in SIZES]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return  # the plots need bench/requirements.txt
    for name in (
        "producer_throughput",
        "consumer_throughput",
        "latency",
        "growth",
        "intake",
        "sizes",
    ):
        assert (out / f"{name}.png").stat().st_size > 1000


def test_cli_help_shows_the_benchmark_options(capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--help"]) == 0
    text = capfd.readouterr().out
    assert "--bench-dir" in text and "--quick" in text and "--growth-gb" in text


def test_cli_finds_bench_dir_and_passes_arguments_through() -> None:
    assert default_bench_dir() == BENCH
    assert split_bench_dir(["--quick", "--bench-dir", "/x", "--reps", "2"]) == (
        Path("/x"),
        ["--quick", "--reps", "2"],
    )
    assert split_bench_dir(["--bench-dir=/y"]) == (Path("/y"), [])


def test_cli_without_bench_dir_says_where_to_look(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--bench-dir", str(tmp_path), "--quick"]) == 2
    assert "--bench-dir" in capfd.readouterr().err
