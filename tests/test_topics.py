"""`spotcap topics apply` creates the region's topics with their configuration, idempotently,
on real Kafka and in the embedded log."""

from __future__ import annotations

import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource

from infra.servers import Server
from spotcap.cli import main
from streams.log import TopicChange
from streams.runs import RunMarker, runs_dir
from streams.topics import (
    EVENT_RETENTION_MS,
    LOGICAL_TOPICS,
    applied_rows,
    end_offset_rows,
    end_offsets_json,
)


def apply(args: list[str]) -> list[dict[str, str]]:
    result = CliRunner().invoke(main, [*args, "topics", "apply", "--json"])
    assert result.exit_code == 0, result.output
    changes: list[dict[str, str]] = json.loads(result.output)
    return changes


@pytest.fixture(params=["embedded", "kafka"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> list[str]:
    region = f"t{uuid.uuid4().hex[:8]}"
    if request.param == "embedded":
        return ["--home", str(tmp_path), "--region", region]
    server: Server = request.getfixturevalue("kafka")
    return ["--kafka", server.address, "--region", region]


def test_apply_creates_every_topic_once(where: list[str]) -> None:
    region = where[where.index("--region") + 1]
    first = apply(where)
    assert sorted(c["topic"] for c in first) == sorted(f"{region}.{t.name}" for t in LOGICAL_TOPICS)
    assert {c["action"] for c in first} == {"created"}
    assert {c["action"] for c in apply(where)} == {"unchanged"}


def retention(admin: AdminClient, topic: str) -> str:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    (configs,) = [f.result(timeout=30) for f in admin.describe_configs([resource]).values()]
    value: str = configs["retention.ms"].value
    return value


def test_list_shows_partitions_and_records(where: list[str]) -> None:
    region = where[where.index("--region") + 1]
    before = CliRunner().invoke(main, [*where, "topics", "list", "--json"])
    assert before.exit_code == 0, before.output
    assert not any(row["exists"] for row in json.loads(before.stdout))
    apply(where)
    result = CliRunner().invoke(main, [*where, "topics", "list", "--json"])
    assert result.exit_code == 0, (result.output, result.exception)
    rows = {row["topic"]: row for row in json.loads(result.stdout)}
    assert rows[f"{region}.lifecycle"] == {
        "topic": f"{region}.lifecycle",
        "exists": True,
        "partitions": 12,
        "records": 0,
        "end_offsets": {str(n): 0 for n in range(12)},
        "last_run": None,
    }


def test_apply_restores_a_changed_config_on_kafka(kafka: Server) -> None:
    region = f"t{uuid.uuid4().hex[:8]}"
    args = ["--kafka", kafka.address, "--region", region]
    apply(args)
    conf: dict[str, Any] = {
        "bootstrap.servers": kafka.address,
        "logger": logging.getLogger("tests"),
    }
    admin = AdminClient(conf)
    topic = f"{region}.lifecycle"
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    # The broker applies a config change from the metadata log shortly after acknowledging it.
    deadline = time.monotonic() + 30
    while retention(admin, topic) != "1000" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert retention(admin, topic) == "1000"

    changes = {c["topic"]: c for c in apply(args)}
    assert changes[topic]["action"] == "updated"
    assert f"retention.ms={EVENT_RETENTION_MS}" in changes[topic]["detail"]
    deadline = time.monotonic() + 30
    while retention(admin, topic) != str(EVENT_RETENTION_MS) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert retention(admin, topic) == str(EVENT_RETENTION_MS)
    compacted = ConfigResource(ConfigResource.Type.TOPIC, f"{region}.schemas")
    (schema_configs,) = [f.result(timeout=30) for f in admin.describe_configs([compacted]).values()]
    assert schema_configs["cleanup.policy"].value == "compact"


def test_an_unreachable_kafka_fails_with_a_clear_message(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["--kafka", "127.0.0.1:9", "topics", "apply"])
    assert result.exit_code == 1
    assert "did not answer" in result.output or "did not answer" in (result.stderr or "")


def test_every_event_topic_of_the_catalogue_is_a_region_topic() -> None:
    from schemas.catalogue import TOPICS, event_types
    from streams.topics import LOGICAL_NAMES

    # Every topic carries catalogue events but the schemas and audit topics (not Avro events).
    assert {t.name for t in LOGICAL_TOPICS if t.events} == TOPICS
    assert {"schemas", "audit"} == LOGICAL_NAMES - TOPICS
    assert {t.topic for t in event_types()} <= LOGICAL_NAMES


def test_run_markers_live_beside_their_log(tmp_path: Path) -> None:
    home, log_dir = tmp_path / "home", tmp_path / "home" / "log"
    assert runs_dir(home, log_dir, None) == log_dir / "_runs"
    kafka = runs_dir(home, log_dir, "broker-1:9092,broker-2:9092")
    assert kafka == home / "runs" / "kafka-broker-1_9092_broker-2_9092"


def test_the_topics_in_rows_and_json() -> None:
    changes = [TopicChange("r.lifecycle", "created"), TopicChange("r.schemas", "updated", "x")]
    assert applied_rows("r", changes) == [
        ("r.lifecycle", "12", "400 d", "delete", "created", ""),
        ("r.schemas", "1", "forever", "compact", "updated", "x"),
    ]
    ends_of = {"r.market": {0: 1200, 1: 3}, "r.usage": None}
    assert end_offset_rows(ends_of) == [
        ("r.market", "2", "1,203", "1,200 3"),
        ("r.usage", "-", "missing: run `spotcap topics apply`", ""),
    ]
    run = RunMarker("r", "spotcap demo", 1, "h", "9", "2026-01-01T00:00:00Z", outcome="finished")
    market, usage = end_offsets_json(ends_of, run)
    assert market["records"] == 1203 and market["end_offsets"] == {"0": 1200, "1": 3}
    assert market["last_run"] == {**run.as_json(), "state": "finished"}
    assert usage == {
        "topic": "r.usage",
        "exists": False,
        "partitions": 0,
        "records": 0,
        "end_offsets": {},
        "last_run": market["last_run"],
    }
    assert end_offsets_json(ends_of, None)[0]["last_run"] is None


def test_a_history_older_than_its_retention_stays_on_kafka(kafka: Server) -> None:
    """Records stamped with an event time long past the topic's retention (a replay, a backfill,
    a demo of a past month) are kept: retention counts from when the broker appended them. A
    topic left on CreateTime, written the same way, loses them at the broker's next retention
    check (every 5 s on the test broker), which shows the check would catch a regression."""
    from streams.kafka import KafkaLog
    from streams.log import TopicSpec

    log = KafkaLog(kafka.address)
    region = f"t{uuid.uuid4().hex[:8]}"
    day_ms = 86_400_000
    ours = TopicSpec(f"{region}.old-history", 1, 30 * day_ms)
    control = TopicSpec(f"{region}.create-time", 1, 30 * day_ms,
                        extra_config={"message.timestamp.type": "CreateTime"})  # fmt: skip
    try:
        log.apply_topics([ours, control])
        producer = log.producer()
        long_ago_ms = int(time.time() * 1000) - 60 * day_ms
        for spec in (ours, control):
            for n in range(20):
                producer.produce(spec.name, b"x", key=b"k", timestamp_ms=long_ago_ms + n)
        producer.flush(30.0)
        producer.close()
        deadline = time.monotonic() + 120
        while log.end_offsets(control.name) != {0: 20} or _low(kafka, control.name) < 20:
            assert time.monotonic() < deadline, "the CreateTime topic was never cleaned up"
            time.sleep(1.0)
        # The control lost its records to retention; ours, written the same way, keeps them.
        assert log.end_offsets(ours.name) == {0: 20} and _low(kafka, ours.name) == 0
    finally:
        log.close()


def _low(kafka: Server, topic: str) -> int:
    """The first offset partition 0 of `topic` still holds (its low watermark)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": kafka.address, "group.id": f"w-{uuid.uuid4()}",
                         "logger": logging.getLogger("tests")})  # fmt: skip
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        return int(low)
    finally:
        consumer.close()
