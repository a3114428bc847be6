"""The hourly load against real brokers, a real registry layout and the shared SparkSession.

One two-broker analysis cluster per module; each test uses its own topics and warehouse.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline_warehouse import load_summary
from pipeline_warehouse.checkpoint import Checkpoint, Warehouse
from spark_apps.audit.reconcile import summarize
from spark_apps.hadoop_fs import HadoopFS, open_warehouse
from spark_apps.load.errors import LoadOrderError, TooManyBadRecordsError
from spark_apps.load.run import load_hour
from spark_apps.load.settings import LoadSettings
from spark_apps.load.verify import verify
from spark_apps.source import discovery
from spark_apps.source.options import SourceOptions

from .helpers import (
    EPOCH_MS,
    HEADER,
    PAGE_VIEW,
    AnalysisCluster,
    independent_sha256,
    start_cluster,
)

H10, H11, H12 = "2026-11-22T10", "2026-11-22T11", "2026-11-22T12"


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory) -> AnalysisCluster:
    c = start_cluster(zookeeper, tmp_path_factory.mktemp("load-cluster"), "load")
    yield c
    c.stop()


def settings(c: AnalysisCluster, **kw) -> LoadSettings:
    return LoadSettings(zookeeper=c.live.connect, schema_registry=c.registry.connect, **kw)


def keys(spark, path: str) -> list[tuple[str, int]]:
    return [
        (r.producer_id, r.seq)
        for r in spark.read.parquet(path).select("producer_id", "seq").collect()
    ]


def listing(directory: Path) -> dict[str, float]:
    return {p.name: p.stat().st_mtime_ns for p in directory.iterdir()}


@pytest.mark.timeout(900)  # four loads; generous for a loaded machine
def test_three_hours_exactly_once_chained_then_backfill(spark, cluster, tmp_path):
    topic = "page_views"
    cluster.register(topic, PAGE_VIEW)
    wh = open_warehouse(str(tmp_path / "wh"), spark)
    s = settings(cluster)

    first = [cluster.event(topic) for _ in range(300)]
    cluster.produce(topic, first[:200])
    cluster.produce(topic, first[200:], codec="gzip")  # compressed sets are unwrapped
    cluster.produce(topic, first[:5])  # an at-least-once re-send inside the hour
    ten = load_hour(spark, wh, s, topic, H10)

    second = [cluster.event(topic) for _ in range(200)]
    cluster.produce(topic, second + first[100:103], codec="snappy")  # 3 already loaded in H10
    eleven = load_hour(spark, wh, s, topic, H11)

    third = [cluster.event(topic) for _ in range(250)]
    cluster.produce(topic, third, codec="snappy")
    twelve = load_hour(spark, wh, s, topic, H12)
    # the names inside compressed sets are read on the way: H11's snappy set repeats H10's
    # names, so Spark checks it; H12's, all new, is proved distinct without a Spark job
    phases = [("dedup" in r.seconds, "names" in r.seconds) for r in (ten, eleven, twelve)]
    assert phases == [(True, False), (True, False), (False, True)], twelve.summary()

    cps = [
        json.loads((tmp_path / "wh" / "_checkpoints" / topic / f"{h}.json").read_text())
        for h in (H10, H11, H12)
    ]
    assert [cp["rows"] for cp in cps] == [300, 200, 250]
    assert [cp["duplicates_dropped"] for cp in cps] == [5, 3, 0]
    assert [cp["bad_records"] for cp in cps] == [0, 0, 0]
    assert list(cps[0]) == [
        "topic", "load_hour", "partitions", "rows", "duplicates_dropped", "bad_records",
        "rows_sha256", "committed_at", "version", "files", "error_files",
    ]  # fmt: skip
    for h, cp in zip((H10, H11, H12), cps, strict=True):  # the files are the hour's, exactly
        on_disk = sorted(
            p.name for p in (tmp_path / "wh" / topic / f"load_hour={h}").glob("*.parquet")
        )
        assert sorted(cp["files"]) == on_disk and on_disk
        assert cp["error_files"] == []
    for earlier, later in itertools.pairwise(cps):  # each start is the previous end
        ends = {(p["broker_id"], p["partition"]): p["end_offset"] for p in earlier["partitions"]}
        starts = {(p["broker_id"], p["partition"]): p["start_offset"] for p in later["partitions"]}
        assert starts == ends
    for cp in cps:  # rows_sha256 recomputed from the brokers, independently of spark_apps
        sha, messages = independent_sha256(cluster, cp)
        assert cp["rows_sha256"] == sha
        assert messages == sum(p["messages"] for p in cp["partitions"])
        assert messages == cp["rows"] + cp["duplicates_dropped"] + cp["bad_records"]

    everything = keys(spark, wh.topic_dir(topic))
    assert len(everything) == len(set(everything)) == 750  # every event exactly once
    assert set(everything) == {("p-1", seq) for seq in range(cluster.seq - 750, cluster.seq)}

    # Each load's summary (what the audit reads instead of the rows) is current and says
    # what counting its rows again says, certificates of the previous hour included.
    fs = HadoopFS(spark)
    written = {}
    loads = []
    for cp in cps:
        load = Checkpoint.from_json(json.dumps(cp), cp["load_hour"])
        summary = load_summary.read_current(
            fs,
            load.data_dir(wh.uri),
            load.committed_at,
            load.rows_sha256,
            load.rows,
            names=load.files,
        )
        assert summary is not None, f"{cp['load_hour']}: no current _load_summary.json"
        written[cp["load_hour"]] = summary
        loads.append(load)
    assert written[H10].previous is None
    assert written[H11].previous.load_hour == H10 and written[H12].previous.load_hour == H11
    recounted = summarize(spark, fs, wh.uri, loads)
    for load in loads:
        mine, theirs = written[load.load_hour], recounted[(load.topic, load.hour)]
        assert sorted(map(str, mine.groups)) == sorted(map(str, theirs.groups))
        assert sorted(map(str, mine.names)) == sorted(map(str, theirs.names))
        assert (mine.rows, mine.files, mine.previous) == (
            theirs.rows,
            theirs.files,
            theirs.previous,
        )

    hours = tmp_path / "wh" / topic
    before = {h: listing(hours / f"load_hour={h}") for h in (H10, H12)}
    rows_before = sorted(spark.read.parquet(wh.hour_dir(topic, H11)).collect())
    report = load_hour(spark, wh, s, topic, H11)  # backfill: the stored range exactly
    assert report.backfill
    again = json.loads((tmp_path / "wh" / "_checkpoints" / topic / f"{H11}.json").read_text())
    versioned = ("committed_at", "version", "files")  # a backfill is a new version of the hour
    assert {k: v for k, v in again.items() if k not in versioned} == {
        k: v for k, v in cps[1].items() if k not in versioned
    }
    assert again["version"] != cps[1]["version"]
    assert not set(again["files"]) & set(cps[1]["files"])  # the old version's files are gone
    assert sorted(p.name for p in (hours / f"load_hour={H11}").glob("*.parquet")) == sorted(
        again["files"]
    )
    assert sorted(spark.read.parquet(wh.hour_dir(topic, H11)).collect()) == rows_before
    assert {h: listing(hours / f"load_hour={h}") for h in (H10, H12)} == before
    assert not list((tmp_path / "wh" / "_staging" / topic).iterdir())

    assert wh.committed_hours(topic) == [H10, H11, H12]
    assert verify(wh, topic, H11, zookeeper=cluster.live.connect).ok
    plain = Warehouse.open(str(tmp_path / "wh"))  # the same answers without Spark (fsspec)
    assert plain.checkpoint(topic, H12) == wh.checkpoint(topic, H12)
    assert plain.count_rows(plain.checkpoint(topic, H12)) == 250
    # event_time as Parquet's standard timestamp (INT64 micros, UTC; docs/warehouse.md):
    # pyarrow would read Spark's default INT96 as timestamp[ns] without a zone
    [part, *_] = sorted((hours / f"load_hour={H12}").glob("part-*.parquet"))
    assert pq.read_schema(part).field("event_time").type == pa.timestamp("us", tz="UTC")

    with pytest.raises(LoadOrderError, match="2026-11-22T13 is not committed"):
        load_hour(spark, wh, s, topic, "2026-11-22T14")
    with pytest.raises(LoadOrderError, match="later hour 2026-11-22T12 is committed"):
        load_hour(spark, wh, s, topic, "2026-11-22T09")


def test_a_load_parses_its_options_and_discovers_its_partitions_once(
    spark, cluster, tmp_path, monkeypatch
):
    """Issue 43 finding 9: a load's settings go down the floors once. The plan turns them into
    the source's options and discovers the partitions, once; the rows_sha256 thread, the tasks
    that read and write, Spark's writer and the bad records' read all take the plan's options,
    splits and reader schema (counted in this process: the driver, where they were parsed and
    discovered again for the writing tasks). Either writer loads the same hour."""
    topic = "settings_once"
    cluster.register(topic, PAGE_VIEW)
    cluster.produce(topic, [*(cluster.event(topic) for _ in range(50)), b"not an event"])
    parsed: list[int] = []
    discovered: list[int] = []
    asked_format: list[int] = []  # ZooKeeper sessions only to ask a topic's message format
    construct, find = SourceOptions.__init__, discovery._from_zookeeper
    format08_topics = discovery.format08_topics

    def counted_options(self: SourceOptions, *args: object, **kwargs: object) -> None:
        parsed.append(1)
        construct(self, *args, **kwargs)

    def counted_discovery(*args: object, **kwargs: object) -> list[discovery.PartitionState]:
        discovered.append(1)
        return find(*args, **kwargs)

    def counted_format(*args: object, **kwargs: object) -> set[str]:
        asked_format.append(1)
        return format08_topics(*args, **kwargs)

    monkeypatch.setattr(SourceOptions, "__init__", counted_options)
    monkeypatch.setattr(discovery, "_from_zookeeper", counted_discovery)
    monkeypatch.setattr(discovery, "format08_topics", counted_format)
    loaded = {}
    for writer in ("arrow", "spark"):
        parsed.clear()
        discovered.clear()
        asked_format.clear()
        wh = open_warehouse(str(tmp_path / writer), spark)
        s = settings(cluster, parquet_writer=writer, max_bad_fraction=0.1)
        loaded[writer] = load_hour(spark, wh, s, topic, H10).checkpoint
        assert (len(parsed), len(discovered)) == (1, 1), writer
        # the discovery says whether the rows have a key column (a 0.8-format topic's)
        assert not asked_format, writer
    arrow, spark_written = loaded["arrow"], loaded["spark"]
    assert (arrow.rows, arrow.bad_records) == (spark_written.rows, spark_written.bad_records)
    assert (arrow.rows, arrow.bad_records) == (50, 1)
    assert arrow.rows_sha256 == spark_written.rows_sha256


@pytest.mark.timeout(900)
def test_repeats_in_plain_hours_are_found_by_the_names_read_on_the_way(spark, cluster, tmp_path):
    """Uncompressed hours: the rows_sha256 thread's names decide whether the Spark check runs
    ("dedup") or no Spark job at all, the summary counted from the names too ("names"); a
    repeat inside the hour, or of an event the previous hour loaded, is always dropped."""
    topic = "plain_views"
    cluster.register(topic, PAGE_VIEW)
    wh = open_warehouse(str(tmp_path / "wh"), spark)
    s = settings(cluster)
    first = [cluster.event(topic) for _ in range(120)]
    cluster.produce(topic, first + first[7:9])  # two re-sent inside the hour
    one = load_hour(spark, wh, s, topic, H10)
    second = [cluster.event(topic) for _ in range(80)]
    cluster.produce(topic, second[:40] + first[50:51] + second[40:])  # one H10 loaded
    two = load_hour(spark, wh, s, topic, H11)
    third = [cluster.event(topic) for _ in range(60)]
    cluster.produce(topic, third)
    three = load_hour(spark, wh, s, topic, H12)

    dropped = [r.checkpoint.duplicates_dropped for r in (one, two, three)]
    assert dropped == [2, 1, 0]
    assert ["dedup" in r.seconds for r in (one, two, three)] == [True, True, False]
    assert "names" in three.seconds  # proved distinct, none of H11's: profiled from them too
    everything = keys(spark, wh.topic_dir(topic))
    assert len(everything) == len(set(everything)) == 260


def test_bad_records_go_to_errors_and_too_many_fail(spark, cluster, tmp_path):
    topic = "searches"
    schema_id = cluster.register(topic, PAGE_VIEW)
    wh = open_warehouse(str(tmp_path / "wh"), spark)
    s = settings(cluster)
    good = [cluster.event(topic) for _ in range(297)]
    truncated = cluster.event(topic)[:-3]
    unknown_id = bytes([0]) + (schema_id + 900).to_bytes(4, "big") + good[0][5:]
    cluster.produce(topic, [*good, b'{"json": "not avro"}', unknown_id, truncated])  # 1 %
    report = load_hour(spark, wh, s, topic, H10)
    assert (report.checkpoint.rows, report.checkpoint.bad_records) == (297, 3)
    errors = spark.read.parquet(wh.errors_dir(topic, H10)).collect()
    reasons = sorted(e.reason for e in errors)
    assert len(errors) == 3
    assert any("not an event" in r for r in reasons)
    assert any("unknown schema id" in r and str(schema_id + 900) in r for r in reasons)
    assert any("undecodable" in r for r in reasons)
    assert all(e.offset >= 0 and e.value for e in errors)  # the position and the payload kept
    assert b'{"json": "not avro"}' in {bytes(e.value) for e in errors}

    more = [cluster.event(topic) for _ in range(95)]
    cluster.produce(topic, more + [b"garbage"] * 5)  # 5 %
    with pytest.raises(
        TooManyBadRecordsError, match=r"5 of 100 messages \(5.00%\) are bad records"
    ):
        load_hour(spark, wh, s, topic, H11)
    assert wh.checkpoint(topic, H11) is None
    assert not (tmp_path / "wh" / topic / f"load_hour={H11}").exists()
    assert not list((tmp_path / "wh" / "_staging" / topic).iterdir())
    # a looser threshold takes the same hour
    assert (
        load_hour(
            spark, wh, settings(cluster, max_bad_fraction=0.05), topic, H11
        ).checkpoint.bad_records
        == 5
    )


AUDIT_COUNT = {
    "type": "record",
    "name": "AuditCount",
    "namespace": "logbroker",
    "fields": [
        {"name": "header", "type": HEADER},
        {"name": "topic", "type": "string"},
        {"name": "tier", "type": "string"},
        {"name": "window_start", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "window_ms", "type": "long"},
        {"name": "count", "type": "long"},
    ],
}


@pytest.mark.timeout(900)
def test_an_audit_count_resent_with_another_count_is_kept_in_the_summary(spark, cluster, tmp_path):
    """`_audit`: a re-send with the same count is only dropped; one with another count (here
    an hour later, so the row kept is the previous hour's) is dropped too, and the summary
    keeps every row of that header for the audit (load_summary: conflicts)."""
    cluster.register("_audit", AUDIT_COUNT)
    wh = open_warehouse(str(tmp_path / "wh"), spark)
    window = EPOCH_MS - EPOCH_MS % 600_000

    def count(seq: int, n: int) -> bytes:
        header = {
            "timestamp": window + 600_000,
            "server": "web-1",
            "producer_id": "p-9",
            "seq": seq,
        }
        return cluster.codec().encode(
            "_audit",
            {"header": header, "topic": "page_views", "tier": "producer",
             "window_start": window, "window_ms": 600_000, "count": n},
        )  # fmt: skip

    cluster.produce("_audit", [count(5, 9), count(6, 2), count(6, 2)])
    ten = load_hour(spark, wh, settings(cluster), "_audit", H10)
    cluster.produce("_audit", [count(5, 3), count(7, 1)])
    eleven = load_hour(spark, wh, settings(cluster), "_audit", H11)
    assert [r.checkpoint.duplicates_dropped for r in (ten, eleven)] == [1, 1]
    fs = HadoopFS(spark)
    summaries = {
        h: load_summary.read_written_by(
            fs, wh.hour_dir("_audit", h), cp.committed_at, cp.rows_sha256, cp.rows
        )
        for h, cp in ((H10, ten.checkpoint), (H11, eleven.checkpoint))
    }
    assert summaries[H10].conflicts == []  # the exact re-send: no conflict
    fields = {"event_topic": "page_views", "tier": "producer", "window_start": window,
              "window_ms": 600_000}  # fmt: skip
    at = load_summary.CONFLICT_COLUMNS.index
    found = sorted(
        (r[at("load_hour")], r[at("dropped")], r[at("producer_id")], r[at("seq")], r[at("fields")])
        for r in summaries[H11].conflicts
    )
    assert found == [
        (H10, False, "p-9", 5, {**fields, "count": 9}),
        (H11, True, "p-9", 5, {**fields, "count": 3}),
    ]
    assert all(r[at("offset")] is not None for r in summaries[H11].conflicts)
