"""The event log seam: what every log implementation (Kafka, embedded) provides.

The log moves opaque records (key, value bytes, headers, timestamp) between partitions of
topics, like Kafka does; the codec gives the bytes meaning. Positions are the log's own
(topic, partition, offset): consumers commit the *next* offset to read, as Kafka does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from schemas.errors import Origin
from schemas.frozen import FrozenMap

_T = TypeVar("_T")
TopicPartition = tuple[str, int]
# A record the log could read only in part (damaged at rest); its value says why.
CORRUPT_HEADER = "spotcap.log.corrupt"
Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class Record:
    """One record read from (or delivered to) the log, with the position it holds there."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: Headers = ()

    @property
    def origin(self) -> Origin:
        return _new_origin(self.topic, self.partition, self.offset)


try:
    from streams import _framing
except ImportError:  # built without a C compiler: the dataclasses' own __init__
    _framing = None  # type: ignore[assignment]


def slots_constructor(cls: type[_T], *, checked: bool = False) -> Callable[..., _T]:
    """`cls(*fields)` for a frozen dataclass with slots (every field, positional, in order).

    Where the C extension is built (streams/_framing.c), a function that fills the slots
    directly: a frozen dataclass's `__init__` sets each field through `object.__setattr__`,
    about 0.5 µs for a record's seven, paid for every record, origin and message on the log
    paths. A class whose `__init__` does more than set its fields gets its own `__init__`.

    A frozen class's instances whose fields are all immutable values (strings, numbers,
    bytes, None, and tuples and `immutable` instances of those) are left out of the garbage
    collector's walks: they can be part of no reference cycle, and a batch holds thousands.

    `checked`: the caller has checked what the class's `__post_init__` checks (only checks,
    setting nothing), so the slots may be filled without it.
    """
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    own_init = hasattr(cls, "__post_init__") and not checked
    if _framing is None or own_init or not all(f.init for f in fields):
        return cls
    frozen = bool(cls.__dataclass_params__.frozen)  # type: ignore[attr-defined]
    try:
        return _framing.constructor(cls, tuple(f.name for f in fields), frozen)
    except TypeError:  # a field that is not a plain slot of `cls` itself (inherited, say)
        return cls


def immutable(*classes: type) -> None:
    """Declare classes whose instances are never changed once made: frozen dataclasses with
    slots (the envelope, its payloads) and `FrozenMap` (a dict that refuses changes). One held
    by a record, an origin, a decoded event or a message made by `slots_constructor` is left
    out of the collector's walks with it when it holds only immutable values. Classes that
    are not frozen plain slots classes are passed over."""
    if _framing is None:
        return
    for cls in classes:
        params = getattr(cls, "__dataclass_params__", None)
        if (params is None or not params.frozen) and cls is not FrozenMap:
            continue
        try:
            _framing.immutable(cls)
        except TypeError:  # not a plain slots class (a __dict__, inherited slots)
            continue


new_record = slots_constructor(Record)
_new_origin = slots_constructor(Origin)


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """How a topic is configured, in both implementations."""

    name: str
    partitions: int
    retention_ms: int
    compacted: bool = False
    doc: str = ""
    extra_config: Mapping[str, str] = field(default_factory=dict)

    def kafka_config(self) -> dict[str, str]:
        config = {
            "retention.ms": str(self.retention_ms),
            "cleanup.policy": "compact" if self.compacted else "delete",
        }
        if not self.compacted:
            # Producers stamp a record with its event time; retention measures from the time
            # the broker appended it, so a history written late (a replay, a backfill, a demo
            # of a past month) is kept `retention_ms` from its writing, not deleted at once.
            config["message.timestamp.type"] = "LogAppendTime"
        config.update(self.extra_config)
        return config


@dataclass(frozen=True, slots=True)
class TopicChange:
    """What applying a topic spec did: created, updated (with the keys changed) or unchanged."""

    name: str
    action: str  # "created" | "updated" | "unchanged" | "drift"
    detail: str = ""


class LogError(RuntimeError):
    """The log could not do what was asked (unreachable broker, delivery failure, ...)."""


class UnknownTopicError(LogError):
    """The topic does not exist (as opposed to a log that cannot be reached at all)."""


class UnreachableError(LogError):
    """The log did not answer within its bounded wait (a broker down or not there)."""


class DeliveryError(LogError):
    """Some produced records were not acknowledged; none of them may be treated as written."""


class LogTimeoutError(LogError):
    """A bounded wait on the log ran out; the message names the wait and its limit."""


class FlushTimeoutError(DeliveryError, LogTimeoutError):
    """`flush` gave up before every queued record was acknowledged."""


class ProduceTimeoutError(LogTimeoutError):
    """The producer's queue stayed full for longer than its limit (the broker is not taking
    records); the record was not queued."""


