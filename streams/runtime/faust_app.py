"""The deciders on Faust (faust-streaming): four agents, one per stage topic, state in tables.

`build_app(config)` makes the app; `run_worker(config)` runs one worker of it. The sequencer
(`sequencer`) must run beside the workers: it writes the journal the stages read.

| agent | reads | keyed by | state (table, with its changelog topic) |
|---|---|---|---|
| pool | ``deciders-pool`` | pool | the exclusion watcher's pools |
| scorer | ``deciders-scorer`` | region | the scorer |
| workload | ``deciders-workload`` | workload | planner, replacement, fallback; the region view |
| actuator | ``deciders-actuator`` | region | the actuator guard, the canary (ADR-32) |

Each agent hands its partitions' records to the stage classes of `stages`, in batches. It
publishes their decisions to the region's ``decisions`` topic (the workload agent also sends
them, with their places, and its progress to ``deciders-actuator``), and every few thousand
positions or seconds stores the partition's whole state in its table (`Snapshots`).

**Exactly once in effect, not in Faust's sense.** The app runs at least once: Faust redelivers
what was not committed after a crash or a rebalance, and Faust's own exactly-once is known to
send duplicates on rebalances (faust-streaming #323, #502, #517). So correctness does not rest
on Faust: every decision's id is derived from its cause (a decision made again has the same id
and the same bytes), a stage skips records at or below the position of its state, and an input
record is acknowledged (its offset may be committed) only once a stored snapshot covers it.
Before a snapshot is stored, the decisions made so far are confirmed by the broker, so a stored
state never claims decisions the log does not hold; and a record is acknowledged only once the
broker has confirmed the snapshot's changelog records. Neither rests on Faust's flush, which
gives up on its send buffer after 0.1 s under load (``ProducerBuffer.flush_atmost``) and then
commits offsets whose table writes were still unsent: a kill -9 then lost records. Records are
acknowledged in offset order, stopping at the first one the snapshot does not cover: Faust
commits the first run of consecutive acknowledged offsets, even one that starts after a single
unacknowledged record (``Consumer._new_offset``), and the actuator topic's records do not come
in position order (they merge the workload partitions'), so acknowledging out of order would
commit past a decision not yet applied. A partition's state is the fold of its topic's records
with no hole (`in_sequence`): records of a partition this worker no longer owns are dropped (the
take buffer keeps records across a rebalance), and when a record comes after the offset the
state ends at, the records in between are read from Kafka by the worker itself and applied
first: Faust drops, and acknowledges, the records it fetched under an older consumer
generation when a rebalance comes (``Stream._py_aiter``), so they never reach the stream, and
seeking its consumer back did not bring them again (a restarted worker waited forever). So a
decision made again is made from the same state. The actuator's partition is no exception: its
snapshot holds what it received but has not applied yet (the workload partitions' progress and
their decisions waiting for it), so it too stores the offset its state ends at and reads a
hole. (It used to store no offset and check none: the records Faust dropped at a rebalance
or a restart, and committed past, never reached it, and the workload decisions among them were
never carried to the guard: 59-86 actuation decisions missing in a CI run.)
A hole at a partition's tail has no later record to reveal it: a watch (`StageHost.watch`)
compares each owned partition's state with the group's committed offset and the partition's
end, reads what was committed but never applied, and ends the worker (`STALLED_EXIT`, for its
supervisor to start it again) when records wait undelivered, with no progress, for
`FaustConfig.stall_after_s` while the broker answers: Faust's consumer can stop fetching.
A consumer that drops duplicates by event id sees every decision once.
"""

from __future__ import annotations

import asyncio
import atexit
import faulthandler
import hashlib
import json
import logging
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import faust
from faust.tables.table import Table
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP, EventT, StreamT

from schemas.codec import Codec
from streams.deciders import DeciderSettings, ExclusionWatcher, Scorer
from streams.log import LogError
from streams.runtime import state_codec
from streams.runtime.core import Clock, Item, RuntimeSettings
from streams.runtime.journal import Header, RuntimeTopics
from streams.runtime.kafka_io import GroupOffsets, Message, PartitionOffsets, PartitionReader
from streams.runtime.stages import (
    ActuatorPartition,
    KeyedPartition,
    StageOutput,
    StageRecord,
    WorkloadPartition,
)
from streams.topics import topic_name

