#!/usr/bin/env python3
"""Vendor the CSS/JS/fonts that Great Expectations' Data Docs load from CDNs (docs/design.md §7 P8).

Reads include/report_assets/MANIFEST.json (package, version, files, the CDN URLs each file
replaces), downloads each package with `npm pack` from the npm registry, copies the listed files
and the package's licence to include/report_assets/<package>@<version>/, records their SHA-256
in the manifest, checks the Subresource Integrity hashes that GX's templates pin (bootstrap.js,
popper.js), and writes include/report_assets/SOURCES.md.

    python scripts/vendor_report_assets.py           # fetch (needs npm and the registry)
    python scripts/vendor_report_assets.py --check   # offline: files match the manifest, and
                                                     # every CDN asset GX's templates load is in it
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "include" / "report_assets"
MANIFEST = ASSETS / "MANIFEST.json"

# Packages whose npm tarball carries no licence file: the licence named in their package.json,
# with the copyright line of their own source.
LICENCE_NOTES = {
    "popper.js": 'popper.js 1.12.9 is distributed under the MIT License (package.json: "license": "MIT").\n'
    "Its npm package has no LICENSE file; dist/umd/popper.min.js opens with:\n"
    "  Copyright (C) Federico Zivolo 2017\n"
    "  Distributed under the MIT License (license terms are at http://opensource.org/licenses/MIT).\n",
    "vega": 'vega 5.33.1 is distributed under the BSD-3-Clause license (package.json: "license":\n'
    '"BSD-3-Clause"). Its npm package has no LICENSE file; the vega project\'s licence is the same\n'
    "text as vega-lite's (vega-lite@5.23.0/LICENSE beside this directory), by the University of\n"
    "Washington Interactive Data Lab.\n",
}


def gx_templates() -> Path:
    import great_expectations

    return Path(great_expectations.__file__).parent / "render" / "view" / "templates"


def template_asset_urls() -> dict[str, str | None]:
    """Every CSS/JS URL GX's page templates load from the network -> its SRI hash, if pinned."""
    found: dict[str, str | None] = {}
    tag = re.compile(r"<(?:script|link)\b[^>]*>", re.S)
    for path in sorted(gx_templates().glob("*.j2")):
        for match in tag.finditer(path.read_text()):
            text = match.group(0)
            url = re.search(r'(?:src|href)="(https?://[^"]+)"', text)
            if not url or ("<link" in text and "stylesheet" not in text):
                continue
            sri = re.search(r'integrity="([^"]+)"', text)
            found[url.group(1)] = sri.group(1) if sri else None
    return found


def sri(data: bytes, spec: str) -> bool:
    algo, _, expected = spec.partition("-")
    return base64.b64encode(hashlib.new(algo, data).digest()).decode() == expected


def fetch(manifest: dict) -> None:
    pins = template_asset_urls()
    digests: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for entry in manifest["packages"]:
            spec = f"{entry['package']}@{entry['version']}"
            out = subprocess.run(
                ["npm", "pack", "--silent", spec],
                cwd=tmp,
                check=True,
                capture_output=True,
                text=True,
            ).stdout.split()[-1]
            target = ASSETS / spec
            shutil.rmtree(target, ignore_errors=True)
            with tarfile.open(Path(tmp) / out) as tar:
                members = {m.name.removeprefix("package/"): m for m in tar.getmembers()}
                wanted = list(entry["files"])
                if entry["license_file"]:
                    wanted.append(entry["license_file"])
                for name in wanted:
                    data = tar.extractfile(members[name]).read()  # type: ignore[union-attr]
                    path = target / name
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(data)
                    if name in entry["files"]:
                        digests[f"{spec}/{name}"] = hashlib.sha256(data).hexdigest()
                        for url in entry["files"][name]:
                            pin = pins.get(url)
                            if pin and not sri(data, pin):
                                sys.exit(
                                    f"{spec}/{name} does not match the integrity {pin} that GX pins for {url}"
                                )
            if entry["package"] in LICENCE_NOTES:
                (target / "LICENSE.note").write_text(LICENCE_NOTES[entry["package"]])
            print(f"vendored {spec}: {', '.join(entry['files'])}")
    manifest["sha256"] = dict(sorted(digests.items()))
    MANIFEST.write_text(json.dumps(manifest, indent=1) + "\n")
    write_sources(manifest)


def write_sources(manifest: dict) -> None:
    lines = [
        "# Vendored report assets",
        "",
        "What Great Expectations 1.24.1's Data Docs load from CDNs, vendored so that the audit's",
        "reports render styled without a network (docs/design.md §7 P8). Downloaded from the npm registry with",
        "`npm pack` by `scripts/vendor_report_assets.py`; each file's SHA-256 is in MANIFEST.json, and",
        "the Subresource Integrity hashes GX pins (bootstrap.min.js, popper.min.js) were checked.",
        "The reports copy this directory to `<reports>/assets/` and rewrite the CDN links to it",
        "(`spark_apps/audit/report_assets.py`). Only the files below are kept (e.g. Font Awesome's woff2",
        "fonts, not its ttf fallbacks, which Chromium and every current browser do not need).",
        "",
        "| package | version | licence | files | replaces |",
        "|---|---|---|---|---|",
    ]
    for entry in manifest["packages"]:
        urls = sorted({u for us in entry["files"].values() for u in us})
        lines.append(
            f"| {entry['package']} | {entry['version']} | {entry['license']} | "
            f"{'<br>'.join(entry['files'])} | {'<br>'.join(urls) or '(loaded by the CSS)'} |"
        )
    lines += [
        "",
        "Each package's own licence file is in its directory (popper.js and vega ship none in their",
        "npm packages: see their LICENSE.note).",
        "",
    ]
    (ASSETS / "SOURCES.md").write_text("\n".join(lines))


def check(manifest: dict) -> list[str]:
    problems = []
    mapped = {u for e in manifest["packages"] for us in e["files"].values() for u in us}
    for url in template_asset_urls():
        if url not in mapped:
            problems.append(f"GX's templates load {url}, which MANIFEST.json does not vendor")
    for key, digest in manifest["sha256"].items():
        path = ASSETS / key
        if not path.exists():
            problems.append(f"{path} is missing")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            problems.append(f"{path} does not match its SHA-256 in MANIFEST.json")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="verify offline, fetch nothing")
    args = parser.parse_args()
    manifest = json.loads(MANIFEST.read_text())
    if not args.check:
        fetch(manifest)
    problems = check(manifest)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
