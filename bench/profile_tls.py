"""Where the time of logbroker's TLS goes: produce at batch 50 and consume, as bench/run.py's
rows, over one security protocol, with the broker and the client each under cProfile.

    .venv/bin/python bench/profile_tls.py --protocol SASL_SSL [--messages 300000] [--top 25]
    .venv/bin/python bench/profile_tls.py --protocol SSL --cpu-only  # no cProfile: CPU seconds
    .venv/bin/python bench/profile_tls.py --protocol SSL --cpu-only --perf  # and by library
    .venv/bin/python bench/profile_tls.py --protocol SSL --cpu-only --syscalls  # and counts

Starts bench/systems/logbroker.py's Server (ZooKeeper, the broker with its SSL listener, the
SASL broker) with both brokers under cProfile, runs the client's `produce` (batch 50,
200-byte messages) and `consume` (fetches of ~205 KiB) in this process under cProfile, stops
the brokers (SIGTERM: the profile is written at exit), and prints, for the broker (the one
the protocol connects to) and the client, the functions with the most own time, and the
rates. cProfile slows Python code more than OpenSSL's C, so the shares are what to read,
not the rates. docs/performance.md ("TLS and SASL_SSL") has a run of it.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import systems

# Runs the broker's command line (the launcher's argv after the output directory) under
# cProfile, and writes its stats to <dir>/<pid>.pstats when the broker exits (SIGTERM).
_PROFILED = (
    "import cProfile, os, sys\n"
    "out, argv = sys.argv[1], sys.argv[5:]\n"  # argv[2:5]: python -m logbroker.cli
    "from logbroker.cli import main\n"
    "p = cProfile.Profile()\n"
    "try:\n"
    "    rc = p.runcall(main, argv)\n"
    "finally:\n"
    "    p.dump_stats(os.path.join(out, f'{os.getpid()}.pstats'))\n"
    "sys.exit(rc)\n"
)


# What --syscalls counts (software events and a tracepoint: they work in a VM without
# hardware counters, and the system calls do not depend on the load)
_COUNTED = "raw_syscalls:sys_enter,context-switches"


def top(stats: pstats.Stats, n: int) -> str:
    out = io.StringIO()
    stats.stream = out  # type: ignore[attr-defined]
    stats.sort_stats("tottime").print_stats(n)
    return out.getvalue()


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc (clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--protocol", choices=("PLAINTEXT", "SSL", "SASL_SSL"), default="SASL_SSL")
    p.add_argument("--messages", type=int, default=300_000)
    p.add_argument("--top", type=int, default=25)
    p.add_argument(
        "--cpu-only",
        action="store_true",
        help="no cProfile: the rates and the CPU seconds of broker and client per workload",
    )
    p.add_argument(
        "--perf",
        action="store_true",
        help="with --cpu-only: `perf record` samples the broker during each workload, and "
        "its CPU is split by library (perf report --sort dso)",
    )
    p.add_argument(
        "--syscalls",
        action="store_true",
        help="with --cpu-only: `perf stat` counts each side's system calls and context "
        "switches during each workload (counts do not depend on the machine's load, as "
        "CPU seconds do)",
    )
    args = p.parse_args(argv)
    if args.perf and not (args.cpu_only and shutil.which("perf")):
        p.error("--perf needs --cpu-only and perf (linux-perf) installed")
    if args.syscalls and not (args.cpu_only and shutil.which("perf")):
        p.error("--syscalls needs --cpu-only and perf (linux-perf) installed")

    module = systems.load("logbroker")
    work = Path(tempfile.mkdtemp(prefix="logbroker-tls-profile-"))
    profiles = work / "profiles"
    profiles.mkdir()
    prefix = () if args.cpu_only else (sys.executable, "-c", _PROFILED, str(profiles))
    server = module.Server(work, broker_prefix=prefix)
    server.start()
    broker = server.sasl_broker if args.protocol == "SASL_SSL" else server.broker
    broker_pid = broker.pid
    wanted = profiles / f"{broker_pid}.pstats"
    client_profile = cProfile.Profile()
    lines = []
    try:
        client = module.Client({**server.endpoint, "security": args.protocol})
        for name in ("produce_batch50", "consume"):
            b0, c0 = cpu_seconds(broker_pid), time.process_time()
            if not args.cpu_only:
                client_profile.enable()
            sampler = None
            if args.perf:
                sampler = subprocess.Popen(
                    ["perf", "record", "-F", "999", "-p", str(broker_pid),
                     "-o", str(work / f"{name}.perf")],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
                time.sleep(0.5)  # attached before the workload starts
            counters = []
            if args.syscalls:
                for side, pid in (("broker", broker_pid), ("client", os.getpid())):
                    counters.append((side, subprocess.Popen(
                        ["perf", "stat", "-x", ",", "-e", _COUNTED, "-p", str(pid)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                    )))  # fmt: skip
                time.sleep(0.5)
            if name == "produce_batch50":
                r = client.produce("b50", args.messages, 200, 50, lambda: None)
            else:
                r = client.consume("b50", args.messages // 50 * 50, 1000 * 210, lambda: None)
            client_profile.disable()
            broker_cpu, client_cpu = cpu_seconds(broker_pid) - b0, time.process_time() - c0
            if sampler is not None:
                sampler.send_signal(signal.SIGINT)  # perf writes its file on SIGINT
                sampler.wait(30)
            lines.append(
                f"{name}: {r['messages'] / r['seconds']:,.0f} msgs/s in {r['seconds']:.2f} s; "
                f"CPU s the broker {broker_cpu:.2f}, the client {client_cpu:.2f}"
                + ("" if args.cpu_only else " (under cProfile)")
            )
            for side, counter in counters:
                counter.send_signal(signal.SIGINT)  # perf stat prints its counts on SIGINT
                _out, err = counter.communicate(timeout=30)
                counts = {
                    f[2]: f[0] for f in (x.split(",") for x in err.splitlines()) if len(f) > 2
                }
                lines.append(
                    f"  {side}: {counts.get('raw_syscalls:sys_enter', '?')} system calls, "
                    f"{counts.get('context-switches', '?')} context switches"
                )
        client.close()
    finally:
        server.stop()
    print(f"{args.protocol}, {args.messages:,} messages of 200 bytes")
    print("\n".join(lines))
    for name in ("produce_batch50", "consume") if args.perf else ():
        report = subprocess.run(
            ["perf", "report", "-i", str(work / f"{name}.perf"), "--sort", "dso", "--stdio"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        shares = [x for x in report.stdout.splitlines() if x.strip() and not x.startswith("#")]
        print(f"\n== the broker's CPU during {name}, by library (perf) ==")
        print("\n".join(shares[:8]))
    if not args.cpu_only:
        deadline = time.monotonic() + 30
        while not wanted.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        print(f"\n== the broker ({args.protocol}), own time ==")
        print(top(pstats.Stats(str(wanted)), args.top))
        print(f"\n== the client ({args.protocol}), own time ==")
        print(top(pstats.Stats(client_profile), args.top))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
