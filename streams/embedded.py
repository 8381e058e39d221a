"""The embedded event log: Avro container-file segments under the data directory.

Layout under ``<home>/log``::

    <topic>/topic.json                     partitions, retention, compaction, identity
    <topic>/<partition>/<base offset>.avro segments (Avro object container files)
    <topic>/<partition>/acknowledged       the partition's newest block (`streams.acknowledged`)
    _groups/<group>.json                   committed next offsets of a consumer group
    _quarantine/<run>/...                  bytes moved aside (torn writes, repairs), README
    .writer.lock                           held by the one process that may append

Durability (the fsync policy): `Producer.flush` writes each partition's queued records as one
block, then fsyncs the segment before it returns, so every record `flush` has acknowledged
survives `kill -9` and power loss. A block being written when the writer dies is torn; the
next writer of that partition cuts it back to the last whole block and says so, never below
the acknowledged end kept beside the segments; damage at rest is reported, dead-lettered and
read past, never cut (`streams.partition`). Commits of consumer offsets are written to a
temporary file, fsynced and renamed into place.

One process appends at a time (an exclusive `flock`); any number of processes read. A command
takes the lock for its whole run and refuses to start while another holds it; the services of
the live topology (actuator, reconciler, intake) open the log with `share_writes_s` and take it
for each flush only, waiting up to that long for it, so several of them write one home. Each
consumer group has one member, which reads every partition of its topics: the embedded log is
for one machine, so it needs no rebalancing. Keys go to partitions by Kafka's murmur2
partitioner, records without a key to partition 0.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from streams.log import (
    CLOSE_TIMEOUT_S,
    COMMIT_TIMEOUT_S,
    DeliveryError,
    FlushTimeoutError,
    LogError,
    PartitionListener,
    Record,
    TopicChange,
    TopicPartition,
    TopicSpec,
    UnknownTopicError,
)
from streams.partition import Partition
from streams.produce_queue import RecordQueue, Route, no_rows
from streams.segment import Columns, SegmentCorruptError, fsync_dir

SEGMENT_BYTES = 64 * 1024 * 1024
_POLL_INTERVAL_S = 0.01


class EmbeddedLog:
    """The event log in files under `root` (normally ``<home>/log``)."""

    def __init__(self, root: Path, *, share_writes_s: float | None = None) -> None:
        """`share_writes_s`: hold the writer lock only while a flush writes, waiting up to
        that long for another writer to let go (None: hold it from the first producer on)."""
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "_groups").mkdir(exist_ok=True)
        self._partitions: dict[TopicPartition, Partition] = {}
        self._lock_handle: Any = None
        self.share_writes_s = share_writes_s

    def describe(self) -> str:
        return f"embedded log at {self.root}"

    # -- topics ------------------------------------------------------------------------------

    def _topic_file(self, topic: str) -> Path:
        return self.root / topic / "topic.json"

    def apply_topics(self, specs: Iterable[TopicSpec]) -> list[TopicChange]:
        changes = []
        for spec in specs:
            path = self._topic_file(spec.name)
            wanted = {
                "partitions": spec.partitions,
                "retention_ms": spec.retention_ms,
                "compacted": spec.compacted,
            }
            if path.exists():
                current = json.loads(path.read_text())
                identity = current.pop("id", None)
                if current == wanted:
                    changes.append(TopicChange(spec.name, "unchanged"))
                    continue
                if current["partitions"] != spec.partitions:
                    changes.append(
                        TopicChange(
                            spec.name,
                            "drift",
                            f"has {current['partitions']} partitions, the spec wants "
                            f"{spec.partitions}; not changed (it would move keys)",
                        )
                    )
                    wanted["partitions"] = current["partitions"]
                action = "updated"
            else:
                action, identity = "created", None
            for number in range(wanted["partitions"]):
                (path.parent / f"{number:04d}").mkdir(parents=True, exist_ok=True)
            # The topic's identity tells it from a topic of the same name made after it was
            # deleted (a projection built from the first must not go on with the second).
            _write_json(path, {**wanted, "id": identity or uuid.uuid4().hex})
            changes.append(TopicChange(spec.name, action))
        return changes

    def delete_topics(self, names: Iterable[str]) -> list[str]:
        """Delete topics with their records and their groups' offsets; returns those deleted.

        Only the writer may (the lock keeps a producer in another process from appending to a
        topic while it goes).
        """
        self.acquire_writer()
        deleted = []
        for name in names:
            directory = self.root / name
            if not (directory / "topic.json").exists():
                continue
            for key in [k for k in self._partitions if k[0] == name]:
                del self._partitions[key]
            shutil.rmtree(directory)
            deleted.append(name)
        for group_file in (self.root / "_groups").glob("*.json"):
            offsets: dict[str, int] = json.loads(group_file.read_text())
            kept = {k: v for k, v in offsets.items() if k.rpartition("/")[0] not in deleted}
            if kept != offsets:
                _write_json(group_file, kept)
        fsync_dir(self.root)
        return deleted

    def topics(self) -> list[str]:
        return sorted(p.parent.name for p in self.root.glob("*/topic.json"))

    def topic_id(self, topic: str) -> str | None:
        """The identity the topic was given when it was made (None: made before identities)."""
        path = self._topic_file(topic)
        if not path.exists():
            raise UnknownTopicError(
                f"topic {topic!r} does not exist in the embedded log at {self.root}"
            )
        found = json.loads(path.read_text()).get("id")
        return str(found) if found else None

    def partitions_for(self, topic: str) -> int:
        path = self._topic_file(topic)
        if not path.exists():
            raise UnknownTopicError(
                f"topic {topic!r} does not exist in the embedded log at {self.root}; "
                "run `spotcap topics apply` first"
            )
        return int(json.loads(path.read_text())["partitions"])

    def partition(self, topic: str, number: int) -> Partition:
        found = self._partitions.get((topic, number))
        if found is None:
            found = Partition(
                topic, number, self.root / topic / f"{number:04d}", segment_bytes=SEGMENT_BYTES
            )
            self._partitions[(topic, number)] = found
        return found

    def end_offsets(self, topic: str) -> dict[int, int]:
        result = {}
        for n in range(self.partitions_for(topic)):
            partition = self.partition(topic, n)
            partition.refresh()
            result[n] = partition.end_offset
        return result

    # -- writing ------------------------------------------------------------------------------

    def acquire_writer(self) -> None:
        """Become the one writer (take the lock).

        Nothing is repaired here: each partition cuts back a torn tail left by a dead writer
        on this writer's first append to it (`Partition.append`), so a command writing one
        topic never touches another's files.
        """
        if self._lock_handle is not None:
            return
        self._lock_handle = _exclusive_lock(
            self.root / ".writer.lock",
            f"another process is writing the embedded log at {self.root}; "
            "stop it or use another --home",
        )
        # What this process read before may be stale: another writer may have appended since.
        self._partitions.clear()

    def producer(self) -> EmbeddedProducer:
        if self.share_writes_s is None:
            self.acquire_writer()
        return EmbeddedProducer(self)

    @contextmanager
    def writing(self) -> Iterator[None]:
        """The writer lock while the block runs: held already, or (sharing) taken for it."""
        if self._lock_handle is not None or self.share_writes_s is None:
            self.acquire_writer()
            yield
            return
        handle = _waited_lock(
            self.root / ".writer.lock",
            self.share_writes_s,
            f"another process held the embedded log at {self.root} for "
            f"{self.share_writes_s:g} s; find it with `fuser {self.root}/.writer.lock`",
        )
        try:
            # Another writer may have appended since this process last wrote.
            for partition in self._partitions.values():
                partition.forget_writing()
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            handle.close()

    def consumer(
        self, group: str, topics: Sequence[str], *, listener: PartitionListener | None = None
    ) -> EmbeddedConsumer:
        return EmbeddedConsumer(self, group, topics, listener)

    # -- consumer groups ----------------------------------------------------------------------

    def _group_file(self, group: str) -> Path:
        return self.root / "_groups" / f"{group}.json"

    def committed(self, group: str) -> dict[TopicPartition, int]:
        path = self._group_file(group)
        if not path.exists():
            return {}
        raw: dict[str, int] = json.loads(path.read_text())
        result = {}
        for name, offset in raw.items():
            topic, _, number = name.rpartition("/")
            result[(topic, int(number))] = offset
        return result

    def commit(self, group: str, positions: Mapping[TopicPartition, int]) -> None:
        current = self.committed(group)
        current.update(positions)
        _write_json(self._group_file(group), {f"{t}/{p}": o for (t, p), o in current.items()})

    def close(self) -> None:
        if self._lock_handle is not None:
            fcntl.flock(self._lock_handle.fileno(), fcntl.LOCK_UN)
            self._lock_handle.close()
            self._lock_handle = None


def _write_json(path: Path, data: object) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as handle:
        json.dump(data, handle, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


class EmbeddedProducer(RecordQueue):
    """Queues records by partition as they are produced (`streams.produce_queue`): a flush
    writes each partition's rows as one block and returns the records in produce order."""

    def __init__(self, log: EmbeddedLog) -> None:
        super().__init__()
        self._log = log
        # Per slot (a topic's partition): the topic, the partition, the topic's row lists.
        self._slots: list[tuple[str, int, list[Columns]]] = []

    def _route(self, topic: str) -> Route:
        count = self._log.partitions_for(topic)
        queues = [no_rows() for _ in range(count)]
        route = (len(self._slots), queues)
        self._slots.extend((topic, number, queues) for number in range(count))
        return route

    def flush(self, timeout_s: float = 30.0) -> list[Record]:
        touched, order = self.take()
        if not touched:
            return []
        batches: list[tuple[int, str, int, Columns]] = []
        for slot in touched:
            topic, number, queues = self._slots[slot]
            batches.append((slot, topic, number, queues[number]))
            queues[number] = no_rows()
        written: list[Callable[[], Record] | None] = [None] * len(self._slots)
        # A partition's write (one block, one fsync) cannot be interrupted: the deadline is
        # checked before each one.
        deadline = time.monotonic() + timeout_s
        try:
            with self._log.writing():
                self._append(batches, written, len(order), deadline, timeout_s)
        except OSError as error:
            raise DeliveryError(f"embedded log write failed: {error}") from error
        # Each partition's records in its own order, taken in the order they were produced.
        return [written[slot]() for slot in order]  # type: ignore[misc]

    def _append(
        self,
        batches: list[tuple[int, str, int, Columns]],
        written: list[Callable[[], Record] | None],
        queued: int,
        deadline: float,
        timeout_s: float,
    ) -> None:
        done = 0
        for slot, topic, number, rows in batches:
            if time.monotonic() >= deadline:
                raise FlushTimeoutError(
                    f"embedded log flush: {queued - done} of {queued} records not written "
                    f"within {timeout_s} s (partitions written before the limit keep "
                    "theirs: a retry writes those again, recognisable by event_id)"
                )
            records = self._log.partition(topic, number).append(rows)
            written[slot] = iter(records).__next__
            done += len(records)

    def close(self) -> None:
        if self.queued():
            self.flush()


