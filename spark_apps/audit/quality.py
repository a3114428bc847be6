"""Data-quality checks of the audit with Great Expectations 1.x, and their Data Docs.

The suites are versioned with the code (include/expectations/*.json, GX's own suite format);
each run copies them into a GX file project under the reports directory and validates, for
every audited hour, three small batches that the audit has already computed:

    audit_results        the hour's result rows (+ `past_grace`): no lost window, missing = 0
                         and unaccounted = 0 past the grace, no duplicates, every topic that
                         had traffic in the previous day has data in the hour
    loaded_topic_hours   the hour's loads, one profile row per topic (load_profile): header
                         columns not null, event times plausible, schema ids registered, bad
                         records under the threshold, seq unique per producer_id
    audit_events         the hour's bad AuditCount events, one row per reason

Each suite has its checkpoint; a run validates each hour with run name = the hour and run time
= the audit's clock, so re-auditing an hour adds a validation result and keeps the earlier ones
(through the checkpoint's validation definition, as the checkpoint runs it: `validate`).
Data Docs are built to `<reports>/data_docs/` with the vendored assets (report_assets), the GX
project lives in `<reports>/gx/`. A failed expectation is a result: nothing here raises for it.

What GX costs per run, and what is done once instead (an hourly audit is a new process each
time, so only what the project's files keep carries over):

- the suites, data assets, validation definitions and checkpoints are saved into the project
  when the versioned suites (or GX's version) change, or the project's files no longer are
  what that setup wrote (`<gx>/uncommitted/audit_setup.json` holds both fingerprints);
  otherwise they are read back (add_or_update wrote every file each run: ~0.1 s);
- the Data Docs index lists every validation result ever stored, and GX opens each one to
  show its success and asset: 72 more files a day. A stored result never changes (a
  re-audit adds another), so what the index shows of each is kept in
  `<gx>/uncommitted/audit_index_cache.json` and each result is opened once, when it is new.
  The index page is the same (tests/audit_app/test_units.py compares them);
- GX compiles its Jinja templates for every Data Docs build: the site's views are GX's own
  with Jinja's bytecode cache on (gx_views), so they are compiled once per user and GX;
- a checkpoint's run first checks that it is what its project stores, reading every suite
  back several times (0.3 s of the three runs' 1 s): the setup's fingerprint is that check,
  once a run, and each checkpoint's validation definition runs as the checkpoint runs it.

Layout of the reports directory:

    <reports>/index.html                the audit's own index: hours, states, links
    <reports>/hours/<YYYY-MM-DDTHH>.html one page per audited hour (report)
    <reports>/data_docs/index.html      GX's Data Docs site
    <reports>/gx/                       the GX project (suites, checkpoints, validation results)
    <reports>/assets/                   the vendored CSS/JS/fonts
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from logbroker.include_files import include_path
from pipeline_warehouse.checkpoint import Warehouse
from pipeline_warehouse.filesystem import is_local, join, local_path
from pipeline_warehouse.time_format import WINDOW_MS, format_hour, parse_hour
from spark_apps.audit.report_assets import install, rewrite_tree
from spark_apps.hadoop_fs import HadoopFS

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

    from spark_apps.audit.outcome import AuditOptions, AuditOutcome

log = logging.getLogger(__name__)

SUITES_SOURCE = include_path("expectations")  # the checkout's, or the installed copy
SUITES = ("audit_results", "loaded_topic_hours", "audit_events")
INDEX_COLUMNS = {
    "audit_results": ["topic", "window_start"],
    "loaded_topic_hours": ["topic", "load_hour"],
    "audit_events": ["reason"],
}
DATASOURCE = "logbroker_audit"
VIEWS = "spark_apps.audit.gx_views"
DATA_DOCS = "data_docs"
GX_DIR = "gx"


@dataclass
class Failure:
    """One failed expectation of one hour: what it checks and the rows that broke it."""

    suite: str
    expectation: str
    column: str | None
    notes: str
    unexpected_count: int | None
    rows: list[dict[str, Any]]  # the failing rows' index columns and value
    observed: Any = None


@dataclass
class QualityOutcome:
    success: bool
    failures: dict[str, list[Failure]] = field(default_factory=dict)  # hour -> failures
    pages: dict[str, dict[str, str]] = field(default_factory=dict)  # hour -> suite -> page (rel.)
    evaluated: dict[str, int] = field(default_factory=dict)  # hour -> expectations evaluated
    site_index: str = f"{DATA_DOCS}/index.html"
    timings: dict[str, float] = field(default_factory=dict)


def _gx() -> Any:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    import great_expectations as gx

    return gx


def open_context(project_dir: Path) -> Any:
    """The GX file project in `project_dir/gx/`, set up for the audit (idempotent)."""
    gx = _gx()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    project_dir.mkdir(parents=True, exist_ok=True)
    ctx = gx.get_context(mode="file", project_root_dir=str(project_dir))
    _drop_variables_template(project_dir / GX_DIR / "uncommitted" / "config_variables.yml")
    site = {
        "class_name": "SiteBuilder",
        "show_how_to_buttons": False,
        "store_backend": {
            "class_name": "TupleFilesystemStoreBackend",
            "base_directory": f"../{DATA_DOCS}/",
        },
        # GX's views, their templates compiled once (gx_views)
        "site_section_builders": {
            section: {"view": {"module_name": VIEWS, "class_name": "CompiledOncePageView"}}
            for section in ("expectations", "validations")
        },
        "site_index_builder": {
            "class_name": "DefaultSiteIndexBuilder",
            "view": {"module_name": VIEWS, "class_name": "CompiledOnceIndexPageView"},
        },
    }
    sites = ctx.variables.data_docs_sites or {}
    if sites.get("local_site") != site:
        ctx.update_data_docs_site(
            "local_site", site
        ) if "local_site" in sites else ctx.add_data_docs_site("local_site", site)
    # A context read back from its great_expectations.yml holds the setting as a dict.
    bars = ctx.variables.progress_bars
    globally = bars.get("globally") if isinstance(bars, dict) else getattr(bars, "globally", None)
    if globally is not False:
        ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
        ctx.variables.save()
    return ctx


def _drop_variables_template(path: Path) -> None:
    """Remove GX's config_variables.yml while it is the template GX scaffolds: comments and
    an `instance_id` (a random id for GX's usage analytics, which the audit turns off).

    GX reads and YAML-parses that file on every access to a context variable (~150 times
    per audited hour, 66 ms per 150 here); a missing file is read as no variables. A file
    someone put variables in is kept."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return
    lines = [line.strip() for line in text.splitlines()]
    if all(not line or line.startswith(("#", "instance_id:")) for line in lines):
        path.unlink()


SETUP_FILE = "audit_setup.json"  # under <gx>/uncommitted/
INDEX_CACHE_FILE = "audit_index_cache.json"  # under <gx>/uncommitted/
# The project's files that the setup writes (relative to <gx>/): a change to any of them by
# hand, or by another GX, means the setup runs again.
SETUP_WRITES = ("great_expectations.yml", "expectations", "validation_definitions", "checkpoints")


def set_up(ctx: Any, project_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(suite name -> suite, suite name -> checkpoint): saved into the project only when the
    versioned suites, GX's version or the project's files changed since the last setup (the
    module doc); else read back."""
    gx_dir = project_dir / GX_DIR
    marker = gx_dir / "uncommitted" / SETUP_FILE
    source = _source_fingerprint()
    try:
        done = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        done = None
    if done == {"source": source, "project": _project_fingerprint(gx_dir)}:
        try:
            cps = {name: ctx.checkpoints.get(f"audit_{name}") for name in SUITES}
            return {n: cp.validation_definitions[0].suite for n, cp in cps.items()}, cps
        except Exception as exc:  # any GX error reading them back: set up again
            log.warning("the GX project's checkpoints could not be read back (%s): set up", exc)
    suites = install_suites(ctx)
    cps = checkpoints(ctx, suites)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(
        json.dumps({"source": source, "project": _project_fingerprint(gx_dir)}), encoding="utf-8"
    )
    return suites, cps


def _source_fingerprint() -> str:
    """What the setup is made from: the versioned suites, GX's version, the batches' index
    columns and the datasource's name."""
    gx = _gx()
    digest = hashlib.sha256(f"{gx.__version__}|{DATASOURCE}|{INDEX_COLUMNS}".encode())
    for name in SUITES:
        digest.update((SUITES_SOURCE / f"{name}.json").read_bytes())
    return digest.hexdigest()


def _project_fingerprint(gx_dir: Path) -> str:
    """The files the setup wrote into the project, as they are now."""
    digest = hashlib.sha256()
    for name in SETUP_WRITES:
        path = gx_dir / name
        files = sorted(path.rglob("*.json")) if path.is_dir() else [path]
        for file in files:
            if file.is_file():
                digest.update(str(file.relative_to(gx_dir)).encode() + b"\0")
                digest.update(file.read_bytes())
    return digest.hexdigest()


def install_suites(ctx: Any) -> dict[str, Any]:
    """The versioned suites, copied into the project and saved (ids assigned) -> name -> suite."""
    gx = _gx()
    out = {}
    for name in SUITES:
        doc = json.loads((SUITES_SOURCE / f"{name}.json").read_text())
        suite = gx.ExpectationSuite(
            name=doc["name"], notes=doc.get("notes"), meta=doc.get("meta", {})
        )
        for spec in doc["expectations"]:
            from great_expectations.expectations.expectation_configuration import (
                ExpectationConfiguration,
            )

            suite.add_expectation_configuration(
                ExpectationConfiguration(
                    type=spec["type"], kwargs=spec["kwargs"], meta=spec.get("meta", {})
                )
            )
        out[name] = ctx.suites.add_or_update(suite)
    return out


def checkpoints(ctx: Any, suites: dict[str, Any]) -> dict[str, Any]:
    """One checkpoint per suite, on a whole-dataframe batch of its own asset."""
    gx = _gx()
    source = ctx.data_sources.add_or_update_pandas(DATASOURCE)
    out = {}
    for name, suite in suites.items():
        try:
            asset = source.get_asset(name)
        except LookupError:
            asset = source.add_dataframe_asset(name)
        try:
            batch = asset.get_batch_definition("whole")
        except (KeyError, LookupError):
            batch = asset.add_batch_definition_whole_dataframe("whole")
        definition = ctx.validation_definitions.add_or_update(
            gx.ValidationDefinition(name=name, data=batch, suite=suite)
        )
        out[name] = ctx.checkpoints.add_or_update(
            gx.Checkpoint(
                name=f"audit_{name}",
                validation_definitions=[definition],
                actions=[],
                result_format={
                    "result_format": "COMPLETE",
                    "unexpected_index_column_names": INDEX_COLUMNS[name],
                },
            )
        )
    return out


def validate(
    checkpoint: Any, frame: pd.DataFrame, params: dict[str, Any], run_id: Any
) -> tuple[Any, Any]:
    """(result key, validation result) of `checkpoint` on `frame`: its one validation
    definition run as Checkpoint.run runs it (the checkpoint's id and result format; the
    audit's checkpoints have no actions), stored the same way, without the checkpoint's own
    freshness check. That check reads every suite back from the store several times (0.3 s
    of 1 s of the three runs, profiled); `set_up` compared the project's files with what it
    saved once in this run."""
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )

    [definition] = checkpoint.validation_definitions
    result = definition.run(
        checkpoint_id=checkpoint.id,
        batch_parameters={"dataframe": frame},
        expectation_parameters=params,
        result_format=checkpoint.result_format,
        run_id=run_id,
    )
    key = ValidationResultIdentifier(
        expectation_suite_identifier=ExpectationSuiteIdentifier(name=definition.suite.name),
        run_id=run_id,
        batch_identifier=result.batch_id,
    )
    return key, result


def batches(
    outcome: AuditOutcome, hour: str, grace_ms: int, now: datetime
) -> dict[str, pd.DataFrame]:
    """The three batches of one audited hour (see the module doc)."""
    import pandas as pd

    results = outcome.results[outcome.results["audit_hour"] == hour].copy()
    now_ms = int(now.timestamp() * 1000)
    results["past_grace"] = (results["window"] + WINDOW_MS + grace_ms) <= now_ms
    for column in ("window_start", "window_end", "audited_at"):
        results[column] = results[column].dt.strftime("%Y-%m-%dT%H:%MZ")
    results = results.drop(columns=["audit_hour", "window"]).reset_index(drop=True)
    profiles = outcome.profiles[outcome.profiles["load_hour"] == hour].reset_index(drop=True)
    bad = outcome.summaries[hour]["bad_audit_reasons"]
    events = pd.DataFrame({"reason": list(bad), "events": [int(v) for v in bad.values()]})
    if events.empty:
        events = pd.DataFrame(
            {"reason": pd.Series(dtype="object"), "events": pd.Series(dtype="int64")}
        )
    return {"audit_results": results, "loaded_topic_hours": profiles, "audit_events": events}


def topics_with_traffic(
    fs: Any, wh: str, topics: list[str], hour: datetime, cache: dict[tuple[str, str], int]
) -> list[str]:
    """The topics among `topics` with rows in any load of the 24 hours before `hour`."""
    warehouse = Warehouse(wh, fs)
    out = []
    first, last = format_hour(hour - timedelta(hours=24)), format_hour(hour)
    for topic in topics:
        for load_hour in warehouse.committed_hours(topic):
            if not first <= load_hour < last:  # hour names sort as the hours do
                continue
            key = (topic, load_hour)
            if key not in cache:
                checkpoint = warehouse.checkpoint(topic, load_hour)
                cache[key] = checkpoint.rows if checkpoint is not None else 0
            if cache[key] > 0:
                out.append(topic)
                break
    return out


def _failures(suite: str, result: Any, suite_obj: Any) -> list[Failure]:
    notes = {}
    for expectation in suite_obj.expectations:
        content = (expectation.meta or {}).get("notes", {}).get("content", [""])
        notes[expectation.id] = content[0] if content else ""
    out = []
    for r in result.results:
        if r.success:
            continue
        config = r.expectation_config
        res = r.result or {}
        rows = []
        for item in res.get("unexpected_index_list") or []:
            rows.append({k: (v.item() if hasattr(v, "item") else v) for k, v in dict(item).items()})
        out.append(
            Failure(
                suite=suite,
                expectation=config.type,
                column=config.kwargs.get("column"),
                notes=notes.get(config.id, ""),
                unexpected_count=res.get("unexpected_count"),
                rows=rows,
                observed=res.get("observed_value"),
            )
        )
    return out


def run_quality(
    spark: SparkSession, fs: HadoopFS, reports: str, outcome: AuditOutcome, opts: AuditOptions
) -> QualityOutcome:
    """Validate every audited hour, keep the results, build Data Docs (see the module doc)."""
    started = time.time()
    timings: dict[str, float] = {}
    if is_local(reports):
        local = local_path(reports)
        return _run_local(fs, local, outcome, opts, timings, started)
    with tempfile.TemporaryDirectory(prefix="audit-reports-") as tmp:
        local = Path(tmp)
        if fs.exists(join(reports, GX_DIR)):
            fs.copy_to_local(join(reports, GX_DIR), str(local / GX_DIR))
        quality = _run_local(fs, local, outcome, opts, timings, started)
        for name in (GX_DIR, DATA_DOCS, "assets"):
            fs.copy_from_local(str(local / name), join(reports, name))
        return quality


def _run_local(
    fs: Any,
    local: Path,
    outcome: AuditOutcome,
    opts: AuditOptions,
    timings: dict[str, float],
    started: float,
) -> QualityOutcome:
    t = time.perf_counter()
    ctx = open_context(local)
    suites, cps = set_up(ctx, local)
    timings["gx setup"] = time.perf_counter() - t
    gx = _gx()
    quality = QualityOutcome(success=True, timings=timings)
    identifiers = []
    traffic_cache: dict[tuple[str, str], int] = {}
    t = time.perf_counter()
    for hour_name in outcome.summaries:
        hour = parse_hour(hour_name)
        params = {
            "topics_with_traffic": topics_with_traffic(
                fs, opts.warehouse, list(outcome.plan.topics), hour, traffic_cache
            ),
            "max_bad_fraction": opts.max_bad_fraction,
        }
        failures: list[Failure] = []
        evaluated = 0
        for name, frame in batches(outcome, hour_name, opts.grace_ms, opts.now).items():
            run_id = gx.RunIdentifier(run_name=hour_name, run_time=opts.now)
            key, validation = validate(cps[name], frame, params, run_id)
            identifiers.append(key)
            evaluated += len(validation.results)
            failures += _failures(name, validation, suites[name])
            quality.pages.setdefault(hour_name, {})[name] = _page_of(key)
            quality.success = quality.success and bool(validation.success)
        quality.failures[hour_name] = failures
        quality.evaluated[hour_name] = evaluated
    timings["gx validate"] = time.perf_counter() - t
    t = time.perf_counter()
    with cached_index_entries(ctx, local / GX_DIR / "uncommitted" / INDEX_CACHE_FILE):
        ctx.build_data_docs(resource_identifiers=identifiers)
    site = local / DATA_DOCS
    install(local)
    rewrite_tree(site, local, only_newer_than=started - 1)
    timings["data docs"] = time.perf_counter() - t
    return quality


@contextmanager
def cached_index_entries(ctx: Any, cache_file: Path) -> Iterator[None]:
    """While Data Docs are built, the index reads what it shows of each validation result
    (its success and meta) from `cache_file`, and GX opens only the results not in it yet;
    the cache is then written back with the results the index listed (the module doc).

    The index asks the context for each result (`get_validation_result`, with its run id and
    batch); the pages themselves read their results from the store, untouched."""
    from great_expectations.core.expectation_validation_result import (
        ExpectationSuiteValidationResult,
    )

    try:
        cache = json.loads(cache_file.read_text(encoding="utf-8"))
        entries = cache["entries"] if cache.get("version") == _gx().__version__ else {}
    except (OSError, ValueError, KeyError, AttributeError):
        entries = {}
    listed: dict[str, Any] = {}
    read = ctx.get_validation_result

    def get_validation_result(
        expectation_suite_name: str,
        run_id: Any = None,
        batch_identifier: Any = None,
        validation_results_store_name: Any = None,
        failed_only: bool = False,
    ) -> Any:
        if run_id is None or batch_identifier is None or failed_only:
            return read(
                expectation_suite_name,
                run_id=run_id,
                batch_identifier=batch_identifier,
                validation_results_store_name=validation_results_store_name,
                failed_only=failed_only,
            )
        key = "|".join([expectation_suite_name, *run_id.to_tuple(), str(batch_identifier)])
        entry = entries.get(key)
        if entry is None:
            result = read(
                expectation_suite_name,
                run_id=run_id,
                batch_identifier=batch_identifier,
                validation_results_store_name=validation_results_store_name,
            )
            if not isinstance(result, ExpectationSuiteValidationResult):
                return result  # not found: GX skips it
            meta: dict[str, Any] = dict(result.meta or {})
            entry = {
                "success": bool(result.success),
                "meta": {
                    k: meta[k]
                    for k in ("batch_kwargs", "batch_spec", "active_batch_definition")
                    if k in meta
                },
            }
        listed[key] = entry
        return ExpectationSuiteValidationResult(
            success=entry["success"],
            results=[],
            suite_name=expectation_suite_name,
            meta=entry["meta"],
        )

    ctx.get_validation_result = get_validation_result
    try:
        yield
    finally:
        del ctx.get_validation_result  # the class's method again
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    cache_file.write_text(
        json.dumps({"version": _gx().__version__, "entries": listed}, default=str),
        encoding="utf-8",
    )


def _page_of(key: Any) -> str:
    """The Data Docs page of a validation result, relative to the reports directory."""
    suite, run_name, run_time, batch = key.to_tuple()
    return f"{DATA_DOCS}/validations/{suite}/{run_name}/{run_time}/{batch}.html"
