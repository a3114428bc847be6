"""What a benchmark run leaves behind, and how: shared by bench/run.py and bench/replication.py.

    Run                 one invocation's bookkeeping: its id, its work and output directories
                        (--quick: new ones under $TMPDIR), run.json's head (the command, the
                        machine) and tail (when it finished), the profile directory of
                        --profile; then `finish`: the files below, the errors, the exit status
    write_run           the files every run writes: summary.json (the records), run.json (how
                        it ran), summary.md, the PNGs; the text table on stdout
    spread              a record's median, min and max of the repetitions' values, rounded
    start_py_spy,       --profile's sampling of a broker process, and where the time went:
    stop_py_spy,        profile/summary.md from the clients' cProfile files (client-*.pstats)
    profile_summary     and the brokers' py-spy samples (broker-*.txt)
    fmt, cell,          summary.md's pieces: a number as the tables show it, a record's cell
    md_table, run_line, "median (min–max)", a Markdown table, the run's first line, the errors'
    errors_section      section; text_table: the table printed at the end
    pyplot, save,       the plots' pieces: matplotlib without a display, a figure saved with
    value_label,        the run's stamp, a bar's value over it, one latency distribution, the
    plot_cdf, cdf_axes  latency distributions' axes
    COLORS              each system's colour in every plot

Each script keeps what is its own: its workloads, its tables and goals, its figures.
"""

from __future__ import annotations

import json
import os
import platform
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from common import BENCH_DIR, median

COLORS = {
    "logbroker": "#1f77b4",
    "rabbitmq": "#ff7f0e",
    "activemq": "#2ca02c",
    "redis": "#d62728",
    "redis_c": "#e377c2",
    "tcp": "#7f7f7f",
}

# -- a run's bookkeeping --------------------------------------------------------------------


class Run:
    """One invocation of a benchmark script: `args` is its parsed command line, with `quick`,
    `workdir`, `output_dir`, `keep` and `profile`; the directories left None are made here
    (the output under `results`, or for --quick a new directory under $TMPDIR, as the work
    directory always is), and removed at the end when made here and not --keep."""

    def __init__(
        self, script: str, args: Any, argv: list[str] | None, *, results: Path, prefix: str
    ) -> None:
        self.script = script  # "bench/run.py": run.json's command
        self.args = args
        self.argv = argv if argv is not None else sys.argv[1:]
        self.own_workdir = args.workdir is None
        if self.own_workdir:
            args.workdir = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
        args.workdir.mkdir(parents=True, exist_ok=True)
        if args.output_dir is None:
            args.output_dir = (
                Path(tempfile.mkdtemp(prefix=f"{prefix}-results-")) if args.quick else results
            )
        args.output_dir.mkdir(parents=True, exist_ok=True)
        self.started = datetime.now(UTC)
        self.id = self.started.strftime("%Y%m%dT%H%M%SZ-") + secrets.token_hex(3)
        self.profile_dir: Path | None = None
        if args.profile:
            self.profile_dir = args.output_dir / "profile"
            self.profile_dir.mkdir(parents=True, exist_ok=True)
        self.t0 = time.monotonic()

    def header(self, **fields: Any) -> dict[str, Any]:
        """run.json's first fields, then the script's `fields`; the run's clock starts here
        (after the machine's facts, which take a moment)."""
        info = {
            "run_id": self.id,
            "command": f"python {self.script} " + " ".join(self.argv),
            "started": self.started.isoformat(timespec="seconds"),
            "quick": self.args.quick,
            "machine": machine_info(),
            **fields,
        }
        self.t0 = time.monotonic()
        return info

    def ended(self, info: dict[str, Any]) -> None:
        """When the measuring ended, and the load average then."""
        info["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
        info["duration_s"] = round(time.monotonic() - self.t0)
        info["machine"]["loadavg_end"] = list(os.getloadavg())

    def finish(
        self,
        records: Sequence[dict[str, Any]],
        info: dict[str, Any],
        errors: list[str],
        *,
        markdown: Callable[[Any, dict[str, Any]], str],
        plots: Callable[[Any, dict[str, Any], Path], None],
        table_text: str,
        no_plots_hint: str,
    ) -> int:
        """Everything after the measuring: the profile's summary, the run's files (no PNGs
        with --no-plots), the errors, the work directory; the exit status (1 on any error)."""
        if self.profile_dir is not None:
            (self.profile_dir / "summary.md").write_text(profile_summary(self.profile_dir))
            print(f"profile: {self.profile_dir / 'summary.md'}")
        write_run(
            self.args.output_dir, records, info, markdown=markdown, table_text=table_text,
            plots=None if self.args.no_plots else plots, no_plots_hint=no_plots_hint,
        )  # fmt: skip
        if errors:
            print(f"{len(errors)} errors:\n  " + "\n  ".join(errors), flush=True)
        if self.own_workdir and not self.args.keep:
            shutil.rmtree(self.args.workdir, ignore_errors=True)
        return 1 if errors else 0


def machine_info() -> dict[str, Any]:
    """The machine, its load and the checkout's commit, as run.json and summary.md show them."""
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    debian = (
        Path("/etc/debian_version").read_text().strip()
        if Path("/etc/debian_version").exists()
        else "?"
    )
    disk = subprocess.run(["df", "-hT", str(BENCH_DIR)], capture_output=True, text=True).stdout
    git = subprocess.run(
        ["git", "-C", str(BENCH_DIR), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(BENCH_DIR), "status", "--porcelain"], capture_output=True, text=True
    ).stdout.splitlines()
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "ram_gib": round(mem_kb / 2**20, 1),
        "kernel": platform.release(),
        "debian": debian,
        "python": platform.python_version(),
        "filesystem": " ".join(disk.splitlines()[-1].split()[:2]) if disk else "?",
        "loadavg_start": list(os.getloadavg()),
        "git": f"{git}" + (f" + {len(dirty)} uncommitted files" if dirty else ""),
    }


