"""Where the project's data files are (include/: schemas, expectation suites, report assets),
wherever the project is installed.

include/ is installed as the package `logbroker_include` (setup.py): a checkout's editable
install maps that package to the folder itself, and a wheel carries a copy. So one lookup finds
the files in a checkout and in an installed wheel, from any working directory, with no path
climbed up from a module's own file:

    include_path("expectations", "audit_events.json")

A deployment's own settings are not installed (include/__init__.py lists what is).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

PACKAGE = "logbroker_include"


def include_path(*parts: str) -> Path:
    """include/<parts...> of the installed project (it may not exist: nothing is checked)."""
    # files() of a regular package on disk is its directory (a pathlib.Path)
    return Path(str(files(PACKAGE))).joinpath(*parts)
