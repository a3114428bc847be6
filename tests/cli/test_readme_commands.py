"""README.md's commands as a newcomer runs them: in a fresh clone, after `make setup` and
`. .venv/bin/activate`.

Every fenced block names its language (sh, python or text), so no shell block is missed.
Each shell command is checked first: its program, script and subcommand exist, the flags it
names are its own (`logbroker` commands are parsed by the command's own parser; scripts and
`airflow` by their --help), the repository files it names exist, and the configuration files
and events it names load. Then every command is run as written, in bash, after
`. .venv/bin/activate`, with the virtualenv off PATH before it, except those skipped for
one of REASONS, said in one word (listed by `pytest -rs`, never silent). A command that
needs the local servers is in the walk-through (README's "Using it", "Events and the schema
registry", "The hourly load into the warehouse"), which test_readme_walkthrough.py runs in
order against the servers it starts: anywhere else it would run here, with nothing to talk to,
and fail.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support.readme import WALKTHROUGH, Command, fenced_blocks, section, shell_commands

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
VENV_BIN = REPO / ".venv" / "bin"
ACTIVATE = ".venv/bin/activate"  # what README tells a newcomer to source first
LANGUAGES = {"sh", "python", "text"}

# Why a command is not run here, in one word each.
REASONS = {
    "walkthrough": "run in order by test_readme_walkthrough.py, against the servers it starts",
    "recursive": "runs this suite (make test)",
    "minutes": "a run of minutes, tested on its own (make demo, up, lint, bench; the long "
    "fuzz and state-machine runs)",
    "make-up": "needs, or stops, `make up`'s stack (its Airflow, settings in var/up/airflow/env.sh)",
    "setup": "no .venv: `make setup` has not run",
}
# Flags of a command that talks to servers: only the walk-through starts them.
SERVER_FLAGS = ("--zookeeper", "--broker", "--broker-list", "--consumer.config", "--warehouse")
RECURSIVE_TARGETS = {"test", "test-pure"}
MAKE_UP_TARGETS = {"down"}
LONG_RUNS = ("bench.fuzz_broker", "tests/storage/test_log_state_machine.py")
# Options of spark-submit itself that take a value (before the application's file).
SPARK_SUBMIT_VALUES = {"--master", "--deploy-mode", "--conf", "--py-files", "--name", "--jars"}


def program(argv: list[str]) -> str:
    return argv[0] if argv[0] in (".", "source") else Path(argv[0]).name


README_TEXT = README.read_text(encoding="utf-8")
README_COMMANDS = [
    command
    for language, body, first in fenced_blocks(README_TEXT)
    if language == "sh"
    for command in shell_commands(body, first)
]
WALKTHROUGH_LINES = [
    range(first, first + len(body.splitlines()))
    for body, first in (section(README_TEXT, title) for title in WALKTHROUGH)
]


# -- what a command needs ----------------------------------------------------------------


def why_not_run(command: Command) -> str | None:
    """The word of REASONS that says why this command is not run here, or None: it runs."""
    if any(command.line in lines for lines in WALKTHROUGH_LINES):
        return "walkthrough"
    for argv in command.stages:
        name = program(argv)
        if name == "make":
            targets = {a for a in argv[1:] if "=" not in a}
            if targets & RECURSIVE_TARGETS:
                return "recursive"
            return "make-up" if targets & MAKE_UP_TARGETS else "minutes"
        if argv == [".", ACTIVATE]:
            continue
        if name in (".", "source", "airflow"):
            return "make-up"
        if any(script in argv for script in LONG_RUNS):
            return "minutes"
    return None


# -- static checks: what a command names exists ---------------------------------------------


def _kcat_problems(args: list[str]) -> list[str]:
    """kcat is Debian's (scripts/install-system-deps.sh installs it): there, and every flag
    one of those its -h lists."""
    if shutil.which("kcat") is None:
        return ["kcat: not installed (scripts/install-system-deps.sh installs it)"]
    shown = subprocess.run(["kcat", "-h"], capture_output=True, text=True, timeout=30)
    usage = shown.stdout + shown.stderr
    return [
        f"kcat: {flag} is not one of its options (kcat -h)"
        for flag in args
        if re.fullmatch(r"-[A-Za-z]", flag)
        and not re.search(rf"(?m)^\s+(?:-[A-Z] \| )*{re.escape(flag)}\b", usage)
    ]


def problems(command: Command) -> list[str]:
    """Everything in `command` that does not exist or does not load, one line each."""
    assigned = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\$\((.+)\)", command.text)
    if assigned:  # HOUR=$(date ...): the command it runs
        return problems(Command(assigned.group(1), command.line))
    found: list[str] = []
    stages = command.stages
    for i, argv in enumerate(stages):
        name = program(argv)
        if name == "make":
            found += _make_problems(argv)
        elif argv == [".", ACTIVATE]:
            pass
        elif name in (".", "source"):
            if not argv[1].startswith("var/up/") or not (REPO / "scripts" / "up.py").is_file():
                found.append(
                    f"{argv[1]}: only `make up` (scripts/up.py) writes what README sources"
                )
        elif name == "logbroker":
            found += _logbroker_problems(argv[1:])
            if i > 0 and stages[i - 1][0] == "echo":
                found += _echoed_event_problems(stages[i - 1][1:], argv[1:])
        elif name in ("python", "python3", "spark-submit"):
            found += _script_problems(argv)
        elif name == "airflow":
            found += _airflow_problems(argv[1:])
        elif name == "kcat":
            found += _kcat_problems(argv[1:])
        elif name in ("seq", "echo", "tail", "date", "printf", "sort"):
            pass
        else:
            found.append(f"{argv[0]}: a program this test does not know; teach it the command")
    return found


def _make_problems(argv: list[str]) -> list[str]:
    found = []
    for target in argv[1:]:
        dry = subprocess.run(["make", "-n", target], cwd=REPO, capture_output=True, text=True)
        if dry.returncode:
            found.append(f"make {target}: {dry.stderr.strip()}")
    return found


def _logbroker_problems(args: list[str]) -> list[str]:
    """Parse with the command's own parser (subcommands, flags, values, --file), then load
    the configuration and schema files it names, as the command would before connecting."""
    from logbroker.cli import build_parser

    err = io.StringIO()
    with (
        contextlib.chdir(REPO),
        contextlib.redirect_stderr(err),
        contextlib.redirect_stdout(io.StringIO()),
    ):
        try:
            parsed = build_parser().parse_args(args)
        except SystemExit as stop:
            if stop.code == 0:  # --help, --version
                return []
            return [f"logbroker {' '.join(args[:2])}: {err.getvalue().strip()}"]
    opened = getattr(parsed, "file", None)
    if isinstance(opened, io.IOBase):
        opened.close()
    with contextlib.chdir(REPO):
        return _loaded_files_problems(parsed)


def _loaded_files_problems(parsed: argparse.Namespace) -> list[str]:
    from logbroker.config import load_config
    from logbroker.mirror import mirror_filter
    from logbroker.mirror.settings import (
        TargetSettings,
        consumer_properties,
        load_properties,
    )
    from logbroker.serde import load_schema_file

    try:
        if parsed.command == "broker":
            load_config(parsed.config, dict(parsed.override))
        elif parsed.command == "mirror":
            consumer_properties(load_properties(parsed.consumer_config, "--consumer.config"))
            TargetSettings.from_properties(
                load_properties(parsed.producer_config, "--producer.config")
            )
            mirror_filter(parsed.whitelist, parsed.blacklist)
        elif parsed.command == "schemas" and parsed.file:
            load_schema_file(parsed.file)
    except (OSError, ValueError, LookupError) as exc:
        return [f"logbroker {parsed.command}: {exc}"]
    return []


def _echoed_event_problems(echoed: list[str], args: list[str]) -> list[str]:
    """The JSON lines README pipes into an Avro produce fit the topic's schema file."""
    from logbroker.protocol.errors import LogbrokerError
    from logbroker.serde import load_schema_file
    from logbroker.serde.codec import EventWriter

    if "--format" not in args or args[args.index("--format") + 1] != "avro":
        return []
    topic = args[args.index("--topic") + 1]
    schema = REPO / "include" / "schemas" / f"{topic}.avsc"
    if not schema.is_file():
        return [f"produce --topic {topic}: no schema file {schema.relative_to(REPO)}"]
    writer = EventWriter(1, load_schema_file(schema), topic, validate=True)
    header = {"timestamp": 0, "server": "readme", "producer_id": "readme", "seq": 0}
    try:
        for line in " ".join(echoed).splitlines():
            writer.encode({"header": header, **json.loads(line)}, "the README's event")
    except (ValueError, LogbrokerError) as exc:  # EncodeError names the field
        return [f"produce --topic {topic}: {exc}"]
    return []