_LOG = logging.getLogger("spotcap.runtime.faust")
CHUNK_BYTES = 900_000  # under the changelog topics' 2 MiB max.message.bytes, with room
CATCH_UP_STEP = 500  # journal items applied between two yields to the event loop
CONFIRM_TIMEOUT_S = 120.0  # the broker confirms a snapshot's writes, or the worker stops
STALLED_EXIT = 75  # EX_TEMPFAIL: the watch found the worker stalled; its supervisor restarts it


class UnconfirmedWriteError(RuntimeError):
    """The broker did not confirm a decision or a snapshot write in time: nothing is
    acknowledged, so a restarted worker makes the same decisions again from its last snapshot."""


async def confirm(futures: list[Any], what: str) -> None:
    """Wait until the broker has confirmed every send of `futures` (bounded)."""
    if not futures:
        return
    try:
        await asyncio.wait_for(asyncio.gather(*futures), CONFIRM_TIMEOUT_S)
    except TimeoutError as exc:
        raise UnconfirmedWriteError(
            f"the broker did not confirm {len(futures)} {what} within {CONFIRM_TIMEOUT_S:.0f} s"
        ) from exc


@dataclass(frozen=True, slots=True)
class FaustConfig:
    """Everything a worker needs (the CLI builds it from settings and flags)."""

    bootstrap: str
    topics: RuntimeTopics
    codec: Codec = field(default_factory=Codec)
    settings: DeciderSettings = field(default_factory=DeciderSettings)
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
    session_timeout_s: float = 30.0
    """How long the group waits for a silent worker (a killed one) before giving its
    partitions to the others; Faust's default is 60 s."""
    snapshot_every: int = 5000
    """Positions between two snapshots of a partition."""
    snapshot_interval_s: float = 10.0
    """Seconds between two snapshots of a partition that has moved."""
    commit_interval_s: float = 2.8
    """Seconds between two commits of the acknowledged offsets (Faust's default, 2.8 s): a
    restarted worker re-reads at most that much more than its snapshot covers."""
    batch_max: int = 1000
    batch_within_s: float = 0.05
    producer_linger_s: float = 0.01
    log_level: str = "warning"
    stall_s: float | None = None
    """Seconds a partition of this worker may have records waiting on the broker, and none
    delivered, before the worker exits (`STALLED_EXIT`) for its supervisor to start it again
    (`StageHost.watch`). None: four session timeouts, at least 60 s (a rebalance, during which
    the watch waits, takes at most about three)."""
    datadir: str | None = None
    """Faust's data directory. Its tables keep nothing there (their store is memory and their
    state is on Kafka), but Faust makes the folder anyway: by default a fresh temporary
    folder, never ``<app id>-data`` in the working directory."""

    @property
    def stall_after_s(self) -> float:
        return self.stall_s if self.stall_s is not None else max(60.0, 4 * self.session_timeout_s)


class Runner(Protocol):
    position: int

    def apply(self, records: list[StageRecord]) -> StageOutput: ...

    def snapshot(self) -> dict[str, Any]: ...

    def restore(self, data: dict[str, Any]) -> None: ...


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's aiokafka consumer thread, but a commit with nothing of this worker's to commit
    is no commit: after a rebalance (a broker restarted, a worker gone) Faust may commit offsets
    of partitions it no longer holds, filters them out and hands aiokafka an empty dict, which
    aiokafka refuses (``ValueError({})``, aiokafka.util.commit_structure_validate) and Faust
    then crashes the worker on."""

    async def _commit(self, offsets: Any) -> bool:
        assigned = self.assignment()
        if not any(tp in assigned for tp in offsets):
            return False
        done: bool = await super()._commit(offsets)
        return done


class _Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class _Transport(faust_aiokafka.Transport):
    """Faust's aiokafka transport with `_ConsumerThread`."""

    Consumer = _Consumer


class PartitionedTable(Table[bytes, bytes]):
    """A table whose keys start with the partition they belong to (``"3/..."``), so a value can
    be stored for a partition from outside that partition's event (a batch holds several)."""

    def partition_for_key(self, key: Any) -> int | None:
        return int(bytes(key).split(b"/", 1)[0])

    def send_changelog(self, *args: Any, **kwargs: Any) -> Any:
        """Faust's changelog send, keeping its future (`take_unconfirmed`)."""
        fut = super().send_changelog(*args, **kwargs)
        self.__dict__.setdefault("_unconfirmed", []).append(fut)
        return fut

    def take_unconfirmed(self) -> list[Any]:
        """The changelog sends since the last call (each resolves once the broker has it)."""
        futures: list[Any] = self.__dict__.pop("_unconfirmed", [])
        return futures