# -- the files ------------------------------------------------------------------------------


def write_run(
    outdir: Path,
    records: Sequence[dict[str, Any]],
    info: dict[str, Any],
    *,
    markdown: Callable[[Any, dict[str, Any]], str],
    plots: Callable[[Any, dict[str, Any], Path], None] | None,
    table_text: str,
    no_plots_hint: str,
) -> None:
    """What every benchmark run leaves in `outdir`: summary.json (the records), run.json (how
    it ran), summary.md and the PNGs (`plots`, None for none), then the table on stdout."""
    (outdir / "summary.json").write_text(json.dumps(records, indent=1) + "\n")
    (outdir / "run.json").write_text(json.dumps(info, indent=1) + "\n")
    (outdir / "summary.md").write_text(markdown(records, info))
    if plots is not None:
        try:
            plots(records, info, outdir)
        except ImportError as exc:
            print(f"no plots: {exc} ({no_plots_hint})")
    print(f"\n{table_text}\n", flush=True)
    print(
        f"wrote {outdir}/summary.json, summary.md, run.json"
        + ("" if plots is None else ", *.png")
        + f" in {info['duration_s']} s",
        flush=True,
    )


def rounded(x: float) -> float:
    """A record's value as summary.json keeps it: whole above 1000, else 2 or 4 decimals."""
    if abs(x) >= 1000:
        return round(x)
    if abs(x) >= 1:
        return round(x, 2)
    return round(x, 4)


def spread(values: Sequence[float]) -> dict[str, float]:
    """A record's median, min and max of the repetitions' `values`."""
    return {
        "median": rounded(median(values)),
        "min": rounded(min(values)),
        "max": rounded(max(values)),
    }


# -- profiles -------------------------------------------------------------------------------