def _script_problems(argv: list[str]) -> list[str]:
    """A script's file exists; the flags after it are in its --help (or its subcommand's)."""
    rest = argv[1:]
    if rest[:1] in (["--version"], ["--help"]):
        return []
    if program(argv) == "spark-submit":
        while rest and rest[0].startswith("--"):
            rest = rest[2:] if rest[0] in SPARK_SUBMIT_VALUES else rest[1:]
    elif rest[:1] == ["-m"]:
        if rest[1] == "pytest":
            return [f"{path}: no such file" for path in rest[2:] if not (REPO / path).exists()]
        return _help_problems([sys.executable, "-m", rest[1]], rest[2:], f"-m {rest[1]}")
    if not rest or not (REPO / rest[0]).is_file():
        return [f"{' '.join(argv[:2])}...: no script {rest[0] if rest else '(none)'}"]
    script, args = rest[0], rest[1:]
    subcommands = []
    while args and not args[0].startswith("-"):
        subcommands.append(args.pop(0))
    return _help_problems([sys.executable, script, *subcommands], args, script)


def _airflow_problems(args: list[str]) -> list[str]:
    subcommands = []
    while args and not args[0].startswith("-"):
        subcommands.append(args.pop(0))
    found = _help_problems([str(VENV_BIN / "airflow"), *subcommands], args, "airflow")
    if "--dag-id" in args:
        dag_id = args[args.index("--dag-id") + 1]
        if not any(f'"{dag_id}"' in p.read_text() for p in (REPO / "dags").glob("*.py")):
            found.append(f"airflow --dag-id {dag_id}: no DAG of that id in dags/")
    return found


