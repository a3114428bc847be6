"""Offline styling of the reports: the vendored CSS/JS in place of the CDNs (docs/design.md §7 P8).

Great Expectations' Data Docs load bootstrap, bootstrap-table, jQuery, popper, Font Awesome and
vega from CDNs, and their logo from GX's S3 bucket; without a network the pages render unstyled.
The project vendors those files (include/report_assets/, MANIFEST.json and SOURCES.md say from
where, at which version, under which licence). `install()` copies them to `<reports>/assets/`
and `rewrite_html()` points every page at them with relative links, so a reports directory can
be opened from disk, served by any web server, or copied elsewhere whole.

A page that still loads a stylesheet or script from the network after the rewrite is an error
(`UnvendoredAssetError`): a newer GX that references another asset must not silently bring the
unstyled page back; scripts/vendor_report_assets.py --check names what to add.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from functools import cache
from pathlib import Path

from logbroker.include_files import include_path

ASSETS_SOURCE = include_path("report_assets")  # the checkout's, or the installed copy
ASSETS_DIR = "assets"  # under the reports directory

_TAG = re.compile(r"<(script|link|img)\b[^>]*>", re.S | re.I)
_URL = re.compile(r'(src|href)="(https?://[^"]+)"')
_GX_LOGO = re.compile(r"https://great-expectations-web-assets\.s3[^\"]*/(logo-long\.png)[^\"]*")
_SRI = re.compile(r'\s+(integrity|crossorigin)="[^"]*"')


class UnvendoredAssetError(RuntimeError):
    """A report page loads a stylesheet or script from the network that is not vendored."""


@cache
def url_map() -> dict[str, str]:
    """CDN URL -> the vendored file, relative to the assets directory."""
    manifest = json.loads((ASSETS_SOURCE / "MANIFEST.json").read_text())
    out = {}
    for entry in manifest["packages"]:
        for name, urls in entry["files"].items():
            for url in urls:
                out[url] = f"{entry['package']}@{entry['version']}/{name}"
    return out


def install(reports_dir: Path) -> Path:
    """Copy the vendored files to `<reports_dir>/assets/` (again only when they changed)."""
    target = reports_dir / ASSETS_DIR
    source_manifest = (ASSETS_SOURCE / "MANIFEST.json").read_bytes()
    if (target / "MANIFEST.json").exists() and (
        target / "MANIFEST.json"
    ).read_bytes() == source_manifest:
        return target
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(ASSETS_SOURCE, target)
    return target


def asset_href(page: Path, reports_dir: Path, vendored: str) -> str:
    """The relative link from `page` to a vendored file (`bootstrap@4.3.1/dist/...`)."""
    rel = os.path.relpath(reports_dir / ASSETS_DIR / vendored, page.parent)
    return rel.replace(os.sep, "/")


def rewrite_html(text: str, page: Path, reports_dir: Path, site_dir: Path | None = None) -> str:
    """`text` of `page` with every CDN asset pointed at the vendored copy (see the module doc).

    `site_dir`: the Data Docs site root, for GX's logo (its static/images/ has a copy).
    """
    mapping = url_map()

    def fix_tag(match: re.Match[str]) -> str:
        tag = match.group(0)
        kind = match.group(1).lower()
        url = _URL.search(tag)
        if url is None:
            return tag
        href = url.group(2)
        if href in mapping:
            tag = tag.replace(
                url.group(0), f'{url.group(1)}="{asset_href(page, reports_dir, mapping[href])}"'
            )
            return _SRI.sub("", tag)  # checked when vendored; file:// pages cannot do CORS
        if kind == "img" and site_dir is not None and _GX_LOGO.match(href):
            logo = os.path.relpath(site_dir / "static" / "images" / "logo-long.png", page.parent)
            return tag.replace(url.group(0), f'{url.group(1)}="{logo}"')
        if kind == "script" or (kind == "link" and "stylesheet" in tag):
            raise UnvendoredAssetError(
                f"{page} loads {href} from the network; vendor it (include/report_assets/MANIFEST.json, "
                "then scripts/vendor_report_assets.py)"
            )
        return tag

    return _TAG.sub(fix_tag, text)


def rewrite_tree(site_dir: Path, reports_dir: Path, only_newer_than: float = 0.0) -> int:
    """Rewrite every .html file under `site_dir` changed since `only_newer_than`; return how many."""
    changed = 0
    for page in site_dir.rglob("*.html"):
        if page.stat().st_mtime < only_newer_than:
            continue
        text = page.read_text(encoding="utf-8")
        fixed = rewrite_html(text, page, reports_dir, site_dir)
        if fixed != text:
            page.write_text(fixed, encoding="utf-8")
            changed += 1
    return changed


def external_assets(text: str) -> list[str]:
    """Stylesheets and scripts a page still loads from the network (for tests and checks)."""
    out = []
    for match in _TAG.finditer(text):
        tag = match.group(0)
        url = _URL.search(tag)
        kind = match.group(1).lower()
        if url and (kind == "script" or (kind == "link" and "stylesheet" in tag) or kind == "img"):
            out.append(url.group(2))
    return out
