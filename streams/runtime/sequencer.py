"""The region's sequencer and router: the one order the Faust stages share.

Faust reads the partitions of a topic in whatever interleaving its fetches give, and the
region's inputs come from 30-odd partitions of four topics; the deciders' decisions would then
depend on timing. So one **sequencer** per region puts the inputs in the merged history's order
(`streams.merged`, tailing) through `core.Sequence` (input facts, duplicates dropped, clocks)
and appends them to the **journal** (`journal`), where an item's offset is its position. The
**router** copies each journal item to the stage topics that read it (by pool, by workload,
the scorer's), clocks to every partition, and tells every workload partition how far the
journal has been routed (progress, for the actuator stage's merge).

Crash safety, without transactions (Faust's consumers read uncommitted records):

* The sequencer appends a batch, then checks each record got the offset it expected (header
  ``p``); a record that did not was raced by a second sequencer, and this one stops
  (`JournalConflictError`); readers ignore such records. The batch's last record carries the
  merge positions and the clock (header ``m``). A restarted sequencer reads the journal's tail:
  positions from the last such record and the origins of the records after it, the recently
  seen input ids from the last facts, and goes on from there: nothing is appended twice.
* The router commits its journal offset after the copies are acknowledged. After a crash it
  copies some items again; every stage drops an item at or below its position.

A region has one sequencer; run it once (``spotcap run streams --role sequencer``, or the
default role, which runs it beside the workers).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from schemas.codec import Codec
from schemas.errors import CodecError
from schemas.events import Envelope, KeyringTrusted
from streams.deciders import DeciderSettings, ExclusionWatcher, Scorer
from streams.deciders.authority import trust_digest, trust_event
from streams.kafka import KafkaLog
from streams.log import LogError, TopicPartition
from streams.merged import MergedHistory
from streams.runtime.core import (
    Clock,
    Item,
    RuntimeSettings,
    Sequence,
    WorkloadStage,
    input_topics,
    is_input,
)
from streams.runtime.journal import Header, Routing, RuntimeTopics
from streams.runtime.kafka_io import PartitionReader, RuntimeProducer
from streams.schema_store import publish_schema
from streams.topics import region_topics, topic_name

_LOG = logging.getLogger("spotcap.runtime.sequencer")
NO_KEYRING = trust_digest(None)


class JournalConflictError(LogError):
    """Another sequencer appended to the region's journal at the same time as this one."""


def _tp_name(tp: TopicPartition) -> str:
    return f"{tp[0]}:{tp[1]}"


def _tp_of(name: str) -> TopicPartition:
    topic, _, partition = name.rpartition(":")
    return topic, int(partition)


@dataclass(frozen=True, slots=True)
class Recovered:
    """Where a sequencer goes on from."""

    next_position: int
    positions: Mapping[TopicPartition, int]
    keyring_sha256: str = NO_KEYRING
    """The keyring in force at the journal's end (`trust_digest`; the empty one if none was
    ever recorded)."""


class Router:
    """Says which stage topics a fact goes to (the deciders' own `key` functions)."""

    def __init__(self, settings: DeciderSettings) -> None:
        self._watcher = ExclusionWatcher(settings)
        self._scorer = Scorer(settings)
        self._workload = WorkloadStage(settings)

    def routing(self, event: Envelope) -> Routing:
        return Routing(
            pool=self._watcher.key(event),
            workload=self._workload.key(event),
            scorer=self._scorer.key(event) is not None,
        )


