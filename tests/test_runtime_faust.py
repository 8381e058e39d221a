"""The deciders on Faust, on the real broker, through ``spotcap run streams``.

Runtime equivalence: the recorded scenario through the Faust workers gives the embedded
runner's decisions (de-duplicated by event id, byte for byte). Crash: a worker killed with
kill -9 mid-run and started again restores its tables from their changelogs and goes on; after
de-duplication by event id the decisions are again exactly the embedded runner's, none twice.
"""

from __future__ import annotations

import dataclasses
import json
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
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from infra import servers
from schemas.events import Envelope
from sim import simulate
from streams.kafka import KafkaLog
from streams.runtime.core import DERIVED_PREFIX, input_topics
from streams.runtime.embedded import EmbeddedRunner, ListSink
from streams.runtime.faust_app import STALLED_EXIT, in_sequence
from streams.runtime.journal import Header, RuntimeTopics
from streams.runtime.sequencer import deciders_behind, prepare
from streams.topics import topic_name
from streams.writer import EventWriter
from tests.runtime_scenario import CODEC, CONFIG, by_id

SPOTCAP = str(Path(sys.executable).with_name("spotcap"))
WAIT_S = 240.0  # a loaded 2-core machine; Faust starts slowly
SLOW_BUFFER = Path(__file__).parent / "faults" / "slow_faust_buffer"
STALLED_FETCH = Path(__file__).parent / "faults" / "stalled_faust_fetch"


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
    """One region's sequencer and workers as ``spotcap run streams`` processes.

    A worker that exits because its watch found it stalled (`STALLED_EXIT`) is started again,
    as the live region's supervisor does (`restarted`: its name and how many distinct
    decisions were seen by then); the new one gets none of the first one's own `env`."""

    def __init__(
        self, bootstrap: str, region: str, logs: Path, env: dict[str, str] | None = None
    ) -> None:
        self.bootstrap = bootstrap
        self.region = region
        self.logs = logs
        self.env = {**os.environ, **(env or {})}
        self.procs: list[subprocess.Popen[bytes]] = []
        self.started: dict[int, tuple[str, str, tuple[str, ...]]] = {}
        self.restarted: list[tuple[str, int]] = []
        self._consumer = KafkaLog(bootstrap).consumer(
            f"test-{uuid.uuid4().hex[:8]}", [topic_name(region, "decisions")]
        )
        self.decisions: list[Envelope] = []

    def start(
        self, role: str, name: str, *extra: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        args = [SPOTCAP, "--kafka", self.bootstrap, "--region", self.region, "run", "streams"]
        args += ["--role", role, "--session-timeout-s", "6", "--log-level", "info", *extra]
        err = (self.logs / f"{name}.log").open("ab")
        proc = subprocess.Popen(args, stdout=err, stderr=err, env={**self.env, **(env or {})})
        self.procs.append(proc)
        self.started[proc.pid] = (role, name, extra)
        return proc

    def _supervise(self) -> None:
        for proc in list(self.procs):
            if proc.poll() == STALLED_EXIT and proc.pid in self.started:
                role, name, extra = self.started.pop(proc.pid)
                self.restarted.append((name, len({d.event_id for d in self.decisions})))
                self.start(role, f"{name}-again", *extra)
                continue
            assert proc.poll() is None or proc.returncode in (-signal.SIGKILL, STALLED_EXIT), (
                f"a spotcap run streams process exited with {proc.returncode}; logs in {self.logs}"
            )

    def read_until(self, expected: dict[str, bytes], share: float = 1.0) -> None:
        """Read decisions until `share` of the `expected` ids are seen (bounded by WAIT_S);
        on time-out, say which decisions are missing."""
        count = int(len(expected) * share)
        deadline = time.monotonic() + WAIT_S
        while len({d.event_id for d in self.decisions}) < count:
            if time.monotonic() > deadline:
                seen = {d.event_id for d in self.decisions}
                missing = [CODEC.decode(expected[i]) for i in expected.keys() - seen]
                missing.sort(key=lambda e: (e.occurred_at, e.event_type, e.key))
                first = "; ".join(
                    f"{e.event_type} key={e.key} at={e.occurred_at} cause={e.causation_id}"
                    for e in missing[:8]
                )
                raise AssertionError(
                    f"{len(seen)} distinct decisions of {count} after {WAIT_S:.0f} s; missing "
                    f"{dict(Counter(e.event_type for e in missing))}, first: {first}; "
                    f"logs in {self.logs}"
                )
            self._supervise()
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


def _read(consumer: Consumer, topic: str, partition: int, end: int) -> Iterator[Any]:
    """The records of `topic`:`partition` before offset `end`."""
    consumer.assign([TopicPartition(topic, partition, 0)])
    deadline = time.monotonic() + 60
    offset = -1
    while offset < end - 1:
        assert time.monotonic() < deadline, f"{topic}:{partition} not readable up to {end}"
        for m in consumer.consume(500, 1.0):
            assert m.error() is None, m.error()
            offset = m.offset() or 0
            if offset < end:
                yield m


def uncovered_commits(bootstrap: str, region: str) -> list[str]:
    """Stage partitions whose committed offset is past a record that the partition's stored
    snapshot does not cover: a restarted worker would never apply that record."""
    topics = RuntimeTopics(region)
    sources = {
        "pool": topics.pool,
        "scorer": topics.scorer,
        "workload": topics.workload,
        "actuator": topics.actuator,
    }
    group = Consumer({"bootstrap.servers": bootstrap, "group.id": topics.app_id})
    reader = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "inspect", "enable.auto.commit": False}
    )
    problems: list[str] = []
    try:
        for stage, topic in sources.items():
            for partition in range(topics.stage_partitions[stage]):
                tp = TopicPartition(topic, partition)
                committed = group.committed([tp], timeout=10)[0].offset
                if committed <= 0:
                    continue  # nothing committed
                changelog = topics.changelog(stage)
                end = reader.get_watermark_offsets(TopicPartition(changelog, partition), 10)[1]
                meta_key = f"{partition}/{stage}/meta".encode()
                snapshot = -1
                for m in _read(reader, changelog, partition, end):
                    if m.key() == meta_key:
                        value = m.value()
                        snapshot = json.loads(value)["position"] if value else -1
                highest = max(
                    Header.decode(dict(m.headers() or [])).position
                    for m in _read(reader, topic, partition, committed)
                )
                if highest > snapshot:
                    problems.append(
                        f"{topic}:{partition} committed at offset {committed}, past a record at "
                        f"position {highest}; the stored snapshot is at position {snapshot}"
                    )
    finally:
        group.close()
        reader.close()
    return problems