class JournalFeed:
    """Journal items for one stage partition, read ahead off the event loop (`prefetch`)."""

    def __init__(self, config: FaustConfig) -> None:
        self._config = config
        self._reader: PartitionReader | None = None
        self._cache: dict[int, Item] = {}

    def _read(self, first: int, last: int) -> list[tuple[int, Item]]:
        if self._reader is None:
            self._reader = PartitionReader(self._config.bootstrap, self._config.topics.journal)
        reader = self._reader
        if reader.position != first:
            reader.seek(first)
        out: list[tuple[int, Item]] = []
        decode = self._config.codec.decode
        for m in reader.read_until(last):
            header = Header.decode(m.headers)
            if header.position != m.offset:
                continue  # a racing sequencer's record, not part of the journal
            if header.kind == "clock":
                assert header.clock_us is not None
                out.append((m.offset, Clock(header.clock_us)))
            else:
                out.append((m.offset, decode(m.value or b"")))
        return out

    async def prefetch(self, first: int, last: int) -> None:
        """Read items `first`..`last` into the cache (in a thread: the loop keeps beating)."""
        if last < first or all(p in self._cache for p in (first, last)):
            return
        loop = asyncio.get_running_loop()
        got = await loop.run_in_executor(None, self._read, first, last)
        self._cache.update(got)

    def items(self, first: int, last: int) -> list[tuple[int, Item]]:
        missing = [p for p in (first, last) if p not in self._cache]
        if missing and last >= first:
            self._cache.update(self._read(first, last))  # not prefetched: read here
        out = [(p, self._cache[p]) for p in sorted(self._cache) if first <= p <= last]
        for p, _ in out:
            del self._cache[p]
        return out

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


@dataclass(frozen=True, slots=True)
class _Fetched:
    """A record read from Kafka by the worker itself to fill a hole in what Faust delivered.
    Faust drops (and acknowledges) the records it fetched under an older consumer generation
    when a rebalance comes, and goes on after them; they never reach the stream. Such a record
    has no Faust event to acknowledge: the stored snapshot's `next_offset` covers it."""

    offset: int


Source = EventT[Any] | _Fetched
"""Where a stage record came from: Faust's stream, or the worker's own read (`_Fetched`)."""


def _offset_of(source: Source) -> int:
    return source.offset if isinstance(source, _Fetched) else source.message.offset


@dataclass(slots=True)
class _Held:
    """A partition's runner, and what is not yet covered by its stored snapshot."""

    runner: Runner
    feed: JournalFeed | None
    stored_position: int = -1
    stored_at: float = field(default_factory=time.monotonic)
    stored_keys: list[bytes] = field(default_factory=list)
    unacked: list[tuple[int, Source]] = field(default_factory=list)
    next_offset: int | None = None
    """The offset of the source partition's next record: every record before it is in the
    state (applied, received, or skipped as a copy). None: not known yet (a runner with no
    snapshot before its first batch, or one restored from a snapshot stored before the
    actuator's held what it received)."""
    sought: int | None = None  # the offset the consumer was last sent back to


