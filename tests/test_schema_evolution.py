"""`spotcap schemas check` refuses a change that is not fully compatible and accepts one
that is (DESIGN.md §3: a reader of N reads N-1 and N+1)."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import pytest
from click.testing import CliRunner

from schemas.catalogue import SCHEMA_DIR, CatalogueError, envelope_schema, load_schema_dir
from schemas.codec import RELEASED_DIR, SINGLE_OBJECT_MAGIC, Codec, strip_logical_types
from schemas.compat import (
    CheckResult,
    check_against_released,
    check_compatible,
    release,
    release_report,
)
from schemas.events import ContractPublished, Envelope
from spotcap.cli import main
from tests.factories import example_envelope


@pytest.fixture
def schema_copy(tmp_path: Path) -> Path:
    target = tmp_path / "schemas"
    target.mkdir()
    for path in SCHEMA_DIR.glob("*.avsc"):
        shutil.copy(path, target / path.name)
    return target


def edit(folder: Path, name: str, change: Callable[[dict[str, Any]], None]) -> None:
    path = folder / name
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def field(record: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(f for f in record["fields"] if f["name"] == name)
    return found


def check(folder: Path) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["schemas", "check", "--schemas", str(folder)])
    return result.exit_code, result.output


def test_the_working_schemas_are_compatible_with_the_last_release() -> None:
    result = check_against_released(envelope_schema())
    assert result.released_version is not None, "run `spotcap schemas release` once"
    assert result.compatible, [str(p) for p in result.problems]


def test_unchanged_schemas_pass(schema_copy: Path) -> None:
    code, output = check(schema_copy)
    assert code == 0, output
    assert "ok" in output


def test_removing_a_field_without_default_is_refused(schema_copy: Path) -> None:
    edit(
        schema_copy,
        "notice_received.avsc",
        lambda r: r["fields"].remove(field(r, "pool_id")),
    )
    code, output = check(schema_copy)
    assert code == 1
    assert "incompatible" in output
    assert "forward" in output  # a reader of N cannot fill pool_id from N+1 records


def test_changing_a_field_type_is_refused(schema_copy: Path) -> None:
    edit(
        schema_copy,
        "checkpoint_written.avsc",
        lambda r: field(r, r["fields"][0]["name"]).update(type="int"),
    )
    code, output = check(schema_copy)
    assert code == 1, output
    assert "type" in output.lower()


def test_adding_a_field_without_default_is_refused(schema_copy: Path) -> None:
    edit(
        schema_copy,
        "notice_received.avsc",
        lambda r: r["fields"].append({"name": "hall", "type": "string", "doc": "Hall."}),
    )
    code, output = check(schema_copy)
    assert code == 1
    assert "backward" in output


def test_adding_an_optional_field_is_accepted(schema_copy: Path) -> None:
    edit(
        schema_copy,
        "notice_received.avsc",
        lambda r: r["fields"].append(
            {"name": "hall", "type": ["null", "string"], "default": None, "doc": "Hall."}
        ),
    )
    code, output = check(schema_copy)
    assert code == 0, output
    assert "fully compatible" in output


def test_adding_an_event_type_is_accepted_and_removing_one_refused(schema_copy: Path) -> None:
    (schema_copy / "game_day_started.avsc").write_text(
        json.dumps(
            {
                "type": "record",
                "name": "GameDayStarted",
                "namespace": "spotcap.events",
                "doc": "A quarterly game day started.",
                "spotcap.topic": "decisions",
                "spotcap.key": "region",
                "fields": [{"name": "game_day_id", "type": "string", "doc": "The game day."}],
            }
        )
    )
    edit(
        schema_copy,
        "envelope.avsc",
        lambda r: field(r, "payload")["type"].append("spotcap.events.GameDayStarted"),
    )
    code, output = check(schema_copy)
    assert code == 0, output
    assert "game" in output.lower()

    edit(
        schema_copy,
        "envelope.avsc",
        lambda r: field(r, "payload")["type"].remove("spotcap.events.Advisory"),
    )
    code, output = check(schema_copy)
    assert code == 1, output


def test_release_records_versions_and_refuses_incompatible(tmp_path: Path) -> None:
    released = tmp_path / "released"
    current = envelope_schema()
    assert release(current, released)[0] == 1
    assert release(current, released)[0] == 1  # unchanged: no new version
    broken = json.loads(json.dumps(current))
    field(broken, "region")["type"] = "long"
    assert not check_compatible(current, broken).compatible
    with pytest.raises(ValueError, match="incompatible"):
        release(broken, released)


def release_json(released: Path) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(
        main, ["schemas", "release", "--released-dir", str(released), "--json"]
    )
    report: dict[str, Any] = json.loads(result.stdout)
    return result.exit_code, report


def test_release_json_gives_the_version_and_its_file(tmp_path: Path) -> None:
    released = tmp_path / "released"
    code, report = release_json(released)
    assert code == 0, report
    path = released / "envelope-v0001.avsc"
    assert report == {"ok": True, "version": 1, "path": str(path), "new": True}
    assert json.loads(path.read_text()) == envelope_schema()
    code, report = release_json(released)  # unchanged: the same version, nothing new
    assert (code, report["version"], report["new"]) == (0, 1, False)

    broken = envelope_schema()
    field(broken, "region")["type"] = "long"
    path.write_text(json.dumps(broken))
    code, report = release_json(released)
    assert code == 1
    assert report["ok"] is False and "incompatible" in report["error"]
    assert sorted(p.name for p in released.iterdir()) == ["envelope-v0001.avsc"]


def test_the_console_script_exits_non_zero_on_a_breaking_change(schema_copy: Path) -> None:
    edit(schema_copy, "notice_received.avsc", lambda r: field(r, "pool_id").update(type="long"))
    spotcap = Path(sys.executable).parent / "spotcap"
    done = subprocess.run(
        [str(spotcap), "schemas", "check", "--schemas", str(schema_copy)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "incompatible" in done.stderr


# -- a rename, by expand/contract (docs/architecture.md, "Schema evolution") -------------------

RELEASE_1 = json.loads((RELEASED_DIR / "envelope-v0001.avsc").read_text())
RELEASE_2 = json.loads((RELEASED_DIR / "envelope-v0002.avsc").read_text())
RELEASE_3 = json.loads((RELEASED_DIR / "envelope-v0003.avsc").read_text())
OLD, NEW = "tolerated_interruption_per_h", "tolerated_interruptions_per_h"


def contract_record(envelope: dict[str, Any]) -> dict[str, Any]:
    payload = field(envelope, "payload")["type"]
    found: dict[str, Any] = next(b for b in payload if b["name"] == "ContractPublished")
    return found


def published(rate: float) -> Envelope:
    envelope = example_envelope("contract_published")
    assert isinstance(envelope.payload, ContractPublished)
    return dataclasses.replace(
        envelope,
        payload=dataclasses.replace(envelope.payload, tolerated_interruptions_per_h=rate),
    )


def test_release_2_renames_the_rate_fully_compatibly_both_ways() -> None:
    result = check_compatible(RELEASE_1, RELEASE_2)
    assert result.compatible, [str(p) for p in result.problems]
    assert result.changed and result.added_event_types == ()


def test_release_3_only_adds_the_agent_and_actuator_event_types() -> None:
    result = check_compatible(RELEASE_2, RELEASE_3)
    assert result.compatible, [str(p) for p in result.problems]
    assert sorted(result.added_event_types) == sorted(
        f"spotcap.events.{name}"
        for name in (
            "ActuationRefused",
            "CapacityReleased",
            "EvictionAttempted",
            "CheckpointTriggered",
        )
    )


def test_a_plain_rename_with_an_alias_would_be_only_backward_compatible() -> None:
    renamed = json.loads(json.dumps(RELEASE_1))
    rate = field(contract_record(renamed), OLD)
    rate.update(name=NEW, aliases=[OLD])
    # A reader of N+1 finds the old name through the alias (backward holds); a reader of N
    # finds no field of its name in N+1's ContractPublished, so the branch does not resolve.
    problems = check_compatible(RELEASE_1, renamed).problems
    assert problems and {p.direction for p in problems} == {"forward"}


def test_a_record_of_release_1_reads_into_the_new_field() -> None:
    old_writer = Codec(reader_schema=RELEASE_1, known_schemas=())
    data = old_writer.encode(published(0.05))
    decoded = Codec().decode(data).payload
    assert isinstance(decoded, ContractPublished)
    assert decoded.tolerated_interruptions_per_h == 0.05


def test_a_reader_of_release_1_reads_new_records() -> None:
    data = Codec().encode(published(0.08))
    assert data[:2] == SINGLE_OBJECT_MAGIC
    writer = fastavro.parse_schema(strip_logical_types(envelope_schema()), _force=True)
    reader = fastavro.parse_schema(strip_logical_types(RELEASE_1), _force=True)
    record: Any = fastavro.schemaless_reader(
        io.BytesIO(data[10:]), writer, reader, return_record_name=True
    )
    name, body = record["payload"]
    assert name == "spotcap.events.ContractPublished"
    assert body[OLD] == 0.08 and NEW not in body


def test_the_generated_class_writes_both_fields_and_prefers_the_new_one() -> None:
    payload = published(0.5).payload
    assert isinstance(payload, ContractPublished)
    written = payload.to_avro()
    assert written[OLD] == written[NEW] == 0.5
    assert ContractPublished.from_avro({**written, NEW: 0.7}).tolerated_interruptions_per_h == 0.7
    assert ContractPublished.from_avro({**written, NEW: None}).tolerated_interruptions_per_h == 0.5


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: field(r, OLD).update({"spotcap.replaced_by": "nope"}), "must name another"),
        (lambda r: field(r, NEW).update(type=["null", "long"]), 'must be ["null", "double"]'),
        (lambda r: field(r, OLD).pop("default"), "must keep a default"),
    ],
)
def test_a_replacement_that_could_lose_the_value_is_refused(
    schema_copy: Path, change: Callable[[dict[str, Any]], None], message: str
) -> None:
    edit(schema_copy, "contract_published.avsc", change)
    with pytest.raises(CatalogueError, match=re.escape(message)):
        load_schema_dir(schema_copy)


def test_a_compatible_result_in_a_sentence() -> None:
    assert CheckResult(None, True, ("a",), ()).summary() == (
        "No released schema yet: run `spotcap schemas release`."
    )
    assert CheckResult(4, False, (), ()).summary() == "the schemas match released version 4."
    changed = CheckResult(4, True, ("drill_started", "drill_finished"), ()).summary()
    assert changed.startswith("fully compatible with released version 4 (new event types: "
                              "drill_started, drill_finished).")  # fmt: skip
    assert "none" in CheckResult(4, True, (), ()).summary()


def test_the_release_report_says_whether_this_call_released(tmp_path: Path) -> None:
    released = tmp_path / "released"
    first = release_report(envelope_schema(), released)
    path = str(released / "envelope-v0001.avsc")
    assert first == {"ok": True, "version": 1, "path": path, "new": True}
    assert release_report(envelope_schema(), released) == {**first, "new": False}
