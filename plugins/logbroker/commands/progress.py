"""Progress bars for long commands: tqdm's when it is installed (the `cli` extra), else none.

The library's core dependencies leave tqdm out, so that a program that only produces (a web
frontend) does not install it; the `logbroker` command then does the same work, without a bar.
"""

from __future__ import annotations

from typing import Any, Protocol


class ProgressBar(Protocol):
    def update(self, n: float = 1) -> object: ...

    def close(self) -> None: ...


class NoProgressBar:
    """What `progress_bar` returns without tqdm: counts nothing, prints nothing."""

    def update(self, n: float = 1) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(**tqdm_args: Any) -> ProgressBar:
    """`tqdm(**tqdm_args)` if tqdm can be imported, else a bar that does nothing."""
    try:
        from tqdm import tqdm
    except ImportError:
        return NoProgressBar()
    bar: ProgressBar = tqdm(**tqdm_args)
    return bar