class Sequencer:
    """Appends the region's items to the journal in their one order (module docstring)."""

    def __init__(
        self,
        bootstrap: str,
        codec: Codec,
        topics: RuntimeTopics,
        *,
        settings: DeciderSettings | None = None,
        runtime: RuntimeSettings | None = None,
        batch_events: int = 2000,
    ) -> None:
        self.bootstrap = bootstrap
        self.codec = codec
        self.topics = topics
        self.region = topics.region
        self.runtime = runtime or RuntimeSettings()
        settings = settings or DeciderSettings()
        self.router = Router(settings)
        self.trust = settings.trust
        self.keyring_sha256 = NO_KEYRING  # the keyring in force at the journal's end
        self.batch_events = batch_events
        self.sequence = Sequence(self.runtime)
        self.producer = RuntimeProducer(bootstrap)
        self.log = KafkaLog(bootstrap)
        self.positions: dict[TopicPartition, int] = {}
        self.next_position = 0
        self.appended = 0
        self._history: MergedHistory | None = None

    # -- starting ----------------------------------------------------------------------------

    def start(self) -> Recovered:
        """Recover from the journal's tail and open the merged history from there."""
        recovered = self.recover()
        self.positions = dict(recovered.positions)
        self.next_position = recovered.next_position
        self.keyring_sha256 = recovered.keyring_sha256
        self._history = MergedHistory(
            self.log,
            self.codec,
            self.region,
            input_topics(),
            until=None,
            start=self.positions,
            group=f"spotcap-sequencer-{self.region}",
            poll_records=2000,
            buffer_per_partition=4000,
        )
        return recovered

    def recover(self) -> Recovered:
        """Positions, clock and seen ids from the journal's valid tail."""
        reader = PartitionReader(self.bootstrap, self.topics.journal)
        try:
            end = reader.end()
            if end == 0:
                return Recovered(0, {})
            # The last checkpoint is on the last record of a batch: within two batches of the
            # end unless a batch was cut short. Read back until one is found.
            window = 2 * self.batch_events
            start = max(0, end - max(window, self.runtime.seen_capacity * 2))
            while True:
                reader.seek(start)
                tail = [(m, Header.decode(m.headers)) for m in reader.read_until(end - 1)]
                valid = [(m, h) for m, h in tail if h.position == m.offset]
                marks = [i for i, (_, h) in enumerate(valid) if h.checkpoint is not None]
                if marks or start == 0:
                    break
                start = max(0, start - window)
        finally:
            reader.close()
        positions: dict[TopicPartition, int] = {}
        sequence = Sequence(self.runtime)
        ids = [h.event_id for _, h in valid if h.kind == "fact" and h.event_id]
        sequence.seen.restore(ids[-self.runtime.seen_capacity :])
        after = valid
        keyring = NO_KEYRING
        if marks:
            mark = valid[marks[-1]][1].checkpoint or {}
            raw = mark.get("positions", {})
            assert isinstance(raw, dict)
            positions = {_tp_of(k): int(v) for k, v in raw.items()}
            clock = mark.get("next_clock_us")
            sequence.next_clock_us = None if clock is None else int(str(clock))
            keyring = str(mark.get("keyring", NO_KEYRING))
            after = valid[marks[-1] + 1 :]
        for message, header in after:
            if header.kind == "fact" and header.origin is None and message.value:
                recorded = self.codec.decode(message.value).payload  # the sequencer's own
                if isinstance(recorded, KeyringTrusted):
                    keyring = recorded.keyring_sha256
            elif header.kind == "clock" and header.clock_us is not None:
                sequence.next_clock_us = header.clock_us + sequence.interval_us
            elif header.origin is not None:
                tp = _tp_of(header.origin.rpartition(":")[0])
                offset = int(header.origin.rpartition(":")[2])
                positions[tp] = max(positions.get(tp, 0), offset + 1)
                if sequence.next_clock_us is None and message.value:
                    at = self.codec.decode(message.value).occurred_at
                    sequence.next_clock_us = at - at % sequence.interval_us + sequence.interval_us
        self.sequence = sequence
        return Recovered(end, positions, keyring)

    # -- running -----------------------------------------------------------------------------

    def step(self, timeout_s: float = 0.2) -> int:
        """Append the next batch of items; returns how many."""
        assert self._history is not None, "start() the sequencer first"
        batch = self._history.read(self.batch_events, timeout_s)
        items: list[tuple[Item, str | None]] = []
        for decoded in batch:
            o = decoded.origin
            self.positions[(o.topic, o.partition)] = o.offset + 1
            where = f"{o.topic}:{o.partition}:{o.offset}"
            for item in self.sequence.items(decoded.envelope):
                items.append((item, None if isinstance(item, Clock) else where))
        if not items:
            return 0
        configured = trust_digest(self.trust)
        if configured != self.keyring_sha256:
            # The keyring changed (or this is its first run): record it, before the items it
            # decides, so that the journal says which keys each decision was made with.
            head = items[0][0]
            at = head.at_us if isinstance(head, Clock) else head.occurred_at
            record = trust_event(self.trust, self.region, at, str(self.next_position))
            items.insert(0, (record, None))
            _LOG.info(
                "sequencer of %s: records keyring %s in the journal at %d (was %s)",
                self.region, configured[:12], self.next_position, self.keyring_sha256[:12],
            )  # fmt: skip
        checkpoint = {
            "positions": {_tp_name(tp): o for tp, o in sorted(self.positions.items())},
            "next_clock_us": self.sequence.next_clock_us,
            "keyring": configured,
        }
        key = self.region.encode()
        first = self.next_position
        for i, (item, origin) in enumerate(items):
            last = i == len(items) - 1
            position = first + i
            if isinstance(item, Clock):
                header = Header("clock", position, clock_us=item.at_us)
                value = b""
                timestamp_ms = item.at_us // 1000
            else:
                header = Header(
                    "fact",
                    position,
                    event_id=item.event_id,
                    origin=origin,
                    routing=self.router.routing(item),
                )
                value = self.codec.encode(item)
                timestamp_ms = item.occurred_at // 1000
            if last:
                header = dataclasses.replace(header, checkpoint=checkpoint)
            self.producer.produce(
                self.topics.journal,
                value,
                key=key,
                partition=0,
                headers=header.encode(),
                timestamp_ms=timestamp_ms,
            )
        delivered = self.producer.flush()
        for i, d in enumerate(delivered):
            if d.offset != first + i:
                raise JournalConflictError(
                    f"the journal {self.topics.journal} took record {first + i} at offset "
                    f"{d.offset}: another sequencer of region {self.region} is writing to it. "
                    "Run one sequencer per region; restart this one when the other has stopped"
                )
        self.next_position = first + len(items)
        self.appended += len(items)
        self.keyring_sha256 = configured
        return len(items)

    def close(self) -> None:
        if self._history is not None:
            self._history.close()
        self.producer.close()