class EmbeddedConsumer:
    """The one member of a consumer group (a per-group lock keeps out a second one).

    Every partition of its topics is assigned to it at its first poll and revoked at close;
    the listener hears of both, as with Kafka.
    """

    def __init__(
        self,
        log: EmbeddedLog,
        group: str,
        topics: Sequence[str],
        listener: PartitionListener | None = None,
    ) -> None:
        self._log = log
        self.group = group
        self.poll_errors = 0  # the embedded log has no transient errors; kept for the seam
        self._listener = listener
        lock_path = log.root / "_groups" / f"{group}.lock"
        self._closed = False
        try:
            self._lock: Any = _exclusive_lock(
                lock_path,
                f"consumer group {group!r} already has a member (the embedded log allows one per "
                f"group; see {lock_path}): close it first or use another group",
            )
        except OSError as error:
            if error.errno not in CANNOT_WRITE:
                raise
            self._lock = None  # a log this process cannot write: read it, commit nothing
        self._partitions: list[TopicPartition] = [
            (topic, n) for topic in topics for n in range(log.partitions_for(topic))
        ]
        self._assigned: list[TopicPartition] = []
        self._positions: dict[TopicPartition, int] = {}
        self._paused: set[TopicPartition] = set()
        self._next = 0  # round-robin start, so no partition starves

    def _assign(self) -> None:
        committed = self._log.committed(self.group)
        self._assigned = list(self._partitions)
        self._positions = {tp: committed.get(tp, 0) for tp in self._assigned}
        if self._listener is not None and self._assigned:
            self._listener.on_assign(self, list(self._assigned))

    def poll(self, max_records: int = 500, timeout_s: float = 1.0) -> list[Record]:
        if not self._assigned:
            self._assign()
        deadline = time.monotonic() + timeout_s
        while True:
            records = self._read(max_records)
            if records or time.monotonic() >= deadline:
                return records
            time.sleep(_POLL_INTERVAL_S)

    def _read(self, max_records: int) -> list[Record]:
        out: list[Record] = []
        moved: dict[TopicPartition, int] = {}
        n = len(self._assigned)
        for i in range(n):
            tp = self._assigned[(self._next + i) % n]
            if tp in self._paused:
                continue
            partition = self._log.partition(*tp)
            try:
                if self._positions[tp] >= partition.end_offset:
                    partition.refresh()
                got = partition.read(self._positions[tp], max_records - len(out))
            except SegmentCorruptError as error:
                raise LogError(
                    f"embedded log at {self._log.root}: {tp[0]}[{tp[1]}]: {error}; restore the "
                    "partition's segments from a copy, or replay them from Kafka"
                ) from error
            if got:
                moved[tp] = got[-1].offset + 1
                out.extend(got)
            if len(out) >= max_records:
                break
        # Positions move only once the whole poll has succeeded: nothing read is skipped.
        self._positions.update(moved)
        self._next = (self._next + 1) % max(n, 1)
        return out

    def commit(
        self, positions: Mapping[TopicPartition, int], timeout_s: float = COMMIT_TIMEOUT_S
    ) -> None:
        # One fsynced file rename: bounded by the disk, not by a peer, so `timeout_s` is not
        # needed here.
        if self._lock is None:
            raise LogError(
                f"the embedded log at {self._log.root} cannot be written by this process "
                f"(read-only): consumer group {self.group!r} cannot store its positions"
            )
        self._log.commit(self.group, positions)

    def committed(self) -> dict[TopicPartition, int]:
        mine = set(self._partitions)
        return {tp: o for tp, o in self._log.committed(self.group).items() if tp in mine}

    def assignment(self) -> list[TopicPartition]:
        return list(self._assigned)

    def _check_assigned(self, tps: Iterable[TopicPartition], what: str) -> list[TopicPartition]:
        wanted = list(tps)
        stray = [tp for tp in wanted if tp not in self._positions]
        if stray:
            raise LogError(
                f"cannot {what} {stray}: not assigned to group {self.group!r} (the embedded "
                "log assigns every partition at the first poll; seek inside on_assign)"
            )
        return wanted

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self._check_assigned([(topic, partition)], "seek")
        self._positions[(topic, partition)] = offset

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self._paused.update(self._check_assigned(partitions, "pause"))

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._paused.difference_update(self._check_assigned(partitions, "resume"))

    def paused(self) -> list[TopicPartition]:
        return sorted(self._paused)

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._listener is not None and self._assigned:
                self._listener.on_revoke(self, list(self._assigned))
        finally:
            self._assigned = []
            self._positions = {}
            self._paused.clear()
            if self._lock is not None:
                fcntl.flock(self._lock.fileno(), fcntl.LOCK_UN)
                self._lock.close()


CANNOT_WRITE = (errno.EROFS, errno.EACCES, errno.EPERM)
"""What opening a lock file says in a log this process cannot write (a read-only copy of a home,
another user's files)."""


def _waited_lock(path: Path, wait_s: float, held_too_long: str) -> Any:
    """An open file holding an exclusive flock on `path`, waiting up to `wait_s` for it;
    LogError(`held_too_long`) when it stays taken."""
    deadline = time.monotonic() + wait_s
    pause = 0.005
    while True:
        try:
            return _exclusive_lock(path, held_too_long)
        except LogError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.1)


def _exclusive_lock(path: Path, held_elsewhere: str) -> Any:
    """An open file holding an exclusive flock on `path`; LogError(`held_elsewhere`) if taken.

    The lock lasts until the file is closed (or the process ends, however it ends).
    """
    handle = open(path, "a+b")  # noqa: SIM115 (held until the owner closes it)
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as error:
        handle.close()
        raise LogError(held_elsewhere) from error
    return handle
