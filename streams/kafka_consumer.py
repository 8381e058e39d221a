"""The Kafka consumer: a group member whose listener hears of assignments inside `poll`.

Consumers never auto-commit: positions are committed by the pipeline after its effects are
durable. librdkafka's synchronous commit and close take no timeout; both run under `bounded`,
so every wait has a limit and a name.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from confluent_kafka import OFFSET_INVALID, KafkaError, KafkaException
from confluent_kafka import Consumer as _KafkaConsumer
from confluent_kafka import TopicPartition as _KafkaTopicPartition

from streams.log import (
    CLOSE_TIMEOUT_S,
    COMMIT_TIMEOUT_S,
    CloseTimeoutError,
    CommitTimeoutError,
    Headers,
    LogError,
    LogTimeoutError,
    PartitionListener,
    Record,
    TopicPartition,
    new_record,
)

_LOG = logging.getLogger("spotcap.kafka")
_METADATA_TIMEOUT_S = 30.0
# Errors about the connection itself: while one of these is the latest, the broker is not there.
BROKER_DOWN = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN})


class BrokerHealth:
    """The latest connection-level error librdkafka reported (its ``error_cb``, served inside
    poll, consume and flush), so that a timeout can name its real cause and an idle consumer
    can say the broker is gone instead of waiting in silence."""

    def __init__(self) -> None:
        self.down: str | None = None
        self.outages = 0  # times the broker went from reachable (or unknown) to unreachable

    def __call__(self, error: KafkaError) -> None:
        if error.code() in BROKER_DOWN:
            if self.down is None:
                self.outages += 1
            self.down = error.str()

    def up(self) -> None:
        """Records arrived: whatever was wrong with the connection is over."""
        self.down = None


class KafkaConsumer:
    """A member of a consumer group; the listener hears of assignments inside `poll`."""

    def __init__(
        self,
        config: Mapping[str, Any],
        group: str,
        topics: Sequence[str],
        listener: PartitionListener | None = None,
    ) -> None:
        self.group = group
        self.poll_errors = 0
        self.health = BrokerHealth()
        self._reported_outage = 0  # the outage last warned about (one warning per outage)
        self._topics = list(topics)
        self._listener = listener
        settings = {
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "error_cb": self.health,
            **config,
        }
        self._cooperative = "cooperative" in str(settings.get("partition.assignment.strategy"))
        self._consumer = _KafkaConsumer(settings)
        self._assigned: set[TopicPartition] = set()
        self._paused: set[TopicPartition] = set()
        # Per paused partition, where it must start again: records librdkafka had fetched
        # before the pause took effect are held back, and the partition sought back to them.
        self._held_from: dict[TopicPartition, int] = {}
        # Seeks asked for inside on_assign become the assignment's start offsets: librdkafka
        # refuses a seek on a partition it is not fetching yet ("Erroneous state").
        self._staged: dict[TopicPartition, int] | None = None
        # Seeks librdkafka refused just after an assignment: retried at each poll; records of
        # those partitions are held back until one succeeds.
        self._pending_seeks: dict[TopicPartition, int] = {}
        self._staged_pauses: set[TopicPartition] = set()
        self._closing = False
        self._closed = False
        self._consumer.subscribe(
            self._topics,
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_revoke,
        )

    # -- rebalance callbacks (librdkafka calls them inside consume, poll and close) ----------

    def _on_assign(self, consumer: Any, partitions: list[_KafkaTopicPartition]) -> None:
        tps = [(p.topic, p.partition) for p in partitions]
        self._assigned.update(tps)
        self._staged = {}
        try:
            if self._listener is not None and tps:
                self._listener.on_assign(self, tps)
        finally:
            staged, self._staged = self._staged, None
            for p in partitions:
                # OFFSET_INVALID (what librdkafka hands us) starts at the committed offset.
                p.offset = staged.get((p.topic, p.partition), OFFSET_INVALID)
            if self._cooperative:
                consumer.incremental_assign(partitions)
            else:
                consumer.assign(partitions)
            if self._staged_pauses:
                # Paused inside on_assign: librdkafka knows the partitions only from here on.
                consumer.pause([_KafkaTopicPartition(*tp) for tp in self._staged_pauses])
                self._paused.update(self._staged_pauses)
                self._staged_pauses = set()

    def _on_revoke(self, consumer: Any, partitions: list[_KafkaTopicPartition]) -> None:
        tps = [(p.topic, p.partition) for p in partitions]
        try:
            if self._listener is not None and tps and not self._closing:
                self._listener.on_revoke(self, tps)
        finally:
            for tp in tps:
                self._assigned.discard(tp)
                self._paused.discard(tp)
                self._held_from.pop(tp, None)
                self._pending_seeks.pop(tp, None)
            # confluent-kafka unassigns after this callback returns (incrementally or not).

    # -- reading -----------------------------------------------------------------------------

    def poll(self, max_records: int = 500, timeout_s: float = 1.0) -> list[Record]:
        # librdkafka's consume(n, timeout) waits until it has n messages or the timeout ends;
        # this poll returns as soon as there is anything: take what is queued, else wait for
        # one message, then take what came with it.
        if self._pending_seeks:
            self._retry_seeks()
        deadline = time.monotonic() + timeout_s
        out: list[Record] = []
        messages = self._consumer.consume(max_records, timeout=0)
        while not messages:
            left = deadline - time.monotonic()
            if left <= 0:
                self._report_outage()
                return out
            first = self._consumer.poll(timeout=left)
            if first is not None:
                messages = [first, *self._consumer.consume(max_records - 1, timeout=0)]
        if self.health.down is not None and self._reported_outage == self.health.outages:
            _LOG.warning("Kafka consumer of group %s: the broker answers again", self.group)
        self.health.up()
        held = self._paused or self._pending_seeks
        if not held and _kafka_records is not None:
            # The messages to records in C, when none has an error or headers (then the
            # loop below takes the poll): the same records, without a Python frame apiece.
            fast = _kafka_records(messages)
            if fast is not None:
                return fast
        sent_back: set[TopicPartition] = set()
        for message in messages:
            error = message.error()
            if error is not None:
                if error.fatal():
                    raise LogError(f"Kafka consumer of group {self.group}: {error}")
                self.poll_errors += 1
                _LOG.warning("Kafka consumer of group %s: %s (not fatal)", self.group, error)
                continue
            if held and self._hold_back(message, sent_back):
                continue
            out.append(_record(message))
        for tp in sent_back:
            self._seek(tp, self._held_from[tp])
        return out

    def _report_outage(self) -> None:
        """Warn once per outage while the broker cannot be reached (librdkafka keeps trying)."""
        down = self.health.down
        if down is not None and self._reported_outage != self.health.outages:
            self._reported_outage = self.health.outages
            self.poll_errors += 1
            _LOG.warning(
                "Kafka consumer of group %s: the broker cannot be reached (%s); still trying",
                self.group,
                down,
            )

    def _hold_back(self, message: Any, sent_back: set[TopicPartition]) -> bool:
        """True for a record of a paused partition (fetched before the pause took effect) or of
        one whose seek is pending; the partition is sent back to it, so nothing is skipped."""
        tp = (message.topic(), message.partition())
        if tp in self._pending_seeks:
            return True
        if tp in self._paused:
            offset = message.offset()
            if offset < self._held_from.get(tp, offset + 1):
                self._held_from[tp] = offset
                sent_back.add(tp)
            return True
        return False

    def _retry_seeks(self) -> None:
        for tp, offset in list(self._pending_seeks.items()):
            try:
                self._consumer.seek(_KafkaTopicPartition(*tp, offset))
            except KafkaException:
                continue
            del self._pending_seeks[tp]

    def _seek(self, tp: TopicPartition, offset: int) -> None:
        try:
            self._consumer.seek(_KafkaTopicPartition(*tp, offset))
        except KafkaException as error:
            code = error.args[0].code()
            if code not in (KafkaError._STATE, KafkaError._UNKNOWN_PARTITION):
                raise LogError(f"seek {tp[0]}[{tp[1]}] to {offset}: {error}") from error
            # Assigned, but librdkafka is not fetching it yet: retried at the next poll.
            self._pending_seeks[tp] = offset
        if tp in self._paused:
            self._held_from[tp] = offset

    def seek(self, topic: str, partition: int, offset: int) -> None:
        tp = (topic, partition)
        if tp not in self._assigned:
            raise LogError(f"{topic}[{partition}] is not assigned to this member of {self.group}")
        if self._staged is not None:
            self._staged[tp] = offset
            return
        self._seek(tp, offset)

    def assignment(self) -> list[TopicPartition]:
        return sorted(self._assigned)

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        tps = self._check_assigned(partitions, "pause")
        if self._staged is not None:
            self._staged_pauses.update(tps)
            return
        fresh = [tp for tp in tps if tp not in self._paused]
        if not fresh:
            return
        self._consumer.pause([_KafkaTopicPartition(*tp) for tp in fresh])
        self._paused.update(fresh)
        # Records fetched before the pause would still come out of librdkafka's queue: a seek
        # to the position after the last record returned drops them (they are fetched again
        # after the resume). With nothing returned yet, `poll` holds back what comes.
        try:
            positions = self._consumer.position([_KafkaTopicPartition(*tp) for tp in fresh])
        except KafkaException as error:
            raise LogError(f"positions of {fresh} in group {self.group}: {error}") from error
        for position in positions:
            if position.offset >= 0:
                self._seek((position.topic, position.partition), position.offset)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        tps = self._check_assigned(partitions, "resume")
        if self._staged is not None:
            self._staged_pauses.difference_update(tps)
            return
        self._consumer.resume([_KafkaTopicPartition(*tp) for tp in tps])
        self._paused.difference_update(tps)
        for tp in tps:
            self._held_from.pop(tp, None)

    def paused(self) -> list[TopicPartition]:
        return sorted(self._paused)

    def _check_assigned(
        self, partitions: Iterable[TopicPartition], what: str
    ) -> list[TopicPartition]:
        tps = list(partitions)
        stray = [tp for tp in tps if tp not in self._assigned]
        if stray:
            raise LogError(f"cannot {what} {stray}: not assigned to this member of {self.group}")
        return tps

    # -- positions ---------------------------------------------------------------------------

    def commit(
        self, positions: Mapping[TopicPartition, int], timeout_s: float = COMMIT_TIMEOUT_S
    ) -> None:
        if not positions:
            return
        offsets = [_KafkaTopicPartition(t, p, o) for (t, p), o in positions.items()]
        try:
            result = bounded(
                lambda: self._consumer.commit(offsets=offsets, asynchronous=False),
                timeout_s,
                CommitTimeoutError(
                    f"the commit of group {self.group} was not confirmed within {timeout_s} s "
                    "(it may still happen); the records after the last confirmed commit will "
                    "be read again"
                ),
            )
        except KafkaException as error:
            raise LogError(f"commit of group {self.group} failed: {error}") from error
        failed = [tp for tp in result or () if tp.error is not None]
        if failed:
            raise LogError(
                f"commit of group {self.group} failed for "
                + ", ".join(f"{tp.topic}[{tp.partition}]: {tp.error}" for tp in failed)
            )

    def committed(self) -> dict[TopicPartition, int]:
        try:
            metadata = self._consumer.list_topics(timeout=_METADATA_TIMEOUT_S)
            partitions = [
                _KafkaTopicPartition(topic, n)
                for topic in self._topics
                for n in metadata.topics[topic].partitions
            ]
            found = self._consumer.committed(partitions, timeout=_METADATA_TIMEOUT_S)
        except KafkaException as error:
            raise LogError(f"committed offsets of group {self.group}: {error}") from error
        return {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            # The listener hears of the revocation here, in the caller's thread; the callback
            # librdkafka makes from inside close only tidies up.
            if self._listener is not None and self._assigned:
                self._listener.on_revoke(self, sorted(self._assigned))
        finally:
            self._closing = True
            bounded(
                self._consumer.close,
                timeout_s,
                CloseTimeoutError(
                    f"the consumer of group {self.group} did not leave the group within "
                    f"{timeout_s} s; the broker reassigns its partitions after its session "
                    "timeout"
                ),
            )


_T = TypeVar("_T")


def bounded(call: Callable[[], _T], timeout_s: float, timeout_error: LogTimeoutError) -> _T:
    """`call()`, or `timeout_error` if it has not returned within `timeout_s`.

    librdkafka's synchronous commit and close take no timeout. The call runs in a daemon
    thread so a caller is never held longer than its bound (and a process can still exit);
    a call that overruns finishes, or not, on its own.
    """
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as error:  # handed to the caller's thread
            outcome.append((False, error))

    thread = threading.Thread(target=run, name="spotcap-kafka-bounded", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not outcome:
        raise timeout_error
    ok, value = outcome[0]
    if not ok:
        raise value
    result: _T = value
    return result


try:
    from streams._framing import kafka_records as _kafka_records
except ImportError:  # built without a C compiler: the loop in `poll`
    _kafka_records = None  # type: ignore[assignment]
else:
    # The C side makes `Record`s once `streams.segment`'s import has bound the class; a process
    # that reads only Kafka (a test of the Faust workers) may not have imported it otherwise.
    import streams.segment  # noqa: F401


def _record(message: Any) -> Record:
    raw = message.headers()  # None for most records: no generator made for them
    headers: Headers = tuple((k, v or b"") for k, v in raw) if raw else ()
    return new_record(
        message.topic(),
        message.partition(),
        message.offset(),
        message.key(),
        message.value(),
        message.timestamp()[1],
        headers,
    )