class JournalRouter:
    """Copies journal items to the stage topics (module docstring)."""

    def __init__(
        self, bootstrap: str, topics: RuntimeTopics, *, progress_interval_s: float = 0.05
    ) -> None:
        self.topics = topics
        self.producer = RuntimeProducer(bootstrap)
        self.consumer = KafkaLog(bootstrap).consumer(
            f"spotcap-router-{topics.region}", [topics.journal]
        )
        self.progress_interval_s = progress_interval_s
        self.routed = 0
        self._last_routed = -1
        self._last_progress = -1
        self._progress_sent_at = 0.0

    def step(self, timeout_s: float = 0.2, max_records: int = 2000) -> int:
        records = self.consumer.poll(max_records, timeout_s)
        t = self.topics
        region = t.region.encode()
        copies = 0
        for record in records:
            header = Header.decode(dict(record.headers))
            if header.position != record.offset:
                continue  # written by a racing sequencer: not part of the journal
            headers = Header(header.kind, header.position, clock_us=header.clock_us).encode()
            ts = record.timestamp_ms
            if header.kind == "clock":
                for topic, n in (
                    (t.pool, t.pool_partitions),
                    (t.workload, t.workload_partitions),
                    (t.scorer, 1),
                ):
                    for partition in range(n):
                        self.producer.produce(
                            topic, b"", key=region, partition=partition, headers=headers,
                            timestamp_ms=ts,
                        )  # fmt: skip
                        copies += 1
            else:
                r = header.routing
                if r.pool is not None:
                    self.producer.produce(
                        t.pool, record.value, key=r.pool.encode(), headers=headers, timestamp_ms=ts
                    )
                    copies += 1
                if r.workload is not None:
                    self.producer.produce(
                        t.workload,
                        record.value,
                        key=r.workload.encode(),
                        headers=headers,
                        timestamp_ms=ts,
                    )
                    copies += 1
                if r.scorer:
                    self.producer.produce(
                        t.scorer, record.value, key=region, headers=headers, timestamp_ms=ts
                    )
                    copies += 1
            self._last_routed = max(self._last_routed, header.position)
        now = time.monotonic()
        caught_up = len(records) < max_records
        if self._last_routed > self._last_progress and (
            caught_up or now - self._progress_sent_at >= self.progress_interval_s
        ):
            progress = Header("progress", self._last_routed).encode()
            for partition in range(t.workload_partitions):
                self.producer.produce(
                    t.workload, b"", key=region, partition=partition, headers=progress
                )
            self._last_progress = self._last_routed
            self._progress_sent_at = now
        if records or copies:
            self.producer.flush()
        if records:
            positions: dict[TopicPartition, int] = {}
            for record in records:
                positions[(record.topic, record.partition)] = record.offset + 1
            self.consumer.commit(positions)
        self.routed += len(records)
        return len(records)

    def close(self) -> None:
        self.consumer.close()
        self.producer.close()


def prepare(bootstrap: str, codec: Codec, topics: RuntimeTopics) -> None:
    """Create (or bring to spec) the region's topics and the runtime's, and publish the codec's
    writer schema, before any worker starts (Faust must find its topics made)."""
    log = KafkaLog(bootstrap)
    log.apply_topics([*region_topics(topics.region), *topics.specs()])
    producer = log.producer()
    publish_schema(producer, topics.region, codec.schema)
    producer.flush()
    producer.close()


