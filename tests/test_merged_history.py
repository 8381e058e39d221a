"""The merged history: one deterministic order over several topics, whatever the poll size and
however partitions' records interleave in polls; bounded buffers; progress; both logs."""

from __future__ import annotations

import dataclasses
import heapq
import time
import uuid
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra import servers
from projections.catchup import _filled
from schemas.codec import Codec
from schemas.events import DeadLettered, Envelope
from streams.deadletter import DeadLetters
from streams.embedded import EmbeddedLog
from streams.kafka import KafkaLog
from streams.log import (
    CLOSE_TIMEOUT_S,
    COMMIT_TIMEOUT_S,
    Consumer,
    EventLog,
    PartitionListener,
    Producer,
    Record,
    TopicChange,
    TopicPartition,
    TopicSpec,
)
from streams.merged import HistoryStalledError, MergedHistory
from streams.reader import Decoded
from streams.topics import region_topics, topic_name
from streams.writer import EventWriter
from tests.factories import T0_US, notice, rate_card

CODEC = Codec()
TOPICS = ("lifecycle", "market")


@pytest.fixture(params=["embedded", "kafka"])
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EventLog]:
    if request.param == "embedded":
        opened: EventLog = EmbeddedLog(tmp_path / "log")
    else:
        opened = KafkaLog(request.getfixturevalue("kafka").address)
    yield opened
    opened.close()


def new_region(log: EventLog) -> str:
    name = f"t{uuid.uuid4().hex[:10]}"
    log.apply_topics(region_topics(name, partitions_scale=0.5))
    return name


def merge_key(record: Record, envelope: Envelope) -> tuple[int, str, int, int]:
    return (envelope.occurred_at, record.topic, record.partition, record.offset)


def expected_order(delivered: Iterable[Record]) -> list[str]:
    """The k-way merge of the partitions by their heads' (occurred_at, topic, partition,
    offset): the definition, computed from what the log holds."""
    by_partition: dict[TopicPartition, list[tuple[tuple[int, str, int, int], str]]] = {}
    for record in delivered:
        envelope = CODEC.decode(record.value or b"", record.origin)
        by_partition.setdefault((record.topic, record.partition), []).append(
            (merge_key(record, envelope), envelope.event_id)
        )
    for rows in by_partition.values():
        rows.sort(key=lambda row: row[0][3])  # the partition's own order: by offset
    return [event_id for _, event_id in heapq.merge(*by_partition.values(), key=lambda r: r[0])]


