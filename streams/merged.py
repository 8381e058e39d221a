"""A deterministic merged history: the events of several topics in one order, for replay.

Replay, rebuilds and the embedded decider runner read a region's history as one sequence.
`MergedHistory` reads every partition of the topics through the log seam and merges them by
the head of each partition: the next event is always the smallest head by
``(occurred_at, topic, partition, offset)``. An event is given out only once every partition
it could precede has a head (or has ended), so the order depends on what the partitions hold,
never on how polls happen to slice and interleave them.

When each partition is in event-time order (the writers append in event time), this is the
total order by ``(occurred_at, topic, partition, offset)``. A record that is late within its
partition comes out in its partition's order, after the partition's earlier records.

Memory is bounded: each partition buffers at most `buffer_per_partition` decoded events (plus
one poll); a partition whose buffer is full is paused until it drains.

Two modes:

- ``until="end"`` (or explicit end offsets): read up to the end offsets taken at the start,
  then stop. This is a complete history: the same log gives the same sequence, byte for byte.
- ``until=None`` (tailing): follow the log. A partition with no buffered event holds the
  others back until it has one or is at its current end, so events written later than their
  event time may come out after later ones.
- ``until=Following(...)``: follow a log that one writer is still appending to in event-time
  order, and give out the same sequence as ``until="end"`` would once the writer is done. The
  writer says how far it has written (`Following.watermark`: every record of event time below it
  is in the log) and when it is done (`Following.complete`); an event is given out only below
  the watermark, or once the log is complete (then the end offsets are taken and the history
  reads to them, as ``until="end"``). A consumer can so follow a history while it is written
  (the demo's projections follow its simulation) and still fold it exactly as one read.
"""

from __future__ import annotations

import heapq
import logging
import time
import uuid
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from schemas.codec import Codec
from schemas.errors import CodecError
from streams.deadletter import DeadLetters
from streams.log import Consumer, EventLog, LogTimeoutError, Record, TopicPartition
from streams.reader import Decoded, Decoder, new_decoded
from streams.schema_store import SchemaStore
from streams.topics import topic_name

_LOG = logging.getLogger("spotcap.merged")
_END_REFRESH_S = 1.0  # tailing: how often to learn the partitions' current ends when waiting
_FOLLOW_REFRESH_S = 0.2  # following a writer: how often to ask it how far it has written

# The key a partition head is ordered by.
_Key = tuple[int, str, int, int]


@runtime_checkable
class Following(Protocol):
    """What a writer still appending says to a history that follows it (``until=``)."""

    def watermark(self) -> int:
        """An event time (µs): every record whose event time is below it is in the log now,
        and no record below it will be appended later."""
        ...

    def complete(self) -> bool:
        """Whether the writer is done: everything it writes is in the log."""
        ...


