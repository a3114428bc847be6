"""Columns of event fields whose names are taken by the fixed columns (no Spark session)."""

from __future__ import annotations

from pathlib import Path

import pytest

from logbroker.serde.schemas import load_schema_file, parse_event_schema
from spark_apps.source.avro_columns import AvroColumnError, build_schema, column_name
from spark_apps.source.event_decoding import ReaderSchema

SCHEMAS = Path(__file__).resolve().parents[2] / "include" / "schemas"


def test_audit_counts_topic_field_is_the_event_topic_column() -> None:
    # The row's `topic` is the warehouse topic (`_audit`); AuditCount's own `topic` field must
    # land beside it, under the name the audit reads (spark_apps.audit.audit_counts.AUDITED_TOPIC_COLUMNS).
    audit = load_schema_file(SCHEMAS / "audit_count.avsc")
    schema = build_schema({"_audit": ReaderSchema(1, audit.definition)}, permissive=True)
    names = schema.fieldNames()
    assert names.count("topic") == 1
    assert names[10:] == ["event_topic", "tier", "window_start", "window_ms", "count", "_error", "_value"]  # fmt: skip
    assert column_name("topic") == "event_topic" and column_name("tier") == "tier"


def test_a_field_whose_renamed_column_is_taken_too_is_refused_by_name() -> None:
    schema = parse_event_schema({
        "type": "record", "name": "Odd", "fields": [
            {"name": "header", "type": "logbroker.EventHeader"},
            {"name": "seq", "type": "long"}, {"name": "event_seq", "type": "long"}],
    })  # fmt: skip
    with pytest.raises(AvroColumnError, match=r"topic 'odd': the field 'seq' cannot be a column"):
        build_schema({"odd": ReaderSchema(1, schema.definition)}, permissive=False)


@pytest.mark.parametrize("value", ["", "t", "page_views", "é生產者"])
@pytest.mark.parametrize("n", [0, 1, 7000])
def test_a_constant_column_built_from_buffers_is_the_strings_repeated(value: str, n: int) -> None:
    import pyarrow as pa

    from spark_apps.source.raw_columns import constant_strings

    column = constant_strings(value, n)
    column.validate(full=True)
    assert column.equals(pa.array([value] * n, pa.string()))
