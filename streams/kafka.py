"""The event log on Apache Kafka, through confluent-kafka (librdkafka).

Producers are idempotent with ``acks=all`` (no duplicates or reordering from retries, per-key
order kept) and use the ``murmur2_random`` partitioner, which is Kafka's Java default, so a key
lands on the same partition as in the embedded log and in Faust. Consumers never auto-commit:
positions are committed by the pipeline after its effects are durable.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from confluent_kafka import OFFSET_INVALID, KafkaError, KafkaException
from confluent_kafka import Consumer as _KafkaConsumer
from confluent_kafka import Producer as _KafkaProducer
from confluent_kafka import TopicPartition as _KafkaTopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.cimpl import NewTopic

from streams.log import (
    CLOSE_TIMEOUT_S,
    COMMIT_TIMEOUT_S,
    CloseTimeoutError,
    CommitTimeoutError,
    DeliveryError,
    FlushTimeoutError,
    Headers,
    LogError,
    LogTimeoutError,
    PartitionListener,
    ProduceTimeoutError,
    Record,
    TopicChange,
    TopicPartition,
    TopicSpec,
)

_ADMIN_TIMEOUT_S = 30.0
_LOG = logging.getLogger("spotcap.kafka")
_LIBRDKAFKA_LOG = logging.getLogger("spotcap.kafka.librdkafka")
_NEW_TOPIC_ERRORS = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
    }
)


class KafkaLog:
    """Topics, producers and consumers on a Kafka cluster at `bootstrap`."""

    def __init__(self, bootstrap: str, client_config: Mapping[str, Any] | None = None) -> None:
        self.bootstrap = bootstrap
        # librdkafka logs to stderr by default, from its own threads, even after a test or a
        # command has finished; route it through Python logging instead.
        self._base: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "logger": _LIBRDKAFKA_LOG,
            **(client_config or {}),
        }
        self._admin = AdminClient(dict(self._base))

    def _metadata(self, timeout_s: float = 10.0) -> Any:
        try:
            return self._admin.list_topics(timeout=timeout_s)
        except KafkaException as error:
            raise LogError(
                f"Kafka at {self.bootstrap} did not answer within {timeout_s:.0f} s ({error}); "
                "check SPOTCAP_KAFKA_BOOTSTRAP and that the broker is running "
                "(python -m infra.servers kafka start --dir DIR)"
            ) from error

    def apply_topics(self, specs: Iterable[TopicSpec]) -> list[TopicChange]:
        """Create missing topics and bring configs of existing ones to the spec; idempotent."""
        specs = list(specs)
        existing = self._metadata().topics
        changes: list[TopicChange] = []
        missing = [s for s in specs if s.name not in existing]
        if missing:
            futures = self._admin.create_topics(
                [
                    NewTopic(s.name, num_partitions=s.partitions, config=s.kafka_config())
                    for s in missing
                ],
                operation_timeout=_ADMIN_TIMEOUT_S,
            )
            for name, future in futures.items():
                try:
                    future.result(timeout=_ADMIN_TIMEOUT_S)
                    changes.append(TopicChange(name, "created"))
                except KafkaException as error:
                    if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise LogError(f"could not create topic {name}: {error}") from error
                    changes.append(TopicChange(name, "unchanged", "created concurrently"))
        self._await_visible([c.name for c in changes if c.action == "created"])
        for spec in specs:
            if spec.name in existing:
                changes.append(self._reconcile(spec, len(existing[spec.name].partitions)))
        return changes

    def _await_visible(self, names: list[str]) -> None:
        """Wait until the broker serves metadata for new topics: the controller acknowledges a
        creation before the broker has applied it, and a caller expects to use the topic."""
        deadline = time.monotonic() + _ADMIN_TIMEOUT_S
        while names:
            topics = self._metadata().topics
            names = [n for n in names if n not in topics or topics[n].error is not None]
            if names and time.monotonic() > deadline:
                raise LogError(f"topics {names} created but not visible after {_ADMIN_TIMEOUT_S} s")
            if names:
                time.sleep(0.05)

    def _reconcile(self, spec: TopicSpec, partitions: int) -> TopicChange:
        resource = ConfigResource(ConfigResource.Type.TOPIC, spec.name)
        described = self._admin.describe_configs([resource])[resource].result(
            timeout=_ADMIN_TIMEOUT_S
        )
        wanted = spec.kafka_config()
        differing = {k: v for k, v in wanted.items() if described[k].value != v}
        notes = []
        if partitions != spec.partitions:
            notes.append(
                f"has {partitions} partitions, the spec wants {spec.partitions}; not changed "
                "(adding partitions moves keys: do it deliberately with kafka-topics)"
            )
        if differing:
            resource = ConfigResource(
                ConfigResource.Type.TOPIC,
                spec.name,
                incremental_configs=[
                    ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                    for k, v in differing.items()
                ],
            )
            self._admin.incremental_alter_configs([resource])[resource].result(
                timeout=_ADMIN_TIMEOUT_S
            )
            notes.insert(0, "set " + ", ".join(f"{k}={v}" for k, v in sorted(differing.items())))
            return TopicChange(spec.name, "updated", "; ".join(notes))
        if notes:
            return TopicChange(spec.name, "drift", "; ".join(notes))
        return TopicChange(spec.name, "unchanged")

    def delete_topics(self, names: Sequence[str]) -> None:
        for name, future in self._admin.delete_topics(list(names)).items():
            try:
                future.result(timeout=_ADMIN_TIMEOUT_S)
            except KafkaException as error:
                if error.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise LogError(f"could not delete topic {name}: {error}") from error

    def partitions_for(self, topic: str) -> int:
        found = self._metadata().topics.get(topic)
        if found is None or found.error is not None:
            raise LogError(
                f"topic {topic!r} does not exist on {self.bootstrap}; "
                "run `spotcap topics apply` first"
            )
        return len(found.partitions)

    def end_offsets(self, topic: str) -> dict[int, int]:
        consumer = _KafkaConsumer({**self._base, "group.id": "spotcap-offsets-probe"})
        deadline = time.monotonic() + _ADMIN_TIMEOUT_S
        try:
            result = {}
            for n in range(self.partitions_for(topic)):
                while True:
                    try:
                        _, high = consumer.get_watermark_offsets(
                            _KafkaTopicPartition(topic, n), timeout=_ADMIN_TIMEOUT_S
                        )
                        break
                    except KafkaException as error:
                        # A new topic's partitions answer once every client's metadata and
                        # the partition's leader have caught up with its creation.
                        transient = error.args[0].retriable() or error.args[0].code() in (
                            _NEW_TOPIC_ERRORS
                        )
                        if not transient or time.monotonic() > deadline:
                            raise LogError(
                                f"end offsets of {topic}[{n}] on {self.bootstrap}: {error}"
                            ) from error
                        time.sleep(0.1)
                result[n] = high
            return result
        finally:
            consumer.close()

    def producer(
        self, config: Mapping[str, Any] | None = None, *, queue_full_timeout_s: float = 30.0
    ) -> KafkaProducer:
        return KafkaProducer({**self._base, **(config or {})}, queue_full_timeout_s)

    def consumer(
        self,
        group: str,
        topics: Sequence[str],
        *,
        listener: PartitionListener | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> KafkaConsumer:
        return KafkaConsumer({**self._base, **(config or {})}, group, topics, listener)

    def close(self) -> None:
        pass


class KafkaProducer:
    def __init__(self, config: Mapping[str, Any], queue_full_timeout_s: float = 30.0) -> None:
        self._producer = _KafkaProducer(
            {
                "enable.idempotence": True,
                "acks": "all",
                "partitioner": "murmur2_random",
                "linger.ms": 5,
                "compression.type": "lz4",
                **config,
            }
        )
        self._queue_full_timeout_s = queue_full_timeout_s
        self._pending: list[Record | KafkaError | None] = []

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers = (),
        timestamp_ms: int | None = None,
    ) -> None:
        # Each report writes into the list of its own flush: a report that comes after its
        # flush gave up (timed out) lands there, never in the next batch's slots.
        batch = self._pending
        slot = len(batch)
        batch.append(None)

        def delivered(error: KafkaError | None, message: Any) -> None:
            if error is not None:
                batch[slot] = error
                return
            batch[slot] = Record(
                message.topic(),
                message.partition(),
                message.offset(),
                key,
                value,
                message.timestamp()[1],
                headers,
            )

        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": delivered}
        if headers:
            kwargs["headers"] = list(headers)
        if timestamp_ms is not None:
            kwargs["timestamp"] = timestamp_ms
        deadline = 0.0
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                break
            except BufferError:
                # librdkafka's queue is full: serve delivery reports, which frees it, for as
                # long as the broker takes records at all.
                now = time.monotonic()
                if not deadline:
                    deadline = now + self._queue_full_timeout_s
                elif now > deadline:
                    batch.pop()
                    raise ProduceTimeoutError(
                        f"the producer's queue to {topic} stayed full for "
                        f"{self._queue_full_timeout_s:.0f} s (the broker takes no records); "
                        "the record was not queued"
                    ) from None
                self._producer.poll(0.1)
            except KafkaException as error:
                batch.pop()  # never queued: no report will come for it
                raise LogError(f"could not produce to {topic}: {error}") from error
        self._producer.poll(0)

    def flush(self, timeout_s: float = 30.0) -> list[Record]:
        remaining = self._producer.flush(timeout_s)
        pending, self._pending = self._pending, []
        if remaining:
            raise FlushTimeoutError(
                f"{remaining} of {len(pending)} records not acknowledged within {timeout_s} s"
            )
        errors = [p for p in pending if isinstance(p, KafkaError)]
        if errors or any(p is None for p in pending):
            first = errors[0] if errors else "no delivery report"
            raise DeliveryError(f"{len(errors)} of {len(pending)} records failed: {first}")
        return [p for p in pending if isinstance(p, Record)]

    def close(self, timeout_s: float = 10.0) -> None:
        remaining = self._producer.flush(timeout_s)
        if remaining:
            raise FlushTimeoutError(
                f"closing the producer: {remaining} queued records not acknowledged within "
                f"{timeout_s} s; they are dropped (none was flushed, so none counts as written)"
            )


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
        self._topics = list(topics)
        self._listener = listener
        settings = {
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            **config,
        }
        self._cooperative = "cooperative" in str(settings.get("partition.assignment.strategy"))
        self._consumer = _KafkaConsumer(settings)
        self._assigned: set[TopicPartition] = set()
        self._paused: set[TopicPartition] = set()
        self._positions: dict[TopicPartition, int] = {}  # next offset after the last returned
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
                if p.offset >= 0:
                    self._positions[(p.topic, p.partition)] = p.offset
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
                self._positions.pop(tp, None)
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
                return out
            first = self._consumer.poll(timeout=left)
            if first is not None:
                messages = [first, *self._consumer.consume(max_records - 1, timeout=0)]
        held = self._paused or self._pending_seeks
        for message in messages:
            error = message.error()
            if error is not None:
                if error.fatal():
                    raise LogError(f"Kafka consumer of group {self.group}: {error}")
                self.poll_errors += 1
                _LOG.warning("Kafka consumer of group %s: %s (not fatal)", self.group, error)
                continue
            record = _record(message)
            if held and self._hold_back(record):
                continue
            out.append(record)
        for record in out:
            self._positions[(record.topic, record.partition)] = record.offset + 1
        return out

    def _hold_back(self, record: Record) -> bool:
        """True for a record of a paused partition (fetched before the pause took effect) or of
        one whose seek is pending; the partition is sent back to it, so nothing is skipped."""
        tp = (record.topic, record.partition)
        if tp in self._pending_seeks:
            return True
        if tp in self._paused:
            if tp not in self._positions or record.offset < self._positions[tp]:
                self._positions[tp] = record.offset
            self._seek(tp, self._positions[tp])
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
        self._positions[tp] = offset

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
        self._consumer.pause([_KafkaTopicPartition(*tp) for tp in tps])
        self._paused.update(tps)
        # Records fetched before the pause would still come out of librdkafka's queue: a seek
        # to the current position drops them (they are fetched again after the resume).
        for tp in tps:
            if tp in self._positions:
                self._seek(tp, self._positions[tp])

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        tps = self._check_assigned(partitions, "resume")
        if self._staged is not None:
            self._staged_pauses.difference_update(tps)
            return
        self._consumer.resume([_KafkaTopicPartition(*tp) for tp in tps])
        self._paused.difference_update(tps)

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
            metadata = self._consumer.list_topics(timeout=_ADMIN_TIMEOUT_S)
            partitions = [
                _KafkaTopicPartition(topic, n)
                for topic in self._topics
                for n in metadata.topics[topic].partitions
            ]
            found = self._consumer.committed(partitions, timeout=_ADMIN_TIMEOUT_S)
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


def _record(message: Any) -> Record:
    headers: Headers = tuple((k, v or b"") for k, v in message.headers() or ())
    return Record(
        message.topic(),
        message.partition(),
        message.offset(),
        message.key(),
        message.value(),
        message.timestamp()[1],
        headers,
    )
