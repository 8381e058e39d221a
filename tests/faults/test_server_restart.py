"""A server killed with SIGKILL and started again from its folder comes back on the ports it had
(`infra.servers.process.ports_of`), so that a client that knew its address reconnects by itself:
a Kafka producer made before the kill delivers after the restart, without being made again."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from infra import servers
from infra.servers.process import alive
from streams.kafka import KafkaLog
from streams.log import TopicSpec

pytestmark = pytest.mark.slow


def _kill(folder: Path) -> None:
    pid = int(json.loads((folder / "server.json").read_text())["pid"])
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid)


@pytest.mark.parametrize("name", ["nats", "postgres"])
def test_a_killed_server_comes_back_on_its_address(name: str, tmp_path: Path) -> None:
    start = {"nats": servers.start_nats, "postgres": servers.start_postgres}[name]
    first = start(tmp_path / name)
    try:
        _kill(tmp_path / name)
        again = start(tmp_path / name)
        assert again.pid != first.pid and again.address == first.address
    finally:
        servers.stop(tmp_path / name)


def test_a_kafka_client_reconnects_to_a_restarted_broker(tmp_path: Path) -> None:
    folder = tmp_path / "kafka"
    first = servers.start_kafka(folder)
    try:
        log = KafkaLog(first.address)
        topic = f"restart-{uuid.uuid4().hex[:8]}"
        log.apply_topics([TopicSpec(topic, partitions=1, retention_ms=-1)])
        producer = log.producer()
        producer.produce(topic, b"before", key=b"k")
        assert len(producer.flush(60)) == 1
        _kill(folder)
        again = servers.start_kafka(folder)
        assert again.address == first.address
        producer.produce(topic, b"after", key=b"k")  # the same producer, no new address
        assert len(producer.flush(120)) == 1
        producer.close()
        assert log.end_offsets(topic) == {0: 2}
    finally:
        servers.stop(folder)