def deciders_behind(log: KafkaLog, codec: Codec, topics: RuntimeTopics) -> list[str]:
    """What the region's deciders have yet to do with what the log holds now, one line per
    partition behind; [] when they are done with it.

    Done means: every input record is covered by the journal's last checkpoint (the sequencer
    appended it, or dropped it as a copy); the router committed the journal's end; and the
    Faust workers committed the end of every stage partition. A worker commits a record only
    once a stored snapshot covers it and the broker confirmed the decisions made before that
    snapshot (`faust_app`), so then every decision of every journal item is on the log. Exact,
    where a quiet period is a guess: a restarted worker rejoining its group says nothing for a
    while, and so does a paused one."""
    behind: list[str] = []
    sequencer = Sequencer(log.bootstrap, codec, topics)
    try:
        positions = sequencer.recover().positions
        seen = set(sequencer.sequence.seen.snapshot())
    finally:
        sequencer.close()
    for name in input_topics():
        topic = topic_name(topics.region, name)
        for partition, end in sorted(log.end_offsets(topic).items()):
            at = positions.get((topic, partition), 0)
            if at < end and _any_new_input(
                log.bootstrap, codec, (topic, partition), (at, end), seen
            ):
                behind.append(f"the sequencer at {at} of {topic}[{partition}]'s {end}")
    consumers = (
        ("the router", f"spotcap-router-{topics.region}", (topics.journal,)),
        ("the workers", topics.app_id,
         (topics.pool, topics.workload, topics.scorer, topics.actuator)),
    )  # fmt: skip
    for who, group, names in consumers:
        for topic in names:
            committed = log.committed_offsets(group, topic)
            for partition, end in sorted(log.end_offsets(topic).items()):
                at = committed.get(partition) or 0
                if at < end:
                    behind.append(f"{who} at {at} of {topic}[{partition}]'s {end}")
    return behind


def _any_new_input(
    bootstrap: str, codec: Codec, tp: TopicPartition, span: tuple[int, int], seen: set[str]
) -> bool:
    """Whether the records of `tp` from `span`'s first offset to its end hold an input fact
    the journal does not. The journal's checkpoint is written with a batch's items, so the
    records after it that made no item (copies of facts it holds, events that are no input,
    undecodable ones, which went to the dead letters) are covered without one."""
    first, end = span
    reader = PartitionReader(bootstrap, tp[0], tp[1], start=first)
    try:
        messages = reader.read_until(end - 1)
    finally:
        reader.close()
    for message in messages:
        try:
            event = codec.decode(message.value or b"")
        except CodecError:
            continue
        if is_input(event) and event.event_id not in seen:
            return True
    return False


def run_sequencer(
    bootstrap: str,
    codec: Codec,
    topics: RuntimeTopics,
    *,
    settings: DeciderSettings | None = None,
    runtime: RuntimeSettings | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    on_step: Callable[[Sequencer, JournalRouter], None] | None = None,
    backoff_s: tuple[float, float] = (1.0, 30.0),
) -> None:
    """Sequence and route until `should_stop` (a SIGTERM handler sets it).

    A broker that stops answering (paused, restarted, unreachable: a `LogError`) costs a
    fresh start from the journal's tail after a backoff (`backoff_s`: the first wait, doubled
    up to the second), not the process: recovery appends nothing twice (module docstring),
    and the router copies again what it had not committed. A journal raced by another
    sequencer (`JournalConflictError`) still ends the run."""
    first_wait_s, longest_wait_s = backoff_s
    wait_s = first_wait_s
    while not should_stop():
        try:
            _sequence_and_route(
                bootstrap,
                codec,
                topics,
                settings=settings,
                runtime=runtime,
                should_stop=should_stop,
                on_step=on_step,
            )
            return
        except JournalConflictError:
            raise
        except LogError as error:
            _LOG.warning(
                "sequencer of %s: the broker failed (%s); starting again from the journal's "
                "tail in %.0f s",
                topics.region,
                error,
                wait_s,
            )
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and not should_stop():
            time.sleep(0.1)
        wait_s = min(wait_s * 2, longest_wait_s)


def _sequence_and_route(
    bootstrap: str,
    codec: Codec,
    topics: RuntimeTopics,
    *,
    settings: DeciderSettings | None,
    runtime: RuntimeSettings | None,
    should_stop: Callable[[], bool],
    on_step: Callable[[Sequencer, JournalRouter], None] | None,
) -> None:
    sequencer = Sequencer(bootstrap, codec, topics, settings=settings, runtime=runtime)
    router = JournalRouter(bootstrap, topics)
    try:
        recovered = sequencer.start()
        _LOG.info(
            "sequencer of %s: journal at %d, reading from %d partitions' positions",
            topics.region,
            recovered.next_position,
            len(recovered.positions),
        )
        while not should_stop():
            appended = sequencer.step(0.05)
            routed = router.step(0.0 if appended else 0.05)
            if on_step is not None:
                on_step(sequencer, router)
            if not appended and not routed:
                time.sleep(0.01)
    finally:
        with contextlib.suppress(LogError):  # a broker that is gone leaves nothing to flush
            sequencer.close()
        with contextlib.suppress(LogError):
            router.close()