def start_py_spy(pid: int, out: Path, *, threads: bool = False) -> subprocess.Popen[bytes] | None:
    """py-spy sampling `pid` at 250 Hz into `out` (raw stacks) until stop_py_spy; None when
    py-spy is not installed (bench/requirements.txt)."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        return None
    argv = [exe, "record", "--pid", str(pid), "--rate", "250", "--format", "raw"]
    argv += ["--output", str(out), "--nonblocking", *(["--threads"] if threads else [])]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_py_spy(spy: subprocess.Popen[bytes] | None) -> None:
    if spy is not None and spy.poll() is None:
        spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait()


def profile_summary(profile_dir: Path, top: int = 15) -> str:
    """Where the time goes: the clients' cProfile (own time) and the brokers' py-spy
    samples (own and inclusive), per workload."""
    import pstats
    from collections import Counter

    out = ["# Where the time goes (bench/run.py --profile)", ""]
    for stats_file in sorted(profile_dir.glob("client-*.pstats")):
        stats = pstats.Stats(str(stats_file))
        total = stats.total_tt  # type: ignore[attr-defined]
        rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]  # type: ignore[attr-defined]
        out += [
            f"## client {stats_file.stem[7:]} (cProfile, {total:.2f} s)",
            "",
            "| own s | % | calls | function |",
            "|---:|---:|---:|---|",
        ]
        for (file, line, func), (_cc, nc, tt, _ct, _callers) in rows:
            where = f"{Path(file).name}:{line}" if line else file
            out.append(f"| {tt:.3f} | {100 * tt / total:.1f} | {nc:,} | `{func}` ({where}) |")
        out.append("")
    for raw in sorted(profile_dir.glob("broker-*.txt")):
        own: Counter[str] = Counter()
        incl: Counter[str] = Counter()
        samples = 0
        for line in raw.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n = int(count)
            frames = stack.split(";")
            samples += n
            own[frames[-1]] += n
            for frame in set(frames):
                incl[frame] += n
        if not samples:
            continue
        out += [
            f"## broker during {raw.stem[7:]} (py-spy, {samples:,} samples, idle included)",
            "",
            "| own % | inclusive % | frame |",
            "|---:|---:|---|",
        ]
        for frame, n in own.most_common(top):
            out.append(
                f"| {100 * n / samples:.1f} | {100 * incl[frame] / samples:.1f} | `{frame}` |"
            )
        out.append("")
    return "\n".join(out) + "\n"


# -- summary.md and the table ---------------------------------------------------------------


def fmt(x: float) -> str:
    """A number as the tables show it: thousands separated, fewer decimals as it grows."""
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    if abs(x) >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def cell(r: dict[str, Any] | None) -> str:
    """A record's cell: "median (min–max)", the median alone when they agree, "–" for none."""
    if r is None:
        return "–"
    if r["min"] == r["max"]:
        return fmt(r["median"])
    return f"{fmt(r['median'])} ({fmt(r['min'])}–{fmt(r['max'])})"


def md_table(rows: list[list[str]]) -> str:
    head, *body = rows
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines)


def text_table(rows: list[list[str]], left: int) -> str:
    """`rows` in aligned columns: the first `left` to the left, the numbers to the right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(
            c.ljust(wd) if i < left else c.rjust(wd)
            for i, (c, wd) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    )


def run_line(info: dict[str, Any]) -> str:
    """summary.md's first line: the run, when, how long, its command, and a quick run's note."""
    return (
        f"Run `{info['run_id']}`, {info['started']} to {info['finished']} "
        f"({info['duration_s'] / 60:.1f} min), command `{info['command'].strip()}`"
        + (" (**quick mode: tiny counts, not a measurement**)" if info.get("quick") else "")
        + "."
    )


def errors_section(info: dict[str, Any]) -> list[str]:
    """summary.md's errors section (the first line of each), or nothing."""
    if not info.get("errors"):
        return []
    return ["## Errors", "", *(f"- {e.splitlines()[0]}" for e in info["errors"]), ""]


# -- plots ----------------------------------------------------------------------------------


def pyplot() -> Any:
    """matplotlib.pyplot drawing to files (no display); ImportError without bench/requirements.txt."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, outdir: Path, name: str, stamp: str) -> None:
    """`fig` as outdir/<name>.png, the run's `stamp` in its corner."""
    import matplotlib.pyplot as plt

    fig.text(0.01, 0.01, stamp, fontsize=7, color="gray")
    fig.tight_layout()
    fig.savefig(outdir / f"{name}.png", dpi=110)
    plt.close(fig)


def value_label(
    ax: Any, x: float, y: float, text: str, size: float, rise: float, **style: Any
) -> None:
    """`text` just over the point (x, y): a bar's value."""
    ax.annotate(
        text,
        (x, y),
        ha="center",
        va="bottom",
        fontsize=size,
        **style,
        xytext=(0, rise),
        textcoords="offset points",
    )


def plot_cdf(ax: Any, samples: Sequence[float], style: str, label: str, color: Any = None) -> None:
    """One latency distribution: the fraction of messages at or under each latency."""
    ordered = sorted(samples)
    if ordered:
        ys = [(i + 1) / len(ordered) for i in range(len(ordered))]
        ax.plot(ordered, ys, style, label=label, color=color)


def cdf_axes(ax: Any) -> None:
    """The latency distributions' axes (plot_cdf's lines on them), every repetition's samples."""
    ax.set_xscale("log")
    ax.set_xlabel("ms (log)")
    ax.set_ylabel("fraction of messages")
    ax.set_title("Latency distribution (all repetitions)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