class StageHost:
    """Runs one stage's partitions inside one worker (see the module docstring)."""

    def __init__(
        self,
        app: faust.App,
        config: FaustConfig,
        name: str,
        table: PartitionedTable,
        make_runner: Callable[[int, JournalFeed | None], Runner],
        *,
        journal: bool,
    ) -> None:
        self.app = app
        self.config = config
        self.name = name
        self.table = table
        self.make_runner = make_runner
        self.journal = journal
        self.held: dict[int, _Held] = {}
        self.lock = asyncio.Lock()
        self.token = secrets.token_hex(4)  # this worker's snapshot keys never clash
        self.decisions = raw_topic(app, topic_name(config.topics.region, "decisions"))
        self.actuator = raw_topic(app, config.topics.actuator)
        self.stream: StreamT[Any] | None = None
        self.published = 0
        self.sent: list[Any] = []  # sends not yet confirmed by the broker (`store` waits)
        self.steps = 0  # catch-up steps taken: progress even while no record is delivered
        self.watched: dict[int, tuple[tuple[int, int], float]] = {}  # `watch`'s clocks
        self._offsets: GroupOffsets | None = None

    # -- partitions ----------------------------------------------------------------------------

    def hold(self, partition: int) -> _Held:
        held = self.held.get(partition)
        if held is not None:
            return held
        feed = JournalFeed(self.config) if self.journal else None
        runner = self.make_runner(partition, feed)
        held = _Held(runner, feed)
        meta = self.table.get(self._key(partition, "meta"))
        if meta is not None:
            info = json.loads(meta)
            data = b"".join(self.table[k.encode()] for k in info["chunks"])
            if hashlib.sha256(data).hexdigest() != info["sha256"]:
                raise state_codec.StateCodecError(
                    f"the {self.name} stage's snapshot of partition {partition} does not match "
                    "its checksum"
                )
            runner.restore(state_codec.decode(data))
            held.stored_position = runner.position
            held.stored_keys = [k.encode() for k in info["chunks"]]  # dropped at the next store
            held.next_offset = info.get("next_offset")
            _LOG.info("%s[%d]: restored at position %d", self.name, partition, runner.position)
        self.held[partition] = held
        return held

    def release(self, partitions: set[int]) -> None:
        """Partitions gone to another worker: forget them (it restores from the table)."""
        for partition in partitions:
            held = self.held.pop(partition, None)
            if held is not None and held.feed is not None:
                held.feed.close()

    def _key(self, partition: int, name: str) -> bytes:
        return f"{partition}/{self.name}/{name}".encode()

    # -- processing ---------------------------------------------------------------------------

    async def on_batch(self, events: list[EventT[Any]]) -> None:
        async with self.lock:
            by_partition: dict[int, list[tuple[StageRecord, Source]]] = {}
            decode = self.config.codec.decode
            for event in events:
                header = Header.decode(event.headers)
                value = event.value
                envelope = decode(value) if header.kind in ("fact", "decision") else None
                record = StageRecord(header, envelope)
                by_partition.setdefault(event.message.partition, []).append((record, event))
            for partition, pairs in by_partition.items():
                await self._apply(partition, pairs)

    async def _apply(self, partition: int, pairs: list[tuple[StageRecord, Source]]) -> None:
        if not self._owns(partition):
            # Records fetched before a rebalance took the partition away (Faust's take buffer
            # keeps them): its owner reads them. Making a runner here would restore this
            # worker's own, older snapshot and apply them on it, missing the records between.
            _LOG.info(
                "%s[%d]: %d records of a partition gone elsewhere", self.name, partition, len(pairs)
            )
            return
        held = self.hold(partition)
        runner = held.runner
        if held.next_offset is None and runner.position < 0:
            # No snapshot: the state starts from the partition's first record.
            tp = TP(self.table_source_topic, partition)
            held.next_offset = (await self.app.consumer.earliest_offsets(tp))[tp]
        pairs = await self._in_sequence(partition, held, pairs)
        if not pairs:
            return
        records = [r for r, _ in pairs]
        if isinstance(runner, WorkloadPartition):
            out = await self._apply_workload(runner, held, records)
        elif isinstance(runner, ActuatorPartition):
            out = await self._apply_actuator(runner, held, records)
        else:
            out = runner.apply(records)
        last = max(_offset_of(e) for _, e in pairs)
        held.next_offset = max(held.next_offset or 0, last + 1)
        await self._publish(partition, out)
        held.unacked += [(r.position, e) for r, e in pairs]
        await self._maybe_store(partition, held)

    async def _in_sequence(
        self, partition: int, held: _Held, pairs: list[tuple[StageRecord, Source]]
    ) -> list[tuple[StageRecord, Source]]:
        """The batch's records in sequence from the state's next offset (see `in_sequence`).

        A hole (records missing before one Faust delivered) is filled by reading the missing
        records from Kafka directly: Faust drops records fetched before a rebalance, and a
        restarted worker's consumer may start past a snapshot's end. If they cannot be read
        (deleted by retention, broker gone), the records up to the hole are kept and the
        consumer is sent back to the first missing one."""
        for _ in range(len(pairs) + 1):  # each pass fills one hole, or returns
            offsets = [_offset_of(e) for _, e in pairs]
            keep = in_sequence(held.next_offset, offsets)
            if keep == len(pairs):
                return pairs
            expected = max([held.next_offset or 0] + [o + 1 for o in offsets[:keep]])
            filled = await self._read_hole(partition, expected, offsets[keep] - 1)
            if filled is None:
                break
            _LOG.info(
                "%s[%d]: records %d-%d missing before record %d; read from Kafka",
                self.name,
                partition,
                expected,
                offsets[keep] - 1,
                offsets[keep],
            )
            pairs = pairs[:keep] + filled + pairs[keep:]
        offsets = [_offset_of(e) for _, e in pairs]
        keep = in_sequence(held.next_offset, offsets)
        expected = max([held.next_offset or 0] + [o + 1 for o in offsets[:keep]])
        if held.sought != expected:  # once: the records sent again may already be queued
            _LOG.warning(
                "%s[%d]: record %d after a hole; reading again from %d",
                self.name,
                partition,
                offsets[keep],
                expected,
            )
            held.sought = expected
            await self.app.consumer.seek(TP(self.table_source_topic, partition), expected)
        return pairs[:keep]

    async def _read_hole(
        self, partition: int, first: int, last: int
    ) -> list[tuple[StageRecord, Source]] | None:
        """Records `first`..`last` of the source partition, read off the event loop; None if
        they cannot all be read."""
        if last < first:
            return None
        loop = asyncio.get_running_loop()
        try:
            messages = await loop.run_in_executor(None, self._read_source, partition, first, last)
        except LogError as error:
            _LOG.warning(
                "%s[%d]: could not read records %d-%d: %s", self.name, partition, first, last, error
            )
            return None
        if [m.offset for m in messages] != list(range(first, last + 1)):
            return None  # some are gone (retention): only a seek can tell what is left
        decode = self.config.codec.decode
        out: list[tuple[StageRecord, Source]] = []
        for m in messages:
            header = Header.decode(m.headers)
            envelope = decode(m.value or b"") if header.kind in ("fact", "decision") else None
            out.append((StageRecord(header, envelope), _Fetched(m.offset)))
        return out

    def _read_source(self, partition: int, first: int, last: int) -> list[Message]:
        topic = self.table_source_topic
        reader = PartitionReader(self.config.bootstrap, topic, partition, start=first)
        try:
            return reader.read_until(last)
        finally:
            reader.close()

    async def _apply_workload(
        self, runner: WorkloadPartition, held: _Held, records: list[StageRecord]
    ) -> StageOutput:
        assert held.feed is not None
        todo = [r for r in records if r.position > runner.position and r.header.kind != "progress"]
        if not todo:
            return runner.apply(records)
        # Up to just before the batch's first record the view can be brought in steps,
        # yielding in between (a restart may have far to go); from there each record is
        # applied with the view at its own position, never beyond.
        before = todo[0].position - 1
        while runner.view_position < before:
            upto = min(before, runner.view_position + CATCH_UP_STEP)
            await held.feed.prefetch(runner.view_position + 1, upto)
            runner.catch_up(upto)
            self.steps += 1
            await asyncio.sleep(0)
        await held.feed.prefetch(runner.view_position + 1, todo[-1].position)
        return runner.apply(records)

    async def _apply_actuator(
        self, runner: ActuatorPartition, held: _Held, records: list[StageRecord]
    ) -> StageOutput:
        assert held.feed is not None
        runner.receive(records)
        out = StageOutput()
        while runner.position < runner.reachable:
            upto = min(runner.reachable, runner.position + CATCH_UP_STEP)
            await held.feed.prefetch(runner.position + 1, upto)
            out.decisions += runner.advance(upto).decisions
            self.steps += 1
            await asyncio.sleep(0)
        return out

    async def _publish(self, partition: int, out: StageOutput) -> None:
        encode = self.config.codec.encode
        region = self.config.topics.region.encode()
        for decision in out.decisions:
            self.sent.append(
                await self.decisions.send(
                    key=decision.key.encode(),
                    value=encode(decision),
                    timestamp=decision.occurred_at / 1e6,
                )
            )
        self.published += len(out.decisions)
        if out.to_actuator or out.progress is not None:
            for placed in out.to_actuator:
                header = Header("decision", placed.position, source=partition, order=placed.order)
                self.sent.append(
                    await self.actuator.send(
                        key=region,
                        value=encode(placed.envelope),
                        partition=0,
                        headers=list(header.encode()),
                    )
                )
            if out.progress is not None:
                header = Header("progress", out.progress, source=partition)
                self.sent.append(
                    await self.actuator.send(
                        key=region, value=b"", partition=0, headers=list(header.encode())
                    )
                )

    # -- snapshots and acknowledgements ------------------------------------------------------

    async def _maybe_store(self, partition: int, held: _Held, force: bool = False) -> None:
        position = held.runner.position
        moved = position - held.stored_position
        if moved <= 0 and not held.unacked:
            return
        due = (
            force
            or moved >= self.config.snapshot_every
            or time.monotonic() - held.stored_at >= self.config.snapshot_interval_s
        )
        if due and moved > 0:
            await self.store(partition, held)
        await self._ack(held)

    async def store(self, partition: int, held: _Held) -> None:
        """Have the decisions made so far confirmed, then store the partition's state in the
        table and have that confirmed too (only then may its records be acknowledged)."""
        if not self._owns(partition):
            return  # revoked meanwhile: the next owner goes on from the stored snapshot
        sent, self.sent = self.sent, []
        await self.app.producer.flush()
        await confirm(sent, "decisions")
        if not self._owns(partition):
            return  # revoked during the flush
        data = state_codec.encode(held.runner.snapshot())
        version = f"{held.runner.position}-{self.token}"
        chunks = [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]
        keys = [self._key(partition, f"{version}/{i}") for i in range(len(chunks))]
        for key, chunk in zip(keys, chunks, strict=True):
            self.table[key] = chunk
        meta = {
            "position": held.runner.position,
            "next_offset": held.next_offset,
            "chunks": [k.decode() for k in keys],
            "sha256": hashlib.sha256(data).hexdigest(),
        }
        self.table[self._key(partition, "meta")] = json.dumps(meta).encode()
        for old in held.stored_keys:
            self.table.pop(old, None)
        await confirm(self.table.take_unconfirmed(), f"{self.name} snapshot writes")
        held.stored_keys = keys
        held.stored_position = held.runner.position
        held.stored_at = time.monotonic()

    async def _ack(self, held: _Held) -> None:
        """Acknowledge, in offset order, the records the stored (and confirmed) snapshot
        covers, up to the first it does not (see the module docstring)."""
        if self.stream is None:
            return
        done = 0
        for position, source in held.unacked:
            if position > held.stored_position:
                break
            if not isinstance(source, _Fetched):  # a record read by the worker: no Faust event
                await self.stream.ack(source)
            done += 1
        del held.unacked[:done]

    def _owns(self, partition: int) -> bool:
        topic = self.table_source_topic
        return TP(topic, partition) in self.app.consumer.assignment()

    @property
    def table_source_topic(self) -> str:
        t = self.config.topics
        return {"pool": t.pool, "scorer": t.scorer, "workload": t.workload}.get(
            self.name, t.actuator
        )

    async def store_idle(self) -> None:
        """Store partitions that moved but got no batch since (a timer calls this)."""
        async with self.lock:
            for partition, held in list(self.held.items()):
                if held.runner.position > held.stored_position and (
                    time.monotonic() - held.stored_at >= self.config.snapshot_interval_s
                ):
                    await self.store(partition, held)
                    await self._ack(held)

    # -- the watch: records committed but never applied, a consumer that stopped ---------------

    async def watch(self) -> None:
        """Compare, for each partition this worker owns, where its state ends with where the
        group's committed offset and the partition's end are (the broker's word, not Faust's).

        A hole is otherwise seen only when a later record arrives; at a partition's tail none
        does. Records before the committed offset that the state does not hold were dropped
        and committed past by Faust (at a rebalance or a restart): they will never be
        delivered, so they are read from Kafka and applied here, as for a hole.

        Records after the state's end that stay undelivered, with no progress, for
        `FaustConfig.stall_after_s` while the broker answers mean a stalled worker: Faust's
        consumer stopped fetching (after a network fault's heal: faust-streaming #629), or a
        stage waits on something that never comes. The worker says so and exits
        (`STALLED_EXIT`); its supervisor starts it again, and the new worker restores the
        stored snapshots and reads what follows them. The watch waits while the group
        rebalances or the tables recover, and while the broker does not answer."""
        now = time.monotonic()
        mine = sorted(
            tp.partition
            for tp in self.app.consumer.assignment()
            if tp.topic == self.table_source_topic
        )
        if self.stream is None or self.app.rebalancing or self.app.in_recovery or not mine:
            self.watched.clear()
            return
        loop = asyncio.get_running_loop()
        try:
            found = await loop.run_in_executor(None, self._read_offsets, mine)
        except LogError:
            self.watched.clear()  # the broker does not answer: no stall of this worker's
            return
        for partition in mine:
            if partition in found:
                await self._fill_committed(partition, found[partition])
        self._check_stalled(mine, found, now)

    def _read_offsets(self, partitions: list[int]) -> dict[int, PartitionOffsets]:
        if self._offsets is None:
            group = self.config.topics.app_id
            self._offsets = GroupOffsets(self.config.bootstrap, group, self.table_source_topic)
        return self._offsets.read(partitions)

    async def _fill_committed(self, partition: int, at: PartitionOffsets) -> None:
        """Apply the records before the committed offset that the state does not hold."""
        if at.committed <= 0 or self.lock.locked():
            return  # nothing committed; or a batch is being applied (the next watch looks)
        async with self.lock:
            if not self._owns(partition):
                return
            held = self.hold(partition)
            if held.next_offset is None:
                if held.runner.position >= 0:
                    return  # restored from a snapshot that stored no offset: unknown
                held.next_offset = at.low  # no snapshot: the state starts at the first record
            if at.committed <= held.next_offset:
                return
            first, last = held.next_offset, at.committed - 1
            _LOG.warning(
                "%s[%d]: records %d-%d committed but never applied (no later record came); "
                "read from Kafka",
                self.name,
                partition,
                first,
                last,
            )
            filled = await self._read_hole(partition, first, last)
            if filled:
                await self._apply(partition, filled)

    def _check_stalled(
        self, partitions: list[int], found: dict[int, PartitionOffsets], now: float
    ) -> None:
        limit = self.config.stall_after_s
        for partition in partitions:
            at = found.get(partition)
            held = self.held.get(partition)
            mark = held.next_offset if held is not None else None
            if mark is None and at is not None:  # no record delivered yet: from the commit
                mark = at.committed if at.committed >= 0 else at.low
            if at is None or mark is None or mark >= at.end:
                self.watched.pop(partition, None)  # nothing waiting (or nothing known)
                continue
            progress = (mark, self.steps)
            seen = self.watched.get(partition)
            if seen is None or seen[0] != progress:
                self.watched[partition] = (progress, now)
                continue
            if now - seen[1] < limit:
                continue
            _LOG.error(
                "%s[%d]: records %d-%d have waited on the broker for %.0f s and none was "
                "delivered (the broker answers): this worker is stalled and exits for its "
                "supervisor to start it again",
                self.name,
                partition,
                mark,
                at.end - 1,
                now - seen[1],
            )
            try:
                for handler in logging.getLogger().handlers:
                    handler.flush()
                self._say_where_it_waits()
            finally:
                os._exit(STALLED_EXIT)  # not Faust's stop: what stalled may hold that up too

    def _say_where_it_waits(self) -> None:
        """What every thread and task waits on, to the process's own stderr (Faust's worker
        puts a logger in `sys.stderr`'s place, one with no file descriptor)."""
        err = sys.__stderr__
        if err is None:
            return
        err.write("where the stalled worker waits (threads, then tasks):\n")
        err.flush()
        faulthandler.dump_traceback(err, all_threads=True)
        loops = [asyncio.get_running_loop()]
        other = getattr(getattr(self.app.consumer, "_thread", None), "thread_loop", None)
        if isinstance(other, asyncio.AbstractEventLoop):
            loops.append(other)  # the consumer thread's (read from here: a best effort)
        for loop in loops:
            try:
                for task in list(asyncio.all_tasks(loop)):
                    err.write(f"task {task.get_name()}: {_awaiting(task.get_coro())}\n")
            except RuntimeError:
                continue
        err.flush()


