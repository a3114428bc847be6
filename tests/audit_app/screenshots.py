"""Where the tests put their screenshots: a temporary directory, or docs/images/ when
UPDATE_SCREENSHOTS=1 (`make screenshots`), so that a plain test run never dirties the tree."""

from __future__ import annotations

import os
from pathlib import Path

IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"


def screenshot_path(name: str, tmp_path: Path) -> Path:
    directory = IMAGES if os.environ.get("UPDATE_SCREENSHOTS") else tmp_path
    directory.mkdir(parents=True, exist_ok=True)
    return directory / name