class CommitTimeoutError(LogTimeoutError):
    """A commit was not confirmed in time; it may or may not have happened."""


class CloseTimeoutError(LogTimeoutError):
    """A consumer did not leave its group in time (the broker learns of it by its session
    timeout instead)."""


class Producer(Protocol):
    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers = (),
        timestamp_ms: int | None = None,
    ) -> None:
        """Queue a record; it is written (acknowledged) only when `flush` returns.

        Waits (bounded) while the producer's queue is full; raises `ProduceTimeoutError` if it
        stays full.
        """

    def flush(self, timeout_s: float = 30.0) -> list[Record]:
        """Wait for every queued record; return them with their positions, in produce order.

        Raises `DeliveryError` if any record failed, `FlushTimeoutError` (a `DeliveryError`) if
        `timeout_s` ran out first; either way none of the queued records may be treated as
        written, and the queue is empty afterwards.
        """
        ...

    def close(self) -> None: ...


# Bounded waits of the consumer seam (STYLE.md §7): each is shorter than the broker's patience
# (Kafka's default session timeout is 45 s), so a stuck call is named before the group gives up.
COMMIT_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 10.0


class Consumer(Protocol):
    """One member of a consumer group.

    Partitions are assigned to the member inside `poll` (the embedded log assigns every
    partition to its one member at the first poll) and revoked inside `poll` (a rebalance) or
    `close`; the listener given to `EventLog.consumer` hears of both before records move.
    """

    poll_errors: int
    """Non-fatal errors met while polling (logged, then counted here; never dropped silently)."""

    def poll(self, max_records: int = 500, timeout_s: float = 1.0) -> list[Record]:
        """Up to `max_records` records, waiting at most `timeout_s` for the first."""
        ...

    def commit(
        self, positions: Mapping[TopicPartition, int], timeout_s: float = COMMIT_TIMEOUT_S
    ) -> None:
        """Record, durably, the next offset to read for each partition.

        Raises `CommitTimeoutError` if the commit is not confirmed within `timeout_s`.
        """

    def committed(self) -> dict[TopicPartition, int]:
        """The committed next offsets of this consumer's group, for its topics."""
        ...

    def assignment(self) -> list[TopicPartition]:
        """The partitions assigned to this member now (empty before the first assignment)."""
        ...

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Read `partition` from `offset` next (assigned partitions only).

        Inside `PartitionListener.on_assign` this sets where a newly assigned partition starts
        (a projection seeks to the offsets it stored in its own database there).
        """

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop returning records of these (assigned) partitions until `resume`; nothing is
        skipped: a paused partition resumes at the record after the last one returned."""

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        """Return records of these partitions again."""

    def paused(self) -> list[TopicPartition]: ...

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Revoke the assignment (the listener's `on_revoke` runs) and leave the group.

        Raises `CloseTimeoutError` if leaving takes longer than `timeout_s`.
        """


class PartitionListener(Protocol):
    """Hears of partitions assigned to and revoked from a consumer (called inside its `poll`
    and `close`, in the thread that calls them)."""

    def on_assign(self, consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        """Newly assigned partitions: load their state; `consumer.seek` here sets where each
        starts (else it starts at the group's committed offset, or at the beginning)."""

    def on_revoke(self, consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        """Partitions about to go (a rebalance, or `close`): flush their state and commit.
        With Kafka, partitions lost to the group (a missed session) come here too; committing
        them then fails with a `LogError`."""


class EventLog(Protocol):
    """A log of topics split into partitions, with consumer groups."""

    def describe(self) -> str:
        """Where the log is, in words (``Kafka at HOST:PORT``, ``embedded log at DIR``)."""
        ...

    def apply_topics(self, specs: Iterable[TopicSpec]) -> list[TopicChange]: ...

    def partitions_for(self, topic: str) -> int: ...

    def topic_id(self, topic: str) -> str | None:
        """The topic's identity, given when it was made: a topic deleted and made again under
        its name has another (None where the log cannot say)."""
        ...

    def end_offsets(self, topic: str) -> dict[int, int]:
        """The next offset to be written, per partition."""
        ...

    def producer(self) -> Producer: ...

    def consumer(
        self, group: str, topics: Sequence[str], *, listener: PartitionListener | None = None
    ) -> Consumer: ...

    def close(self) -> None: ...


def next_positions(records: Iterable[Record]) -> dict[TopicPartition, int]:
    """The positions to commit after processing `records`: each partition's last offset + 1."""
    positions: dict[TopicPartition, int] = {}
    for record in records:
        tp = (record.topic, record.partition)
        positions[tp] = max(positions.get(tp, 0), record.offset + 1)
    return positions