def _awaiting(coro: Any) -> str:
    """A coroutine's chain of awaits, outermost first (`file:line function` each)."""
    steps: list[str] = []
    while coro is not None and len(steps) < 30:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            steps.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return " -> ".join(steps) or "(not started)"


def in_sequence(next_offset: int | None, offsets: list[int]) -> int:
    """How many of a partition's records (by their offsets, in order) may be applied to a state
    that holds every record before `next_offset` (None: no such bound is known).

    A record before `next_offset` is in the state already (the stage skips it by position); one
    at it follows the state; one after it follows a hole (a record fetched before a rebalance
    and handed over after it, or a consumer ahead of the snapshot its worker restored), and
    applying it would decide from a state that misses the records in between: the same
    decision ids with other contents. Everything from the first hole on waits."""
    if next_offset is None:
        return len(offsets)
    expected = next_offset
    for i, offset in enumerate(offsets):
        if offset > expected:
            return i
        expected = max(expected, offset + 1)
    return len(offsets)


def raw_topic(app: faust.App, name: str, partitions: int | None = None) -> Any:
    """A topic of bytes. (Faust's default serializer is JSON even for ``value_type=bytes``,
    and a record it cannot decode crashes the agent *and is acknowledged*: lost.)"""
    return app.topic(
        name,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=partitions,
    )