def mixed_events(region: str, count: int, *, in_time_order: bool = True) -> list[Envelope]:
    """Notices (lifecycle) and rate cards (market) with clashing and out-of-order times."""
    events = []
    for i in range(count):
        at = T0_US + ((i * 7919) % (count // 2 + 1)) * 500_000  # many equal times
        if i % 3 == 0:
            events.append(rate_card(region, i % 11, seq=i, at_us=at))
        else:
            events.append(dataclasses.replace(notice(region, i % 23, seq=i), occurred_at=at))
    return sorted(events, key=lambda e: e.occurred_at) if in_time_order else events


def write_raw(log: EventLog, events: Sequence[Envelope]) -> list[Record]:
    producer = log.producer()
    for event in events:
        producer.produce(
            topic_name(event.region, type(event.payload).TOPIC),
            CODEC.encode(event),
            key=event.key.encode(),
        )
    return producer.flush()


# -- a log whose consumers slice and interleave polls as the test says ------------------------


class Reshuffled:
    """The embedded log, with consumers that hand records out in drawn poll sizes and drawn
    partition interleavings (each partition's own order kept, as Kafka keeps it)."""

    def __init__(self, inner: EmbeddedLog, draw: st.DataObject) -> None:
        self.inner = inner
        self.draw = draw

    def describe(self) -> str:
        return self.inner.describe()

    def topic_id(self, topic: str) -> str | None:
        return self.inner.topic_id(topic)

    def apply_topics(self, specs: Iterable[TopicSpec]) -> list[TopicChange]:
        return self.inner.apply_topics(specs)

    def partitions_for(self, topic: str) -> int:
        return self.inner.partitions_for(topic)

    def end_offsets(self, topic: str) -> dict[int, int]:
        return self.inner.end_offsets(topic)

    def producer(self) -> Producer:
        return self.inner.producer()

    def consumer(
        self, group: str, topics: Sequence[str], *, listener: PartitionListener | None = None
    ) -> Consumer:
        return ReshufflingConsumer(self.inner, group, topics, listener, self.draw)

    def close(self) -> None:
        self.inner.close()


class ReshufflingConsumer:
    def __init__(
        self,
        log: EmbeddedLog,
        group: str,
        topics: Sequence[str],
        listener: PartitionListener | None,
        draw: st.DataObject,
    ) -> None:
        self.poll_errors = 0
        self._listener = listener
        self._draw = draw
        self._backlog: dict[TopicPartition, deque[Record]] = {}
        self._inner = log.consumer(group, topics, listener=self)

    def on_assign(self, consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        if self._listener is not None:
            self._listener.on_assign(self, partitions)

    def on_revoke(self, consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        if self._listener is not None:
            self._listener.on_revoke(self, partitions)

    def poll(self, max_records: int = 500, timeout_s: float = 1.0) -> list[Record]:
        for record in self._inner.poll(1000, timeout_s=0.0):
            self._backlog.setdefault((record.topic, record.partition), deque()).append(record)
        paused = set(self._inner.paused())
        out: list[Record] = []
        wanted = self._draw.draw(st.integers(1, max_records), label="poll size")
        while len(out) < wanted:
            ready = sorted(tp for tp, q in self._backlog.items() if q and tp not in paused)
            if not ready:
                break
            tp = self._draw.draw(st.sampled_from(ready), label="next partition")
            run = self._draw.draw(st.integers(1, 4), label="run length")
            queue = self._backlog[tp]
            for _ in range(min(run, len(queue), wanted - len(out))):
                out.append(queue.popleft())
        return out

    def commit(
        self, positions: Mapping[TopicPartition, int], timeout_s: float = COMMIT_TIMEOUT_S
    ) -> None:
        self._inner.commit(positions, timeout_s)

    def committed(self) -> dict[TopicPartition, int]:
        return self._inner.committed()

    def assignment(self) -> list[TopicPartition]:
        return self._inner.assignment()

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self._backlog.pop((topic, partition), None)
        self._inner.seek(topic, partition, offset)

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self._inner.pause(partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._inner.resume(partitions)

    def paused(self) -> list[TopicPartition]:
        return self._inner.paused()

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        self._inner.close(timeout_s)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    data=st.data(),
    times=st.lists(st.integers(0, 30), min_size=0, max_size=60),
    topics=st.lists(st.sampled_from(TOPICS), min_size=60, max_size=60),
    keys=st.lists(st.integers(0, 40), min_size=60, max_size=60),
)
def test_the_order_does_not_depend_on_poll_sizes_or_interleavings(
    tmp_path: Path,
    data: st.DataObject,
    times: list[int],
    topics: list[str],
    keys: list[int],
) -> None:
    inner = EmbeddedLog(tmp_path / uuid.uuid4().hex)
    region = new_region(inner)
    events = [
        rate_card(region, keys[i], seq=i, at_us=T0_US + t * 1_000_000)
        if topics[i] == "market"
        else dataclasses.replace(notice(region, keys[i], seq=i), occurred_at=T0_US + t * 1_000_000)
        for i, t in enumerate(times)  # times in any order: partitions need not be sorted
    ]
    delivered = write_raw(inner, events)
    expected = expected_order(delivered)
    orders = []
    for attempt in range(2):
        history = MergedHistory(
            Reshuffled(inner, data),
            CODEC,
            region,
            TOPICS,
            poll_records=data.draw(st.integers(1, 50), label=f"poll records {attempt}"),
            buffer_per_partition=data.draw(st.integers(1, 8), label=f"buffer {attempt}"),
            stall_timeout_s=30.0,
        )
        orders.append([d.envelope.event_id for d in history])
        assert history.progress.events_read == len(events)
    assert orders[0] == orders[1] == expected
    inner.close()


def test_partitions_in_event_time_order_give_the_total_order(log: EventLog) -> None:
    region = new_region(log)
    events = mixed_events(region, 400)
    delivered = write_raw(log, events)
    history = MergedHistory(log, CODEC, region, TOPICS, poll_records=37, buffer_per_partition=5)
    got = list(history)
    keys = [
        (d.envelope.occurred_at, d.origin.topic, d.origin.partition, d.origin.offset) for d in got
    ]
    assert keys == sorted(keys)
    assert [d.envelope.event_id for d in got] == expected_order(delivered)
    assert sorted(e.event_id for e in events) == sorted(d.envelope.event_id for d in got)


def test_both_logs_give_the_same_sequence(tmp_path: Path, kafka: servers.Server) -> None:
    """The same events written through EventWriter into both logs merge identically: keys land
    on the same partitions and offsets, so even ties between topics break the same way."""
    sequences = []
    region = f"t{uuid.uuid4().hex[:10]}"
    for log in (EmbeddedLog(tmp_path / "log"), KafkaLog(kafka.address)):
        log.apply_topics(region_topics(region, partitions_scale=0.5))
        writer = EventWriter(log, CODEC, region)
        for event in mixed_events(region, 300, in_time_order=False):
            writer.write(event)
        writer.close()
        history = MergedHistory(log, CODEC, region, TOPICS, poll_records=64)
        sequences.append([(d.origin, d.envelope) for d in history])
        log.close()
    assert len(sequences[0]) == 300
    assert sequences[0] == sequences[1]


def test_progress_bounded_buffers_and_the_end_taken_at_the_start(log: EventLog) -> None:
    region = new_region(log)
    events = mixed_events(region, 900)
    write_raw(log, events)
    history = MergedHistory(log, CODEC, region, TOPICS, poll_records=20, buffer_per_partition=3)
    partitions = sum(log.partitions_for(topic_name(region, t)) for t in TOPICS)
    assert history.progress.records_total == 900
    # Written after the start: not part of this history.
    write_raw(log, [notice(region, 1, seq=10_000)])
    got: list[Decoded] = []
    most_buffered = 0
    deadline = time.monotonic() + 120
    while not history.finished and time.monotonic() < deadline:
        got.extend(history.read(max_events=7, timeout_s=1.0))
        most_buffered = max(most_buffered, history.buffered)
        progress = history.progress
        assert progress.events_read == len(got)
        assert progress.records_read <= 900
    history.close()
    assert len(got) == 900 and history.progress.fraction == 1.0
    # At most a full buffer plus one poll per partition, never the whole history.
    assert most_buffered <= partitions * (3 + 20) < 900


def test_undecodable_records_are_counted_and_dead_lettered_not_merged(log: EventLog) -> None:
    region = new_region(log)
    events = mixed_events(region, 30)
    write_raw(log, events)
    producer = log.producer()
    producer.produce(topic_name(region, "lifecycle"), b"not avro", key=b"i-00001")
    producer.flush()
    dead_letters = DeadLetters(log.producer(), CODEC, region, "merged-test")
    history = MergedHistory(log, CODEC, region, TOPICS, dead_letters=dead_letters)
    got = list(history)
    assert len(got) == 30
    assert history.progress.undecodable == 1 and history.progress.records_read == 31
    dead = MergedHistory(log, CODEC, region, ["deadletter"])
    letters = [d.envelope.payload for d in dead]
    assert len(letters) == 1 and isinstance(letters[0], DeadLettered)
    assert letters[0].raw_value == b"not avro"


def test_tailing_follows_the_log_and_an_idle_partition_does_not_hold_it_back(
    log: EventLog,
) -> None:
    region = new_region(log)
    write_raw(log, mixed_events(region, 20))
    history = MergedHistory(log, CODEC, region, TOPICS, until=None)
    got: list[Decoded] = []
    deadline = time.monotonic() + 120
    while len(got) < 20 and time.monotonic() < deadline:
        got.extend(history.read(timeout_s=1.0))
    assert history.progress.records_total is None and not history.finished
    later = [notice(region, 3, seq=500 + i) for i in range(5)]
    write_raw(log, later)  # one key: one partition has news, every other one is idle
    while len(got) < 25 and time.monotonic() < deadline:
        got.extend(history.read(timeout_s=1.0))
    history.close()
    assert [d.envelope.event_id for d in got[20:]] == [e.event_id for e in later]


def test_a_partition_that_never_reaches_its_end_stalls_with_a_named_error(
    log: EventLog,
) -> None:
    region = new_region(log)
    write_raw(log, mixed_events(region, 10))
    lifecycle = topic_name(region, "lifecycle")
    ends = log.end_offsets(lifecycle)
    history = MergedHistory(
        log,
        CODEC,
        region,
        ["lifecycle"],
        until={(lifecycle, 0): ends[0] + 5},  # more than the partition holds
        stall_timeout_s=3.0,
    )
    with pytest.raises(HistoryStalledError, match=rf"{lifecycle}\[0\] at {ends[0]} of"):
        list(history)


class Written:
    """How far a test's writer has written (`streams.merged.Following`)."""

    def __init__(self) -> None:
        self.below = -1
        self.done = False

    def watermark(self) -> int:
        return self.below

    def complete(self) -> bool:
        return self.done


def test_following_a_writer_gives_the_sequence_of_one_read_of_the_finished_log(
    log: EventLog,
) -> None:
    """A history following a writer gives out everything below the writer's watermark while it
    writes, and in the end the very sequence one read of the finished log gives, though the
    flushes split instants (many events share a time) and partitions stay idle for a while."""
    region = new_region(log)
    events = mixed_events(region, 600)
    written = Written()
    follower = MergedHistory(
        log, CODEC, region, TOPICS, until=written, poll_records=16, buffer_per_partition=4
    )
    writer = EventWriter(log, CODEC, region, flush_every=10**9)
    got: list[Decoded] = []
    deadline = time.monotonic() + 120
    for start in range(0, len(events), 70):
        chunk = events[start : start + 70]
        for event in chunk:
            writer.write(event)
        writer.flush()
        written.below = chunk[-1].occurred_at
        below = sum(e.occurred_at < written.below for e in events)
        while len(got) < below and time.monotonic() < deadline:
            got.extend(follower.read(timeout_s=1.0))
        assert len(got) >= below  # the follower does not wait for the end
        assert not follower.finished
    writer.close()
    written.done = True
    while not follower.finished and time.monotonic() < deadline:
        got.extend(follower.read(timeout_s=1.0))
    follower.close()
    whole = list(MergedHistory(log, CODEC, region, TOPICS))
    assert len(whole) == len(events)
    assert [(d.origin, d.envelope) for d in got] == [(d.origin, d.envelope) for d in whole]
    assert follower.progress.records_total == len(events)


def test_following_a_writer_done_before_the_first_poll_reads_to_the_end(log: EventLog) -> None:
    """The writer is done before the follower first polls (the demo's child starts late, or
    the log's consumer has not joined its group yet) and some partitions hold nothing: those
    are done before they are assigned, and are paused once they are, not refused."""
    region = new_region(log)
    events = mixed_events(region, 6)  # fewer keys than partitions: some stay empty
    write_raw(log, events)
    empty = [
        (topic_name(region, t), n)
        for t in TOPICS
        for n, end in log.end_offsets(topic_name(region, t)).items()
        if end == 0
    ]
    assert empty, "the test needs a partition with nothing in it"
    written = Written()
    written.below, written.done = max(e.occurred_at for e in events) + 1, True
    follower = MergedHistory(log, CODEC, region, TOPICS, until=written)
    got: list[Decoded] = []
    deadline = time.monotonic() + 120
    while not follower.finished and time.monotonic() < deadline:
        got.extend(follower.read(timeout_s=1.0))
    follower.close()
    whole = list(MergedHistory(log, CODEC, region, TOPICS))
    assert len(whole) == len(events)
    assert [(d.origin, d.envelope) for d in got] == [(d.origin, d.envelope) for d in whole]


def test_a_catch_ups_batch_is_filled_from_reads_that_each_give_a_buffers_worth(
    tmp_path: Path,
) -> None:
    """One read gives at most what the buffers hold; a catch-up's batch is topped up from the
    next reads to its size (each batch has fixed costs), in the history's own order."""
    log = EmbeddedLog(tmp_path / "log")
    region = new_region(log)
    delivered = write_raw(log, mixed_events(region, 600))
    partitions = sum(log.partitions_for(topic_name(region, t)) for t in TOPICS)
    history = MergedHistory(log, CODEC, region, TOPICS, poll_records=4, buffer_per_partition=2)
    first = history.read(250, timeout_s=5.0)
    assert 0 < len(first) <= partitions * (2 + 4) < 250  # a read alone: a short batch
    batches = [_filled(history, first, 250)]
    while not history.finished:
        batch = _filled(history, history.read(250, timeout_s=5.0), 250)
        if batch:
            batches.append(batch)
    history.close()
    log.close()
    assert [len(b) for b in batches] == [250, 250, 100]
    got = [d.envelope.event_id for batch in batches for d in batch]
    assert got == expected_order(delivered)