def stored_position(bootstrap: str, region: str, stage: str, partition: int) -> int:
    """The position of `stage` partition `partition`'s stored snapshot (-1: none)."""
    topics = RuntimeTopics(region)
    reader = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "inspect", "enable.auto.commit": False}
    )
    try:
        changelog = TopicPartition(topics.changelog(stage), partition)
        end = reader.get_watermark_offsets(changelog, 10)[1]
        position = -1
        for m in _read(reader, changelog.topic, partition, end):
            if m.key() == f"{partition}/{stage}/meta".encode():
                value = m.value()
                position = json.loads(value)["position"] if value else -1
        return position
    finally:
        reader.close()


def actuator_input(bootstrap: str, region: str) -> tuple[list[Header], int]:
    """The headers of the actuator stage's input topic and its end offset."""
    topic = RuntimeTopics(region).actuator
    reader = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "inspect", "enable.auto.commit": False}
    )
    try:
        end = reader.get_watermark_offsets(TopicPartition(topic, 0), 10)[1]
        return [Header.decode(dict(m.headers() or [])) for m in _read(reader, topic, 0, end)], end
    finally:
        reader.close()


def commit_for_the_workers(bootstrap: str, topic: str, offset: int) -> None:
    """Commit `offset` of `topic`:0 for the workers' group, once the group is empty (a killed
    worker stays a member until its session times out, and the broker refuses the commit)."""
    region = topic.split(".", 1)[0]
    group = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": RuntimeTopics(region).app_id,
            "enable.auto.commit": False,
        }
    )
    deadline = time.monotonic() + 120
    try:
        while True:
            try:
                group.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
                return
            except KafkaException as error:
                assert time.monotonic() < deadline, f"could not commit {topic}: {error}"
                time.sleep(1.0)
    finally:
        group.close()