def _scratch_folder(app_id: str) -> str:
    """A temporary folder for Faust's data directory, removed when the process exits."""
    made = tempfile.mkdtemp(prefix=f"{app_id}-data-")
    atexit.register(shutil.rmtree, made, True)
    return made


def build_app(config: FaustConfig) -> tuple[faust.App, dict[str, StageHost]]:
    """The Faust app of `config`'s region and its stage hosts (by stage name)."""
    t = config.topics
    app = faust.App(
        t.app_id,
        broker=f"kafka://{config.bootstrap}",
        datadir=config.datadir or _scratch_folder(t.app_id),
        store="memory://",
        web_enabled=False,
        processing_guarantee="at_least_once",
        broker_session_timeout=config.session_timeout_s,
        broker_heartbeat_interval=max(0.5, config.session_timeout_s / 10),
        broker_request_timeout=max(30.0, config.session_timeout_s + 5),
        broker_rebalance_timeout=max(30.0, config.session_timeout_s * 2),
        producer_linger=config.producer_linger_s,
        consumer_auto_offset_reset="earliest",
        stream_wait_empty=False,
        stream_publish_on_commit=False,
        broker_commit_interval=config.commit_interval_s,
        topic_allow_declare=False,
        table_standby_replicas=0,
        loghandlers=[],
    )
    app.transport = _Transport(app.conf.broker_consumer, app)
    settings = config.settings
    hosts: dict[str, StageHost] = {}

    def table(name: str) -> PartitionedTable:
        made = PartitionedTable(
            app,
            name=name,
            partitions=t.stage_partitions[name],
            key_type=bytes,
            value_type=bytes,
            beacon=app.tables.beacon,
        )
        app.tables.add(made)
        return made

    def keyed(decider_factory: Callable[[], Any]) -> Callable[[int, JournalFeed | None], Runner]:
        return lambda _p, _feed: KeyedPartition(decider_factory())

    def workload(_p: int, feed: JournalFeed | None) -> Runner:
        assert feed is not None
        return WorkloadPartition(settings, feed)

    def actuator(_p: int, feed: JournalFeed | None) -> Runner:
        assert feed is not None
        return ActuatorPartition(settings, feed, t.workload_partitions)

    stages: dict[str, tuple[str, int, Callable[[int, JournalFeed | None], Runner], bool]] = {
        "pool": (t.pool, t.pool_partitions, keyed(lambda: ExclusionWatcher(settings)), False),
        "scorer": (t.scorer, 1, keyed(lambda: Scorer(settings)), False),
        "workload": (t.workload, t.workload_partitions, workload, True),
        "actuator": (t.actuator, 1, actuator, True),
    }
    for name, (topic_name_, partitions, make, journal) in stages.items():
        host = StageHost(app, config, name, table(name), make, journal=journal)
        hosts[name] = host
        source = raw_topic(app, topic_name_, partitions)
        _agent(app, host, source, config)

    async def store_idle_partitions() -> None:
        for host in hosts.values():
            await host.store_idle()

    async def watch_partitions() -> None:
        for host in hosts.values():
            await host.watch()  # never waits for a stage's lock: what holds it may have stalled

    app.timer(interval=max(1.0, config.snapshot_interval_s / 2))(store_idle_partitions)
    app.timer(interval=max(1.0, config.snapshot_interval_s / 2))(watch_partitions)

    # A rebalance first revokes every partition, then assigns; a partition this worker keeps
    # goes on from the consumer's position, not from the committed offset, so its runner must
    # be kept: only partitions that went elsewhere are forgotten (their next owner restores).
    async def forget_gone(_sender: Any, /, *args: Any, signal: Any, **_kw: Any) -> None:
        assigned: set[TP] = args[0] if args else set()
        for host in hosts.values():
            mine = {tp.partition for tp in assigned if tp.topic == host.table_source_topic}
            host.release(set(host.held) - mine)

    app.on_partitions_assigned.connect(forget_gone)

    return app, hosts


def _agent(app: faust.App, host: StageHost, source: Any, config: FaustConfig) -> None:
    async def process(stream: StreamT[Any]) -> None:
        host.stream = stream
        batches = stream.noack_take(  # type: ignore[attr-defined]  # Stream has it, StreamT not
            config.batch_max, within=config.batch_within_s
        )
        async for events in batches:
            await host.on_batch(list(events))

    process.__name__ = f"deciders_{host.name}"
    app.agent(source, name=f"deciders-{host.name}")(process)


def run_worker(config: FaustConfig) -> None:
    """Run one worker until SIGTERM or SIGINT (Faust's worker handles both)."""
    app, _ = build_app(config)
    worker = faust.Worker(app, loglevel=config.log_level, quiet=True)
    worker.execute_from_commandline()
