"""The deciders on Faust, on the real broker, through ``spotcap run streams``.

Runtime equivalence: the recorded scenario through the Faust workers gives the embedded
runner's decisions (de-duplicated by event id, byte for byte). Crash: a worker killed with
kill -9 mid-run and started again restores its tables from their changelogs and goes on; after
de-duplication by event id the decisions are again exactly the embedded runner's, none twice.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from infra import servers
from provider.sim import simulate
from schemas.events import Envelope
from streams.kafka import KafkaLog
from streams.runtime.core import DERIVED_PREFIX, input_topics
from streams.runtime.embedded import EmbeddedRunner, ListSink
from streams.runtime.faust_app import in_sequence
from streams.runtime.journal import RuntimeTopics
from streams.runtime.sequencer import prepare
from streams.topics import topic_name
from streams.writer import EventWriter
from tests.runtime_scenario import CODEC, CONFIG, by_id

SPOTCAP = str(Path(sys.executable).with_name("spotcap"))
WAIT_S = 240.0  # a loaded 2-core machine; Faust starts slowly


@cache
def inputs(region: str) -> tuple[Envelope, ...]:
    """The recorded scenario of `region`: the events on the topics the deciders read, less
    any decisions of the deciders themselves (the decisions topic must hold the workers' alone)."""
    events = simulate(dataclasses.replace(CONFIG, region=region))
    return tuple(
        e
        for e in events
        if e.payload.TOPIC in input_topics() and not e.producer.startswith(DERIVED_PREFIX)
    )


def record(bootstrap: str, region: str) -> list[Envelope]:
    """Write `region`'s scenario to Kafka, then run the embedded runner over that log: the
    decisions the workers must make."""
    prepare(bootstrap, CODEC, RuntimeTopics(region))
    log = KafkaLog(bootstrap)
    writer = EventWriter(log, CODEC, region)
    for event in inputs(region):
        writer.write(event)
    writer.close()
    sink = ListSink()
    EmbeddedRunner(log, CODEC, region, sink).run()
    assert sink.decisions, "the scenario makes no decision: nothing to compare"
    return sink.decisions


class Region:
    """One region's sequencer and workers as ``spotcap run streams`` processes."""

    def __init__(self, bootstrap: str, region: str, logs: Path) -> None:
        self.bootstrap = bootstrap
        self.region = region
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []
        self._consumer = KafkaLog(bootstrap).consumer(
            f"test-{uuid.uuid4().hex[:8]}", [topic_name(region, "decisions")]
        )
        self.decisions: list[Envelope] = []

    def start(self, role: str, name: str, *extra: str) -> subprocess.Popen[bytes]:
        args = [SPOTCAP, "--kafka", self.bootstrap, "--region", self.region, "run", "streams"]
        args += ["--role", role, "--session-timeout-s", "6", "--log-level", "info", *extra]
        err = (self.logs / f"{name}.log").open("ab")
        proc = subprocess.Popen(args, stdout=err, stderr=err, env={**os.environ})
        self.procs.append(proc)
        return proc

    def read_until(self, count: int, timeout_s: float = WAIT_S) -> None:
        """Read decisions until `count` distinct ids are seen (bounded by `timeout_s`)."""
        deadline = time.monotonic() + timeout_s
        while len({d.event_id for d in self.decisions}) < count:
            if time.monotonic() > deadline:
                kinds = Counter(
                    d.event_type for d in {d.event_id: d for d in self.decisions}.values()
                )
                raise AssertionError(
                    f"{len({d.event_id for d in self.decisions})} distinct decisions of {count} "
                    f"after {timeout_s:.0f} s ({dict(kinds)}); logs in {self.logs}"
                )
            for proc in self.procs:
                assert proc.poll() is None or proc.returncode == -signal.SIGKILL, (
                    f"a spotcap run streams process exited with {proc.returncode}; logs in "
                    f"{self.logs}"
                )
            self._poll()

    def settle(self, quiet_s: float = 3.0) -> None:
        """Read whatever else comes within `quiet_s` (a duplicate, or a decision too many)."""
        deadline = time.monotonic() + quiet_s
        while time.monotonic() < deadline:
            self._poll()

    def _poll(self) -> None:
        for r in self._consumer.poll(2000, 0.5):
            event = CODEC.decode(r.value or b"")
            if event.producer.startswith(DERIVED_PREFIX):  # not the simulator's own
                self.decisions.append(event)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._consumer.close()


def assert_same(got: dict[str, bytes], expected: dict[str, bytes]) -> None:
    """The same decisions by id and bytes; otherwise say which kinds differ."""
    if got == expected:
        return

    def kinds(ids: set[str], table: dict[str, bytes]) -> Counter[str]:
        return Counter(CODEC.decode(table[i]).event_type for i in ids)

    extra = kinds(got.keys() - expected.keys(), got)
    missing = kinds(expected.keys() - got.keys(), expected)
    changed = kinds({i for i in got.keys() & expected.keys() if got[i] != expected[i]}, got)
    raise AssertionError(
        f"{len(got)} decisions from Faust, {len(expected)} from the embedded runner; "
        f"extra {dict(extra)}, missing {dict(missing)}, different {dict(changed)}"
    )


@pytest.fixture
def region_factory(kafka: servers.Server, tmp_path: Path) -> Iterator[list[Region]]:
    made: list[Region] = []
    yield made
    for region in made:
        region.stop()


def test_the_faust_workers_make_the_embedded_runners_decisions(
    kafka: servers.Server, tmp_path: Path, region_factory: list[Region]
) -> None:
    expected = by_id(record(kafka.address, "rtf-eq"))
    region = Region(kafka.address, "rtf-eq", tmp_path)
    region_factory.append(region)
    region.start("sequencer", "sequencer")
    region.start("worker", "worker-1")
    region.start("worker", "worker-2")  # two workers share the stage partitions
    region.read_until(len(expected))
    region.settle()
    got = by_id(region.decisions)  # fails if one id carries two different decisions
    assert_same(got, expected)


def test_a_worker_killed_with_kill_9_restores_its_tables_and_makes_no_decision_twice(
    kafka: servers.Server, tmp_path: Path, region_factory: list[Region]
) -> None:
    expected = by_id(record(kafka.address, "rtf-kill"))
    region = Region(kafka.address, "rtf-kill", tmp_path)
    region_factory.append(region)
    region.start("sequencer", "sequencer")
    snapshot = ("--snapshot-every", "200", "--snapshot-interval-s", "0.5")
    worker = region.start("worker", "worker-1", *snapshot)
    region.read_until(len(expected) // 3)
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)
    seen_before_kill = len({d.event_id for d in region.decisions})
    assert seen_before_kill < len(expected), "the kill came too late to test anything"
    region.start("worker", "worker-2", *snapshot)
    region.read_until(len(expected))
    region.settle()
    got = by_id(region.decisions)
    assert_same(got, expected)
    restored = (tmp_path / "worker-2.log").read_text()
    assert "restored at position" in restored, f"no table was restored; see {tmp_path}"


def test_a_record_after_a_hole_waits_for_the_records_before_it() -> None:
    """A worker applies a partition's records only in sequence from its state's next offset:
    one after a hole (fetched before a rebalance and handed over after it, or read by a
    consumer ahead of the snapshot restored) would decide from a state that misses the records
    in between, under the same decision ids."""
    assert in_sequence(10, [10, 11, 12]) == 3
    assert in_sequence(10, [7, 8, 9, 10, 11]) == 5  # copies of records in the state: skipped
    assert in_sequence(10, [12, 13]) == 0  # 10 and 11 missing: nothing is applied
    assert in_sequence(10, [10, 11, 14, 15]) == 2  # up to the hole, not beyond
    assert in_sequence(10, [8, 9, 11]) == 2
    assert in_sequence(None, [57, 58]) == 2  # a state with no snapshot takes what comes first