def has_commits(bootstrap: str, region: str) -> bool:
    """Whether the workers' group has committed an offset of a stage topic."""
    topics = RuntimeTopics(region)
    group = Consumer({"bootstrap.servers": bootstrap, "group.id": topics.app_id})
    try:
        tps = [
            TopicPartition(topic, p)
            for topic, n in (
                (topics.pool, topics.pool_partitions),
                (topics.workload, topics.workload_partitions),
                (topics.scorer, 1),
                (topics.actuator, 1),
            )
            for p in range(n)
        ]
        return any(tp.offset > 0 for tp in group.committed(tps, timeout=10))
    finally:
        group.close()


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
    region.read_until(expected)
    region.settle()
    got = by_id(region.decisions)  # fails if one id carries two different decisions
    assert_same(got, expected)


def test_the_deciders_say_they_are_done_only_once_every_decision_is_on_the_log(
    kafka: servers.Server, tmp_path: Path, region_factory: list[Region]
) -> None:
    """`deciders_behind`, the live run's end: [] only once the sequencer, the router and the
    workers committed the log's end. Then the workers are killed, so nothing more can come:
    the log must already hold every decision."""
    expected = by_id(record(kafka.address, "rtf-done"))
    log, topics = KafkaLog(kafka.address), RuntimeTopics("rtf-done")
    before = deciders_behind(log, CODEC, topics)
    assert before and all(line.startswith("the sequencer at 0 of ") for line in before)
    region = Region(kafka.address, "rtf-done", tmp_path)
    region_factory.append(region)
    region.start("sequencer", "sequencer")
    worker = region.start("worker", "worker-1")
    deadline = time.monotonic() + WAIT_S
    while behind := deciders_behind(log, CODEC, topics):
        assert time.monotonic() < deadline, f"still behind: {behind}; logs in {tmp_path}"
        assert worker.poll() is None, f"the worker exited; logs in {tmp_path}"
        time.sleep(1.0)
    for proc in region.procs:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    region.read_until(expected)
    region.settle()
    assert_same(by_id(region.decisions), expected)


