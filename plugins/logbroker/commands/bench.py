"""`logbroker bench`: run the broker benchmark (bench/run.py of the source tree).

The benchmark is a harness beside the library, not part of it: it starts RabbitMQ, ActiveMQ,
Redis and a raw-TCP baseline next to a broker and needs their Python clients and matplotlib
(bench/requirements.txt), none of which the library depends on. So this command imports
nothing from bench/: it runs `python bench/run.py ARGS` as a child process with this
interpreter and returns its exit code. bench/ is found next to the package in a source
checkout (an editable install: `make setup`), or given with --bench-dir.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HELP = """\
usage: logbroker bench [--bench-dir DIR] [bench/run.py options]

Run the broker benchmark: logbroker against RabbitMQ, ActiveMQ, Redis Streams and raw
loopback TCP, every system in one run (the paper's §5 and the 2014 benchmark post).
This runs `python bench/run.py` from the source tree with the remaining arguments; the
library never imports bench/. bench/ is looked for next to the installed package (a
source checkout installed with `make setup`); elsewhere, pass --bench-dir DIR.

  --bench-dir DIR   the bench/ directory of a logbroker source checkout

Install the peers first (Debian packages and pinned Python clients), or use `make bench`,
which does both:  bash bench/install-peers.sh

examples:
  logbroker bench --quick                       # seconds: logbroker, tcp, installed peers
  logbroker bench                               # the full run, ~30 minutes
  logbroker bench --systems logbroker,redis --reps 5 --growth-gb 1
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    # Every argument goes to bench/run.py as it is: the sub-parser knows no option of its
    # own (its prefix is not "-"), and --bench-dir is taken out of the list by hand.
    p = sub.add_parser(
        "bench",
        help="run the broker benchmark against RabbitMQ, ActiveMQ, Redis (bench/run.py)",
        add_help=False,
        prefix_chars="+",
    )
    p.add_argument("bench_args", nargs="*")
    p.set_defaults(run=run, log_level="WARNING", log_format="text")


def default_bench_dir() -> Path:
    """<checkout>/bench for a package at <checkout>/plugins/logbroker."""
    return Path(__file__).resolve().parents[3] / "bench"


def split_bench_dir(argv: list[str]) -> tuple[Path | None, list[str]]:
    rest: list[str] = []
    bench_dir: Path | None = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--bench-dir" and i + 1 < len(argv):
            bench_dir = Path(argv[i + 1])
            i += 2
            continue
        if arg.startswith("--bench-dir="):
            bench_dir = Path(arg.split("=", 1)[1])
        else:
            rest.append(arg)
        i += 1
    return bench_dir, rest


def run(args: argparse.Namespace) -> int:
    bench_dir, rest = split_bench_dir(list(args.bench_args))
    wants_help = any(a in ("-h", "--help") for a in rest)
    bench_dir = bench_dir or default_bench_dir()
    script = bench_dir / "run.py"
    if wants_help:
        print(HELP)
    if not script.is_file():
        print(
            f"logbroker bench: no benchmark at {script}: it lives in the source checkout "
            "(bench/run.py); pass --bench-dir DIR",
            file=sys.stderr,
        )
        return 0 if wants_help else 2
    if wants_help:
        print(f"bench/run.py found at {script}; its options:\n", flush=True)
    env = dict(os.environ, BENCH_PROG="logbroker bench")
    return subprocess.call([sys.executable, str(script), *rest], env=env)
