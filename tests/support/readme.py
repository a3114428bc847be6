"""README.md read as the tests of its commands need it: fenced blocks, sections, commands.

    fenced_blocks(text)       (language, body, line of the body's first line) of every block
    section(text, title)      the text under `## title` up to the next `## `, and its first line
    shell_commands(body, first_line)
                              the logical commands of a sh block: continuation lines (`\\` or
                              a trailing `|`) joined, comments dropped; each with the `# → `
                              lines under it, what README says it prints

An expected line is matched against one line of the output: `...` stands for anything,
a run of spaces for any whitespace (README aligns what the programs separate with tabs).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

EXPECTED = "# → "  # a comment line under a command: what it prints
# The sections of README's walk-through, in its order: from a cluster to an audited hour.
WALKTHROUGH = ("Using it", "Events and the schema registry", "The hourly load into the warehouse")


@dataclass(frozen=True)
class Command:
    """One logical line of a shell block: continuations joined, comments dropped."""

    text: str
    line: int  # in README.md
    expected: tuple[str, ...] = ()

    @property
    def stages(self) -> list[list[str]]:
        """The argv of each program in its pipeline, without env assignments or a final &."""
        stages: list[list[str]] = [[]]
        for token in shlex.split(self.text, comments=True):
            if token in ("|", "&&"):
                stages.append([])
            elif token != "&":
                stages[-1].append(token)
        return [_without_env(stage) for stage in stages if stage]


def _without_env(argv: list[str]) -> list[str]:
    while argv and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[0]):
        argv = argv[1:]
    return argv


def fenced_blocks(text: str, first_line: int = 1) -> list[tuple[str, str, int]]:
    """(language, body, line of the body's first line) of every fenced block."""
    blocks = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = re.fullmatch(r"```(\S*)\s*", lines[i])
        if opening:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            blocks.append((opening.group(1), "\n".join(lines[i + 1 : end]), first_line + i + 1))
            i = end
        i += 1
    return blocks


def section(text: str, title: str) -> tuple[str, int]:
    """The body of the section `## title` (up to the next `## ` heading) and the line of the
    body's first line; a README without that section fails the test that asks, by name."""
    lines = text.splitlines()
    try:
        start = lines.index(f"## {title}") + 1
    except ValueError:
        raise AssertionError(f"README.md has no section '## {title}'") from None
    end = next((j for j in range(start, len(lines)) if lines[j].startswith("## ")), len(lines))
    return "\n".join(lines[start:end]), start + 1


def shell_commands(body: str, first_line: int) -> list[Command]:
    """The commands of one sh block, each with the expected lines that follow it."""
    commands: list[Command] = []
    pending, start = "", 0
    for number, raw in enumerate(body.splitlines(), first_line):
        line = raw.rstrip()
        if not pending and line.lstrip().startswith(EXPECTED.rstrip()) and commands:
            last = commands[-1]
            expected = line.lstrip()[len(EXPECTED) :].strip()
            commands[-1] = Command(last.text, last.line, (*last.expected, expected))
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
        elif shlex.split(line, comments=True)[-1:] == ["|"]:  # the pipeline goes on
            pending += line + " "
        else:
            pending += line
            if shlex.split(pending, comments=True):
                commands.append(Command(pending.strip(), start))
            pending = ""
    return commands


def expected_lines(body: str) -> list[str]:
    """The `# → ` lines of a python block (what the block prints)."""
    return [
        line.strip()[len(EXPECTED) :].strip()
        for line in body.splitlines()
        if line.strip().startswith(EXPECTED.rstrip())
    ]


def expected_pattern(expected: str) -> re.Pattern[str]:
    """`...` matches anything, whitespace any whitespace; the rest literally."""
    parts = [r"\s+".join(map(re.escape, part.split())) for part in expected.split("...")]
    return re.compile(".*?".join(parts))


def printed(expected: str, output: str) -> bool:
    """Whether one line of `output` shows `expected`."""
    pattern = expected_pattern(expected)
    return any(pattern.search(line) for line in output.splitlines())