@pytest.mark.parametrize("fault", ["none", "slow send buffer", "early kill"])
def test_a_worker_killed_with_kill_9_restores_its_tables_and_makes_no_decision_twice(
    kafka: servers.Server, tmp_path: Path, region_factory: list[Region], fault: str
) -> None:
    """`early kill`: before most partitions have a snapshot, so the restarted worker starts
    them from their first record while Faust, rebalancing, drops records it had fetched
    (the worker reads those from Kafka itself)."""
    name = {"none": "rtf-kill", "slow send buffer": "rtf-kill-slow"}.get(fault, "rtf-kill-early")
    expected = by_id(record(kafka.address, name))
    env = {}
    if fault == "slow send buffer":  # Faust's flush then gives up before its buffer is empty
        env["PYTHONPATH"] = os.pathsep.join([str(SLOW_BUFFER), os.environ.get("PYTHONPATH", "")])
    region = Region(kafka.address, name, tmp_path, env)
    region_factory.append(region)
    region.start("sequencer", "sequencer")
    # Snapshots and commits often, so that the kill, right after a third of the decisions,
    # comes mid-run however fast the machine is: after a commit (or it tests nothing the
    # restart would not do anyway) and before the last decision.
    snapshot = ("--snapshot-every", "200", "--snapshot-interval-s", "0.5")
    worker = region.start("worker", "worker-1", *snapshot, "--commit-interval-s", "0.2")
    region.read_until(expected, share=1 / 20 if fault == "early kill" else 1 / 3)
    deadline = time.monotonic() + WAIT_S
    while not has_commits(kafka.address, name):
        assert time.monotonic() < deadline, f"worker-1 committed nothing; logs in {tmp_path}"
        region.settle(0.2)
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)
    seen_before_kill = len({d.event_id for d in region.decisions})
    assert seen_before_kill < len(expected), "the kill came too late to test anything"
    assert uncovered_commits(kafka.address, name) == []
    region.start("worker", "worker-2", *snapshot)
    region.read_until(expected)
    region.settle()
    got = by_id(region.decisions)
    assert_same(got, expected)
    restored = (tmp_path / "worker-2.log").read_text()
    assert "restored at position" in restored, f"no table was restored; see {tmp_path}"


def test_the_actuator_stage_reads_the_records_faust_skipped_past_its_snapshot(
    kafka: servers.Server, tmp_path: Path, region_factory: list[Region]
) -> None:
    """Faust can commit a partition's offset past records the stage never applied: at a
    rebalance or a restart it drops, and acknowledges, the records it fetched under an older
    consumer generation or while its tables recovered, and it commits a run of acknowledged
    offsets even after one that is not. Here the actuator stage's input is committed up to its
    end while its worker is down, past workload decisions that its stored snapshot has not
    applied and that the workload stage, stored past them, will not make again. The worker
    started next must notice the hole between its snapshot and the committed offset and read
    those records itself: every decision is made, as the embedded runner makes them."""
    name = "rtf-actuator-hole"
    expected = by_id(record(kafka.address, name))
    topics = RuntimeTopics(name)
    region = Region(kafka.address, name, tmp_path)
    region_factory.append(region)
    region.start("sequencer", "sequencer")
    snapshot = ("--snapshot-every", "200", "--snapshot-interval-s", "0.5")
    at_stake: list[Header] = []
    for attempt in range(1, 4):  # until a kill leaves decisions at stake (nearly always once)
        worker = region.start(
            "worker", f"worker-{attempt}", *snapshot, "--commit-interval-s", "0.2"
        )
        region.read_until(expected, share=attempt / 6)
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
        applied = stored_position(kafka.address, name, "actuator", 0)
        made = [
            stored_position(kafka.address, name, "workload", p)
            for p in range(topics.workload_partitions)
        ]
        headers, end = actuator_input(kafka.address, name)
        at_stake = [
            h
            for h in headers
            if h.kind == "decision" and h.source is not None and applied < h.position
            and h.position <= made[h.source]
        ]  # fmt: skip
        if at_stake:
            break
    assert at_stake, f"no kill left a workload decision at stake; logs in {tmp_path}"
    assert len({d.event_id for d in region.decisions}) < len(expected), "killed too late"
    commit_for_the_workers(kafka.address, topics.actuator, end)
    region.start("worker", "worker-last", *snapshot)
    region.read_until(expected)
    region.settle()
    assert_same(by_id(region.decisions), expected)


def commit_stage_ends(bootstrap: str, region: str) -> None:
    """Commit the end of every stage topic partition for the workers' group, once the group is
    empty (as `commit_for_the_workers`)."""
    topics = RuntimeTopics(region)
    group = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": topics.app_id, "enable.auto.commit": False}
    )
    try:
        ends = []
        for stage, topic in (
            ("pool", topics.pool),
            ("scorer", topics.scorer),
            ("workload", topics.workload),
            ("actuator", topics.actuator),
        ):
            for partition in range(topics.stage_partitions[stage]):
                tp = TopicPartition(topic, partition)
                ends.append(TopicPartition(topic, partition, group.get_watermark_offsets(tp)[1]))
        deadline = time.monotonic() + 120
        while True:
            try:
                group.commit(offsets=ends, asynchronous=False)
                return
            except KafkaException as error:
                assert time.monotonic() < deadline, f"could not commit: {error}"
                time.sleep(1.0)
    finally:
        group.close()