class HistoryStalledError(LogTimeoutError):
    """A partition the merge waits on gave no record for too long although its end offset
    says there are more."""


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a merged history has read (records include undecodable ones)."""

    records_read: int
    records_total: int | None  # None when tailing
    events_read: int
    undecodable: int

    @property
    def fraction(self) -> float | None:
        if not self.records_total:
            return None if self.records_total is None else 1.0
        return min(1.0, self.records_read / self.records_total)


class _Partition:
    __slots__ = ("buffer", "done", "end", "paused", "position")

    def __init__(self, start: int, end: int | None) -> None:
        self.position = start  # next offset to read
        self.end = end  # None: tailing, and the end is unknown so far
        self.buffer: deque[Decoded] = deque()
        self.done = end is not None and start >= end
        # Held back (done, or its buffer full): paused in the consumer while it is assigned,
        # and again whenever it is assigned (a pause asked before that waits for it).
        self.paused = False


class MergedHistory:
    """Decoded events of `topics` (logical names: ``lifecycle``, ``market``, ...) of `region`
    in one deterministic order; iterate it, or call `read` in a loop."""

    def __init__(
        self,
        log: EventLog,
        codec: Codec,
        region: str,
        topics: Sequence[str],
        *,
        until: Literal["end"] | Mapping[TopicPartition, int] | Following | None = "end",
        start: Mapping[TopicPartition, int] | None = None,
        schema_store: SchemaStore | None = None,
        dead_letters: DeadLetters | None = None,
        poll_records: int = 500,
        buffer_per_partition: int = 1000,
        stall_timeout_s: float = 60.0,
        group: str | None = None,
    ) -> None:
        if buffer_per_partition < 1:
            raise ValueError("buffer_per_partition must be at least 1")
        self._log = log
        self._decoder = Decoder(codec, schema_store)
        self._dead_letters = dead_letters
        self._poll_records = poll_records
        self._capacity = buffer_per_partition
        self._stall_timeout_s = stall_timeout_s
        self._names = [topic_name(region, t) for t in topics]
        # Following a writer: its watermark when the partitions' ends were last learnt.
        self._following = until if isinstance(until, Following) else None
        self._safe_below = -1
        self._tailing = until is None or self._following is not None
        self._partitions: dict[TopicPartition, _Partition] = {}
        starts = start or {}
        for name in self._names:
            ends = log.end_offsets(name)
            for n, end in sorted(ends.items()):
                tp = (name, n)
                if until is None or self._following is not None:
                    last: int | None = None
                elif until == "end":
                    last = end
                else:
                    assert isinstance(until, Mapping)
                    last = until.get(tp, end)
                self._partitions[tp] = _Partition(starts.get(tp, 0), last)
        self._heap: list[_Key] = []
        # Partitions not done whose buffer is empty: nothing can be given out while any exists
        # (tailing: unless it is at its current end).
        self._empty = {tp for tp, p in self._partitions.items() if not p.done}
        self._records_total = (
            None
            if self._tailing
            else sum(max(0, (p.end or 0) - p.position) for p in self._partitions.values())
        )
        self._records_read = 0
        self._events_read = 0
        self._undecodable = 0
        self._last_progress = time.monotonic()
        self._last_end_refresh = -float("inf")
        # What the consumer has assigned so far: only those can be paused or resumed in it
        # (a history may decide to hold a partition before its first poll has assigned it).
        self._assigned: set[TopicPartition] = set()
        self._consumer: Consumer | None = log.consumer(
            group or f"spotcap-history-{uuid.uuid4().hex}", self._names, listener=self
        )

    # -- what callers see ----------------------------------------------------------------

    @property
    def progress(self) -> Progress:
        return Progress(
            self._records_read, self._records_total, self._events_read, self._undecodable
        )

    @property
    def buffered(self) -> int:
        """Decoded events held, waiting for their turn (bounded per partition)."""
        return sum(len(p.buffer) for p in self._partitions.values())

    @property
    def finished(self) -> bool:
        """Every partition read to its end and every event given out (never when tailing)."""
        return not self._tailing and not self._heap and not self._empty

    def resume_positions(self) -> dict[TopicPartition, int]:
        """Where each partition must be read again from (``start``) to give out every event
        not given out yet: a follower that stores these with the state it folded so far
        resumes exactly after it."""
        return {
            tp: p.buffer[0].origin.offset if p.buffer else p.position
            for tp, p in self._partitions.items()
        }

    def reached(self, ends: Mapping[TopicPartition, int]) -> bool:
        """Every event before `ends` (end offsets taken earlier) has been given out: a
        follower has read what the log held when it took them."""
        positions = self.resume_positions()
        return all(positions.get(tp, 0) >= end for tp, end in ends.items())

    def __iter__(self) -> Iterator[Decoded]:
        try:
            while not self.finished:
                yield from self.read()
        finally:
            self.close()

    def read(self, max_events: int = 1000, timeout_s: float = 1.0) -> list[Decoded]:
        """The next events in order: up to `max_events`, returning as soon as there are some,
        waiting at most `timeout_s` for the first. Empty at the end (see `finished`)."""
        out: list[Decoded] = []
        deadline = time.monotonic() + timeout_s
        while True:
            self._emit(out, max_events)
            if out or self.finished:
                return out
            if self._following is not None and not self._heap and self._learn():
                continue  # nothing buffered: the writer may be done
            left = deadline - time.monotonic()
            if left <= 0:
                return out
            self._fill(min(left, 1.0))

    def close(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            consumer.close()

    # -- the consumer's listener -----------------------------------------------------------

    def on_assign(self, consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        self._last_progress = time.monotonic()  # joining the group is not a stall
        self._assigned.update(partitions)
        held = []
        for tp in partitions:
            partition = self._partitions[tp]
            consumer.seek(*tp, partition.position)
            if partition.done or partition.paused:
                held.append(tp)
                partition.paused = True
        if held:
            consumer.pause(held)

    def on_revoke(self, consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        # The group is this history's own: partitions leave it only when it closes. A held
        # partition stays held: it is paused again if it is assigned again.
        self._assigned.difference_update(partitions)

    # -- merging ---------------------------------------------------------------------------

    def _emit(self, out: list[Decoded], max_events: int) -> None:
        heap = self._heap
        partitions = self._partitions
        before = len(out)
        while heap and len(out) < max_events:
            if self._empty and not self._may_pass():
                break
            _, topic, number, _ = heapq.heappop(heap)
            tp = (topic, number)
            partition = partitions[tp]
            out.append(partition.buffer.popleft())
            if partition.buffer:
                head = partition.buffer[0]
                heapq.heappush(heap, (head.envelope.occurred_at, topic, number, head.origin.offset))
            elif not partition.done:
                self._empty.add(tp)
            if (
                partition.paused
                and not partition.done
                and len(partition.buffer) * 2 <= (self._capacity)
            ):
                self._resume(tp)
        self._events_read += len(out) - before

    def _may_pass(self) -> bool:
        """Tailing: partitions with nothing buffered hold the merge back unless they are at
        their current end. Following a writer: unless they are at their current end and the
        smallest head is below the writer's watermark (read before those ends were), or the
        writer is done (then the history reads to the log's end offsets)."""
        if not self._tailing:
            return False
        if self._following is not None:
            return self._may_pass_following()
        now = time.monotonic()
        if now - self._last_end_refresh >= _END_REFRESH_S:
            self._last_end_refresh = now
            self._refresh_ends({tp[0] for tp in self._empty})
        return all(
            (p := self._partitions[tp]).end is not None and p.position >= p.end
            for tp in self._empty
        )

    def _refresh_ends(self, names: set[str]) -> None:
        for name in names:
            for n, end in self._log.end_offsets(name).items():
                if (name, n) in self._partitions:
                    self._partitions[(name, n)].end = end

    def _may_pass_following(self) -> bool:
        if self._heads_below_watermark():
            return True
        if self._learn():
            return not self._empty if self._following is None else self._heads_below_watermark()
        return False

    def _heads_below_watermark(self) -> bool:
        """Following: every partition with nothing buffered is at its end as learnt after the
        watermark was, and the smallest head is below that watermark (whatever those
        partitions are given later is at or above it, so comes after that head)."""
        return (
            bool(self._heap)
            and self._heap[0][0] < self._safe_below
            and all(
                (p := self._partitions[tp]).end is not None and p.position >= p.end
                for tp in self._empty
            )
        )

    def _learn(self) -> bool:
        """Following, at most every `_FOLLOW_REFRESH_S`: the writer's watermark, then (when it
        moved) every partition's end; once the writer is done, read to the end offsets
        (`_read_to_end`). Whether anything was learnt."""
        following = self._following
        now = time.monotonic()
        if following is None or now - self._last_end_refresh < _FOLLOW_REFRESH_S:
            return False
        self._last_end_refresh = now
        if following.complete():
            self._read_to_end()
            return True
        # The watermark first: every record below it is within the ends learnt after it. An
        # unchanged watermark has nothing new below it: the ends learnt after it still hold.
        watermark = following.watermark()
        if watermark == self._safe_below:
            return False
        self._safe_below = watermark
        self._refresh_ends(set(self._names))
        return True

    def _read_to_end(self) -> None:
        """The writer is done: from here on the history reads to the log's end offsets now."""
        self._following, self._tailing = None, False
        self._refresh_ends(set(self._names))
        for tp, partition in self._partitions.items():
            if partition.end is not None and partition.position >= partition.end:
                partition.done = True
                self._empty.discard(tp)
                self._pause(tp)
        self._records_total = self._records_read + sum(
            max(0, (p.end or 0) - p.position) for p in self._partitions.values()
        )

    def _fill(self, timeout_s: float) -> None:
        assert self._consumer is not None, "the history is closed"
        records = self._consumer.poll(self._poll_records, timeout_s)
        if records:
            self._last_progress = time.monotonic()
            self._take(records)
        elif not self._tailing and self._empty:
            stalled_s = time.monotonic() - self._last_progress
            if stalled_s > self._stall_timeout_s:
                waiting = ", ".join(
                    f"{tp[0]}[{tp[1]}] at {self._partitions[tp].position} of "
                    f"{self._partitions[tp].end}"
                    for tp in sorted(self._empty)
                )
                raise HistoryStalledError(
                    f"the merged history got no record for {stalled_s:.0f} s while waiting "
                    f"on {waiting}; is the log reachable, and were those offsets deleted by "
                    "retention or compaction?"
                )

    def _take(self, records: list[Record]) -> None:
        partitions = self._partitions
        decode = self._decoder.decode
        sent_dead_letters = False
        for record in records:
            tp = (record.topic, record.partition)
            partition = partitions[tp]
            if partition.done or record.offset < partition.position:
                continue  # past the end taken at the start, or already read
            partition.position = record.offset + 1
            self._records_read += 1
            origin = record.origin
            try:
                event = new_decoded(origin, decode(record, origin))
            except CodecError as error:
                self._undecodable += 1
                _LOG.warning("merged history: skipped an undecodable record: %s", error)
                if self._dead_letters is not None:
                    self._dead_letters.send(record, error)
                    sent_dead_letters = True
            else:
                if not partition.buffer:
                    heapq.heappush(
                        self._heap,
                        (event.envelope.occurred_at, record.topic, record.partition, record.offset),
                    )
                    self._empty.discard(tp)
                partition.buffer.append(event)
            if (
                partition.end is not None
                and not self._tailing
                and partition.position >= (partition.end)
            ):
                partition.done = True
                if not partition.buffer:
                    self._empty.discard(tp)
                self._pause(tp)
            elif len(partition.buffer) >= self._capacity and not partition.paused:
                self._pause(tp)
        if sent_dead_letters and self._dead_letters is not None:
            self._dead_letters.flush()

    def _pause(self, tp: TopicPartition) -> None:
        """Hold `tp` back: paused in the consumer now if it is assigned, else when it is
        (`on_assign`)."""
        partition = self._partitions[tp]
        if partition.paused:
            return
        partition.paused = True
        if self._consumer is not None and tp in self._assigned:
            self._consumer.pause([tp])

    def _resume(self, tp: TopicPartition) -> None:
        self._partitions[tp].paused = False
        if self._consumer is not None and tp in self._assigned:
            self._consumer.resume([tp])