def _help_problems(prefix: list[str], args: list[str], what: str) -> list[str]:
    with tempfile.TemporaryDirectory() as home:  # airflow writes into its home
        shown = subprocess.run(
            [*prefix, "--help"],
            cwd=REPO,
            capture_output=True,
            text=True,
            env={**os.environ, "AIRFLOW_HOME": home},
            timeout=300,
        )
    if shown.returncode or "usage:" not in shown.stdout.lower():
        return [f"{what} --help failed ({shown.returncode}): {shown.stderr.strip()[-300:]}"]
    flags = [arg.split("=", 1)[0] for arg in args if arg.startswith("--")]
    return [
        f"{what}: {flag} is not an option of `{' '.join(prefix[1:] or prefix)}`"
        for flag in flags
        if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w.-])", shown.stdout)
    ]


# -- the tests ------------------------------------------------------------------------------


def test_every_fenced_block_names_its_language():
    blocks = fenced_blocks(README.read_text(encoding="utf-8"))
    unnamed = [(first - 1, language) for language, _, first in blocks if language not in LANGUAGES]
    assert not unnamed, f"README.md blocks without sh, python or text (line, language): {unnamed}"
    assert len(README_COMMANDS) >= 20  # the parsing found the commands


@pytest.mark.parametrize("command", README_COMMANDS, ids=lambda c: f"L{c.line} {c.text[:60]}")
def test_readme_command(command: Command, tmp_path: Path) -> None:
    found = problems(command)
    assert not found, f"README.md line {command.line}: {command.text}\n" + "\n".join(found)
    reason = why_not_run(command)
    if reason is not None:
        pytest.skip(f"{reason}: {command.text[:72]}")
    if not (REPO / ACTIVATE).is_file():
        pytest.skip(
            "setup: no .venv at the repository root (README's commands assume `make setup`)"
        )
    path = [p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != VENV_BIN]
    env = {**os.environ, "PATH": os.pathsep.join(path), "HOME": str(tmp_path)}
    env.pop("VIRTUAL_ENV", None)
    script = command.text
    if command.stages == [[".", ACTIVATE]]:  # then these are the virtualenv's
        script += " && command -v logbroker spark-submit python"
    ran = subprocess.run(
        ["bash", "-c", f". {ACTIVATE} && {script}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, f"{command.text}: exit {ran.returncode}\n{output[-2000:]}"
    argv = command.stages[-1]
    if argv == [".", ACTIVATE]:
        found = [Path(line).parent for line in ran.stdout.splitlines()]
        assert found == [VENV_BIN] * 3, ran.stdout
    elif "--help" in argv:
        usage = re.search(r"usage: (.*)", ran.stdout, re.IGNORECASE)
        assert usage, ran.stdout
        named = next(a for a in reversed(argv[1:]) if not a.startswith("-"))
        assert Path(named).name in usage.group(1), (named, usage.group(0))
    elif "--version" in argv:
        assert re.search(r"\d+\.\d+\.\d+", output), output


def test_a_skipped_command_says_why_in_one_word_and_none_needs_only_local_servers():
    for command in README_COMMANDS:
        reason = why_not_run(command)
        assert reason is None or reason in REASONS, (command.line, reason)
        if reason != "walkthrough":
            named = [f for f in SERVER_FLAGS for a in command.stages for t in a if t == f]
            assert not named, (
                f"README.md line {command.line} names {named[0]} outside the walk-through "
                f"({', '.join(WALKTHROUGH)}), the only sections whose servers a test starts: "
                f"{command.text[:72]}"
            )
    assert all(" " not in word for word in REASONS)


def test_the_checks_catch_what_does_not_exist():
    """A moved job, a renamed subcommand or flag, a missing file or target: each is caught."""
    missing = {
        "spark-submit spark_apps/hourly_load.py --help": "no script spark_apps/hourly_load.py",
        "python spark_apps/jobs/hourly_load.py verify --topics t --no-such-flag": "--no-such-flag",
        "logbroker topic --help": "invalid choice: 'topic'",
        "logbroker topics --zookeeper z create t --partitons 4": "required: --partitions",
        "logbroker mirror --consumer.config live-consumer.properties "
        "--producer.config include/config/analysis-producer.properties --whitelist x": (
            "live-consumer.properties: cannot read it"
        ),
        "logbroker broker --config include/config/server.properties --override port=-5": "port",
        "make no-such-target": "No rule to make target",
        "LONG=1 python -m pytest tests/storage/test_no_such.py": "no such file",
        'echo \'{"member_id": "me"}\' | logbroker produce --zookeeper z --topic page_views '
        "--format avro --schema-registry r": "member_id",
    }
    for text, expected in missing.items():
        found = "\n".join(problems(Command(text, 0)))
        assert expected in found, (text, found)


def test_the_python_example_imports_what_exists():
    from importlib import import_module

    (code,) = [b for lang, b, _ in fenced_blocks(README.read_text()) if lang == "python"]
    compile(code, "README.md", "exec")
    for module, names in re.findall(r"^from (\S+) import (.+)$", code, re.MULTILINE):
        imported = import_module(module)
        for name in names.split(","):
            assert hasattr(imported, name.strip()), (module, name)


def test_the_layout_and_the_paths_in_the_prose_exist():
    text = README.read_text(encoding="utf-8")
    (layout,) = [b for lang, b, _ in fenced_blocks(text) if lang == "text" and "plugins/" in b]
    parent = REPO
    for line in layout.splitlines():
        if line.startswith(" " * 8):  # the description of the line above goes on
            continue
        names = re.match(r"(\s*)((?:[\w.-]+/?(?:, )?)+)\s", line + " ")
        assert names, line
        top = not names.group(1)
        for name in names.group(2).split(", "):
            path = (REPO if top else parent) / name
            assert path.exists(), f"README.md's Layout names {path.relative_to(REPO)}"
            if top:
                parent = path
    # var/ holds what the commands make (var/demo/, var/up/, ...): a checkout that ran one
    # of them has var/ without the others' paths, so they are not checked here
    tops = {p.name for p in REPO.iterdir()} - {"var"}
    for quoted in re.findall(r"`([^`\n]+)`", text):
        for token in quoted.split():
            token = token.strip("(),;:")
            if "/" in token and token.split("/")[0] in tops and not re.search(r"[<*{]", token):
                assert (REPO / token).exists(), f"README.md names {token}"