def test_a_stage_reads_the_records_committed_past_its_state_at_a_partitions_tail(
    kafka: servers.Server, tmp_path: Path, region_factory: list[Region]
) -> None:
    """A hole is seen when a record after it arrives; at a partition's tail none does. Here
    the worker is killed mid-run, the sequencer writes the rest of every stage's input while
    no worker runs, and every stage partition is committed up to its end (what Faust does with
    records it drops at a rebalance or a restart): the pool, scorer and workload partitions
    will never be given another record. The worker started next must see, on its own, that
    the group committed records its restored state does not hold, and read them itself:
    every decision is made, as the embedded runner makes them."""
    name = "rtf-tail-hole"
    expected = by_id(record(kafka.address, name))
    log, topics = KafkaLog(kafka.address), RuntimeTopics(name)
    region = Region(kafka.address, name, tmp_path)
    region_factory.append(region)
    region.start("sequencer", "sequencer")
    snapshot = ("--snapshot-every", "200", "--snapshot-interval-s", "0.5")
    worker = region.start("worker", "worker-1", *snapshot, "--commit-interval-s", "0.2")
    region.read_until(expected, share=1 / 3)
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)
    assert len({d.event_id for d in region.decisions}) < len(expected), "killed too late"
    deadline = time.monotonic() + WAIT_S
    while any(not line.startswith("the workers") for line in deciders_behind(log, CODEC, topics)):
        assert time.monotonic() < deadline, f"the sequencer did not finish; logs in {tmp_path}"
        time.sleep(1.0)
    commit_stage_ends(kafka.address, name)
    region.start("worker", "worker-2", *snapshot)
    region.read_until(expected)
    region.settle()
    assert_same(by_id(region.decisions), expected)
    said = (tmp_path / "worker-2.log").read_text()
    assert "committed but never applied" in said, f"no tail was read; see {tmp_path}"


def test_a_worker_whose_consumer_stops_fetching_exits_and_its_restart_makes_every_decision(
    kafka: servers.Server, tmp_path: Path, region_factory: list[Region]
) -> None:
    """Faust's consumer can stop fetching a partition after a rebalance or a reconnect while
    the group and the broker are well (faust-streaming #629; seen here after a network
    fault's heal): no error, no decision. Here it stops after a few hundred records. The
    worker's watch sees records waiting with none delivered for --stall-s while the broker
    answers, says so and exits; started again, as a supervisor does, the worker restores its
    snapshots and makes every decision, as the embedded runner makes them."""
    name = "rtf-stall"
    expected = by_id(record(kafka.address, name))
    region = Region(kafka.address, name, tmp_path)
    region_factory.append(region)
    region.start("sequencer", "sequencer")
    fault = {"PYTHONPATH": os.pathsep.join([str(STALLED_FETCH), os.environ.get("PYTHONPATH", "")])}
    fault["SPOTCAP_TEST_STALL_AFTER"] = "400"
    worker = region.start("worker", "worker-1", "--stall-s", "20", env=fault)
    region.read_until(expected)
    region.settle()
    assert worker.returncode == STALLED_EXIT, f"worker-1 exited with {worker.returncode}"
    said = (tmp_path / "worker-1.log").read_text()
    assert "this worker is stalled" in said and "where the stalled worker waits" in said
    assert region.restarted[0][0] == "worker-1"
    assert region.restarted[0][1] < len(expected), "the stall came too late to test anything"
    assert_same(by_id(region.decisions), expected)


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
