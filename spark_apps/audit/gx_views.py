"""GX's Data Docs views, with their compiled templates kept between audits.

GX builds Data Docs with new Jinja environments every time, so each build compiled its ~35
templates again: 50-75 % of an hourly audit's Data Docs build (0.1-0.27 s of 0.18-0.35 s,
measured here). These are GX's own page views with Jinja's bytecode cache on
(`jinja2.FileSystemBytecodeCache`: per user, in the system's temporary directory; an entry
is keyed by the template's name and checked against its source, so a changed GX compiles
anew). The pages are the same; quality.py names these views in the Data Docs site's config.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from great_expectations.render.view.view import DefaultJinjaIndexPageView, DefaultJinjaPageView
from jinja2 import BytecodeCache, FileSystemBytecodeCache


@cache
def _bytecode_cache() -> BytecodeCache:
    return FileSystemBytecodeCache()


class CompiledOncePageView(DefaultJinjaPageView):
    """GX's page view (validation results, expectation suites)."""

    # GX passes a view only the arguments its signature names: these are the base class's
    def __init__(
        self, custom_styles_directory: Any = None, custom_views_directory: Any = None
    ) -> None:
        super().__init__(custom_styles_directory, custom_views_directory)
        self.env.bytecode_cache = _bytecode_cache()


class CompiledOnceIndexPageView(DefaultJinjaIndexPageView):
    """GX's index page view."""

    # GX passes a view only the arguments its signature names: these are the base class's
    def __init__(
        self, custom_styles_directory: Any = None, custom_views_directory: Any = None
    ) -> None:
        super().__init__(custom_styles_directory, custom_views_directory)
        self.env.bytecode_cache = _bytecode_cache()
