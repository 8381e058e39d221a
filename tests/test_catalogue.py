"""The event catalogue: its conventions, the generated code and docs, and its refusals."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import avro.schema
import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import generate
from schemas.catalogue import (
    SCHEMA_DIR,
    TOPICS,
    CatalogueError,
    EventType,
    envelope_schema,
    event_type,
    event_types,
    is_money,
    iter_fields,
    load_schema_dir,
    non_null,
    python_fields,
)
from schemas.codec import strip_logical_types
from schemas.events import EVENT_CLASSES, PAYLOAD_TYPES, Envelope, NoticeReceived
from tests.strategies import envelopes, payload_of

# DESIGN.md §3's list, then the additions, in envelope union order. The union is append-only:
# this list must stay a prefix of it (a new event type is appended here and there).
EVENT_TYPE_ORDER = (
    "contract_published",
    "rate_card",
    "forward_capacity",
    "reservation_committed",
    "capacity_claim_opened",
    "capacity_claim_closed",
    "pool_ranked",
    "pool_excluded",
    "pool_readmitted",
    "placement_decided",
    "instance_launched",
    "instance_deleted",
    "advisory",
    "notice_received",
    "drain_started",
    "drain_completed",
    "checkpoint_written",
    "instance_lost",
    "work_wasted",
    "replacement_requested",
    "fallback_decided",
    "fallback_returned",
    "usage_interval",
    "actuation_throttled",
    "breaker_tripped",
    "dead_lettered",
    # beyond DESIGN.md §3
    "pool_registered",
    "breaker_reset",
    "fallback_reviewed",
    "launch_failed",
)
ALL_TYPES = [t.name for t in event_types()]


# -- generated files --------------------------------------------------------------------------


def test_generated_code_and_docs_are_fresh() -> None:
    outdated = [str(p.relative_to(generate.ROOT)) for p in generate.stale()]
    assert not outdated, f"stale: {outdated}; run `{generate.COMMAND}`"
    assert generate.main(["--check"]) == 0


def test_check_notices_a_schema_change(tmp_path: Path) -> None:
    folder = copy_schemas(tmp_path)
    edit(folder, "advisory.avsc", lambda r: r["fields"].append(optional("note", "A note.")))
    assert set(generate.stale(folder)) == {generate.EVENTS_PY, generate.EVENTS_MD}


def test_generated_classes_mirror_the_schemas() -> None:
    assert list(EVENT_CLASSES) == ALL_TYPES
    assert list(PAYLOAD_TYPES) == [t.record_name for t in event_types()]
    for t in event_types():
        cls = EVENT_CLASSES[t.name]
        declared = {"name": cls.EVENT_TYPE, "record": cls.RECORD_NAME, "topic": cls.TOPIC}
        assert declared == {"name": t.name, "record": t.record_name, "topic": t.topic}
        assert t.key == cls.KEY
        python = [f["name"] for f in python_fields(t.schema)]
        assert [f.name for f in dataclasses.fields(cls)] == python


def test_an_event_types_summary_is_its_docs_first_sentence() -> None:
    def summary(doc: str) -> str:
        return EventType("x", "spotcap.events.X", "lifecycle", "instance_id", doc, {}).summary

    assert summary("A notice came.\n  It sets the deadline. More.") == "A notice came."
    assert summary("Drift between  the\nprovider and the state") == (
        "Drift between the provider and the state"
    )
    assert summary("Ends with a stop.") == "Ends with a stop."
    assert all(t.summary and "\n" not in t.summary for t in event_types())


def test_units_come_from_the_suffix() -> None:
    assert generate.unit_of("drain_budget_s") == "seconds"
    assert generate.unit_of("deadline_at") == "µs since the epoch, UTC"
    assert generate.unit_of("price_per_vcpu_h_eur_micros") == "µ€ per vCPU-hour"
    assert generate.unit_of("wasted_vcpu_s") == "vCPU-seconds"
    assert generate.unit_of("vcpu") == "vCPU"
    assert generate.unit_of("pool_id") == ""


# -- conventions ------------------------------------------------------------------------------


def test_the_union_is_append_only_and_covers_design_section_3() -> None:
    assert tuple(ALL_TYPES[: len(EVENT_TYPE_ORDER)]) == EVENT_TYPE_ORDER


def test_every_record_and_field_has_a_doc() -> None:
    schema = envelope_schema()
    fields = list(iter_fields(schema))
    assert len(fields) > 200
    for record, fd in fields:
        assert str(fd.get("doc", "")).strip(), f"{record}.{fd['name']} has no doc"
    for t in event_types():
        assert t.doc.strip()


def test_money_is_a_long_of_micro_euros() -> None:
    money = 0
    for record, fd in iter_fields(envelope_schema()):
        name, type_ = fd["name"], non_null(fd["type"])
        base = type_["type"] if isinstance(type_, dict) else type_
        if is_money(name) or "eur" in name:
            money += 1
            assert name.endswith("_eur_micros") and base == "long", f"{record}.{name}"
        if base in ("float", "double"):
            assert not is_money(name), f"{record}.{name} is money in floating point"
    assert money >= 10


def test_every_event_type_has_a_topic_and_a_key_it_can_fill() -> None:
    for t in event_types():
        assert t.topic in TOPICS, t.name
        assert t.record_name == "spotcap.events." + "".join(
            p.capitalize() for p in t.name.split("_")
        )
        types = {f["name"]: f["type"] for f in t.schema["fields"]}
        assert t.key == "region" or types.get(t.key) == "string", t.name
    assert {t.topic for t in event_types()} == TOPICS


def test_causation_and_correlation_live_only_in_the_envelope() -> None:
    for t in event_types():
        names = {f["name"] for f in t.schema["fields"]}
        assert not names & {"event_id", "causation_id", "correlation_id", "occurred_at"}, t.name


def test_lookup_by_either_name() -> None:
    assert event_type("notice_received") is event_type("spotcap.events.NoticeReceived")
    with pytest.raises(KeyError, match="known: contract_published"):
        event_type("notice")


def test_the_envelope_parses_with_fastavro_and_apache_avro() -> None:
    schema = envelope_schema()
    fastavro.parse_schema(schema)
    avro.schema.parse(json.dumps(schema))
    for t in event_types():  # each payload schema stands alone too
        fastavro.parse_schema(dict(t.schema))
        avro.schema.parse(json.dumps(t.schema))


def test_named_types_are_defined_exactly_once() -> None:
    definitions: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            if node.get("type") in ("record", "enum", "fixed"):
                definitions.append(f"{node['namespace']}.{node['name']}")
            for value in node.values():
                walk(value)

    walk(envelope_schema()["fields"])
    assert len(definitions) == len(set(definitions))
    assert "spotcap.types.PurchaseModel" in definitions


def test_the_envelope_refuses_a_mismatched_payload() -> None:
    good = envelope_for(NoticeReceived("i-1", "p-1", "wl-1", 1, "nats"))
    assert good.event_type == "notice_received"
    with pytest.raises(ValueError, match="does not match the payload"):
        dataclasses.replace(good, event_type="instance_lost")


# -- round trips ------------------------------------------------------------------------------


PARSED = {t.name: fastavro.parse_schema(strip_logical_types(dict(t.schema))) for t in event_types()}


@pytest.mark.parametrize("name", ALL_TYPES)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_to_avro_from_avro_round_trip(name: str, data: st.DataObject) -> None:
    payload = data.draw(payload_of(name))
    cls = type(payload)
    assert cls.from_avro(payload.to_avro()) == payload
    out = io.BytesIO()
    fastavro.schemaless_writer(out, PARSED[name], payload.to_avro())
    out.seek(0)
    decoded: dict[str, Any] = fastavro.schemaless_reader(out, PARSED[name])  # type: ignore[assignment]
    assert cls.from_avro(decoded) == payload


@settings(max_examples=50, deadline=None)
@given(envelope=envelopes())
def test_envelopes_are_consistent(envelope: Envelope) -> None:
    assert envelope.event_type == envelope.payload.EVENT_TYPE
    assert envelope.key == getattr(envelope.payload, envelope.payload.KEY, envelope.key)


# -- refusals of broken schema folders ---------------------------------------------------------


def copy_schemas(tmp_path: Path) -> Path:
    folder = tmp_path / "schemas"
    folder.mkdir()
    for path in SCHEMA_DIR.glob("*.avsc"):
        shutil.copy(path, folder / path.name)
    return folder


def edit(folder: Path, name: str, change: Callable[[dict[str, Any]], None]) -> None:
    path = folder / name
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def optional(name: str, doc: str | None) -> dict[str, Any]:
    field: dict[str, Any] = {"name": name, "type": ["null", "string"], "default": None}
    if doc is not None:
        field["doc"] = doc
    return field


def envelope_for(payload: Any) -> Envelope:
    return Envelope(
        event_id="00000000-0000-4000-8000-000000000000",
        event_type=payload.EVENT_TYPE,
        occurred_at=1,
        recorded_at=2,
        region="eu-west",
        key="k",
        causation_id=None,
        correlation_id=None,
        producer="tests",
        payload=payload,
    )


def test_an_intact_copy_loads(tmp_path: Path) -> None:
    assert load_schema_dir(copy_schemas(tmp_path)) == envelope_schema()


def test_bad_json_is_refused_with_its_line(tmp_path: Path) -> None:
    folder = copy_schemas(tmp_path)
    path = folder / "notice_received.avsc"
    lines = path.read_text().splitlines()
    lines[4] = lines[4].rstrip(",")  # a missing comma on line 5
    path.write_text("\n".join(lines))
    with pytest.raises(CatalogueError, match=r"notice_received\.avsc: invalid JSON at line 6"):
        load_schema_dir(folder)


def test_a_union_name_without_a_file_is_refused(tmp_path: Path) -> None:
    folder = copy_schemas(tmp_path)
    (folder / "advisory.avsc").unlink()
    with pytest.raises(CatalogueError, match=r"envelope\.avsc: .*Advisory.*advisory\.avsc"):
        load_schema_dir(folder)


def test_a_file_missing_from_the_union_is_refused(tmp_path: Path) -> None:
    folder = copy_schemas(tmp_path)
    shutil.copy(folder / "advisory.avsc", folder / "advisory_two.avsc")
    with pytest.raises(CatalogueError, match=r"advisory_two\.avsc: not listed"):
        load_schema_dir(folder)


def test_a_record_name_that_does_not_match_its_file_is_refused(tmp_path: Path) -> None:
    folder = copy_schemas(tmp_path)
    edit(folder, "advisory.avsc", lambda r: r.update(name="Advice"))
    with pytest.raises(CatalogueError, match=r"advisory\.avsc: record name .*Advice"):
        load_schema_dir(folder)


@pytest.mark.parametrize(
    ("file", "change", "words"),
    [
        (
            "drain_started.avsc",
            lambda r: r["fields"].append(optional("note", None)),
            "field note of spotcap.events.DrainStarted has no doc",
        ),
        (
            "_types.avsc",
            lambda types: types[-1]["fields"][0].pop("doc"),
            "field pool_id of spotcap.types.Allocation has no doc",
        ),
        (
            "fallback_decided.avsc",
            lambda r: r["fields"].append(
                {"name": "refund_eur_micros", "type": "double", "doc": "Refunded."}
            ),
            "refund_eur_micros of spotcap.events.FallbackDecided is money",
        ),
        (
            "rate_card.avsc",
            lambda r: r["fields"].append(
                {"name": "spot_price", "type": ["null", "float"], "default": None, "doc": "x"}
            ),
            "spot_price of spotcap.events.RateCard is money",
        ),
        ("advisory.avsc", lambda r: r.update({"spotcap.topic": "misc"}), "spotcap.topic"),
        ("advisory.avsc", lambda r: r.update({"spotcap.key": "host"}), "spotcap.key"),
        (
            "advisory.avsc",
            lambda r: r["fields"].append({"name": "m", "type": "spotcap.types.Nope", "doc": "x"}),
            "spotcap.types.Nope",
        ),
    ],
)
def test_broken_records_are_refused_naming_the_file(
    tmp_path: Path, file: str, change: Callable[[Any], None], words: str
) -> None:
    folder = copy_schemas(tmp_path)
    path = folder / file
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))
    with pytest.raises(CatalogueError) as raised:
        load_schema_dir(folder)
    assert str(raised.value).startswith(f"{file}: ")
    assert words in str(raised.value)


def test_each_event_type_is_one_row_of_the_catalogue_table() -> None:
    from schemas.catalogue import CATALOGUE_COLUMNS, event_types

    for t in event_types():
        row = t.row()
        assert len(row) == len(CATALOGUE_COLUMNS)
        assert row == (t.name, t.topic, t.key, str(len(t.schema["fields"])), t.summary)
