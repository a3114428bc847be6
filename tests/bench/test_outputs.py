"""bench/outputs.py: what bench/run.py and bench/replication.py share after measuring.

A run's bookkeeping (its id, directories, run.json's fields, the exit status and the work
directory's removal), the files every run writes, the profile's summary and the tables'
pieces, on a temporary directory: no broker, no benchmark. The plots need matplotlib
(bench/requirements.txt); their pieces are drawn by the quick runs (test_bench_quick.py,
test_bench_scripts.py) where it is installed.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import json
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def outputs() -> Iterator[Any]:
    """bench/outputs.py as the scripts import it: `common` is its neighbour there."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "common", _load("common"))
        yield _load("outputs")


def _args(**given: Any) -> argparse.Namespace:
    args = {"quick": True, "workdir": None, "output_dir": None, "keep": False}
    return argparse.Namespace(**{**args, "profile": False, "no_plots": True, **given})


def _markdown(records: Any, info: dict[str, Any]) -> str:
    return f"# {len(records)} records of {info['run_id']}\n"


def _finish(run: Any, info: dict[str, Any], errors: list[str], plots: Any = None) -> int:
    records = [{"workload": "w", "median": 1.0, "min": 1.0, "max": 1.0, "run_id": run.id}]
    status: int = run.finish(
        records, info, errors, markdown=_markdown, plots=plots, table_text="THE TABLE",
        no_plots_hint="install matplotlib",
    )  # fmt: skip
    return status


def test_a_quick_run_writes_its_files_and_removes_only_its_own_work_directory(
    outputs: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where --quick's directories go
    args = _args()
    run = outputs.Run(
        "bench/NAME.py", args, ["--quick"], results=tmp_path / "unused", prefix="logbroker-x"
    )
    assert args.workdir.parent == tmp_path and args.workdir.name.startswith("logbroker-x-")
    assert args.output_dir.name.startswith("logbroker-x-results-") and args.output_dir.is_dir()
    assert not (tmp_path / "unused").exists() and run.profile_dir is None
    assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{6}", run.id)

    info = run.header(parameters={"n": 5})
    assert list(info)[:6] == ["run_id", "command", "started", "quick", "machine", "parameters"]
    assert info["command"] == "python bench/NAME.py --quick" and info["run_id"] == run.id
    run.ended(info)
    assert info["duration_s"] >= 0 and len(info["machine"]["loadavg_end"]) == 3
    info["errors"] = []

    assert _finish(run, info, []) == 0
    out = capsys.readouterr().out
    assert "THE TABLE" in out and f"wrote {args.output_dir}/summary.json" in out
    assert json.loads((args.output_dir / "run.json").read_text()) == info
    assert json.loads((args.output_dir / "summary.json").read_text())[0]["run_id"] == run.id
    assert (args.output_dir / "summary.md").read_text() == f"# 1 records of {run.id}\n"
    assert not args.workdir.exists()  # made by the run: removed
    assert args.output_dir.exists()


def test_errors_make_the_exit_status_1_and_a_given_work_directory_stays(
    outputs: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _args(quick=False, workdir=tmp_path / "work", output_dir=tmp_path / "out")
    run = outputs.Run("bench/NAME.py", args, [], results=tmp_path / "results", prefix="x")
    info = run.header()
    run.ended(info)
    info["errors"] = ["rf1 rep 1: a broker did not start\nTraceback ..."]
    assert _finish(run, info, info["errors"]) == 1
    assert "1 errors:\n  rf1 rep 1: a broker did not start" in capsys.readouterr().out
    assert (tmp_path / "work").is_dir()  # the caller's: kept
    assert outputs.errors_section(info) == [
        "## Errors",
        "",
        "- rf1 rep 1: a broker did not start",
        "",
    ]


def test_plots_that_cannot_be_drawn_leave_the_other_files_and_say_why(
    outputs: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def plots(records: Any, info: dict[str, Any], outdir: Path) -> None:
        raise ImportError("No module named 'matplotlib'")

    args = _args(quick=False, output_dir=tmp_path / "out", workdir=tmp_path / "w", no_plots=False)
    run = outputs.Run("bench/NAME.py", args, [], results=tmp_path, prefix="x")
    info = run.header()
    run.ended(info)
    assert _finish(run, info, [], plots) == 0
    assert "no plots: No module named 'matplotlib' (install matplotlib)" in capsys.readouterr().out
    assert {p.name for p in (tmp_path / "out").iterdir()} == {
        "summary.json",
        "run.json",
        "summary.md",
    }


def test_profile_summary_ranks_the_clients_functions_and_the_brokers_frames(
    outputs: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _args(quick=False, output_dir=tmp_path / "out", workdir=tmp_path / "w", profile=True)
    run = outputs.Run("bench/NAME.py", args, [], results=tmp_path, prefix="x")
    assert run.profile_dir == tmp_path / "out" / "profile" and run.profile_dir.is_dir()
    profiler = cProfile.Profile()
    profiler.runcall(sorted, range(1000))
    profiler.dump_stats(run.profile_dir / "client-consume.pstats")
    (run.profile_dir / "broker-produce-b0.txt").write_text(
        "main;serve;append 30\nmain;serve;read 10\nmain;idle 60\nnot a sample line\n"
    )
    info = run.header()
    run.ended(info)
    _finish(run, info, [])
    assert f"profile: {run.profile_dir / 'summary.md'}" in capsys.readouterr().out
    summary = (run.profile_dir / "summary.md").read_text()
    assert "## client consume (cProfile," in summary and "builtins.sorted" in summary
    assert "## broker during produce-b0 (py-spy, 100 samples, idle included)" in summary
    assert "| 60.0 | 60.0 | `idle` |" in summary
    assert "| 30.0 | 30.0 | `append` |" in summary
    assert "| 10.0 | 10.0 | `read` |" in summary


def test_the_tables_pieces(outputs: Any) -> None:
    assert outputs.spread([3.0, 1.0, 2.123456]) == {"median": 2.12, "min": 1.0, "max": 3.0}
    assert outputs.spread([0.123456, 1234.5]) == {"median": 617.31, "min": 0.1235, "max": 1234}
    assert [outputs.fmt(x) for x in (12345.6, 12.34, 1.234, 0.1234)] == [
        "12,346",
        "12.3",
        "1.23",
        "0.123",
    ]
    assert outputs.cell(None) == "–"
    assert outputs.cell({"median": 2, "min": 2, "max": 2}) == "2.00"
    assert outputs.cell({"median": 2, "min": 1, "max": 3000}) == "2.00 (1.00–3,000)"
    assert outputs.md_table([["a", "b"], ["1", "2"]]) == "| a | b |\n|---|---|\n| 1 | 2 |"
    assert outputs.text_table([["name", "n"], ["x", "100"]], left=1) == "name    n\nx     100"
    info = {"run_id": "R", "started": "S", "finished": "F", "duration_s": 90, "command": "c "}
    assert outputs.run_line(info) == "Run `R`, S to F (1.5 min), command `c`."
    assert outputs.run_line({**info, "quick": True}).endswith(
        "(**quick mode: tiny counts, not a measurement**)."
    )


def test_the_scripts_leave_their_ending_and_plot_pieces_to_outputs() -> None:
    """run.py, its report.py and replication.py write no file of the ending and save no
    figure themselves: a second copy of the ending would drift from the first."""
    for name in ("run.py", "report.py", "replication.py"):
        text = (BENCH / name).read_text()
        for own in (".savefig(", "json.dumps(records", "token_hex(", 'mkdtemp(prefix="logbroker'):
            assert own not in text, f"{name} has its own {own}"
        assert "from outputs import" in text, name
