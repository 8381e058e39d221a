"""The event log on Apache Kafka, through confluent-kafka (librdkafka): topics and producers
(the consumer is in `streams.kafka_consumer`).

Producers are idempotent with ``acks=all`` (no duplicates or reordering from retries, per-key
order kept) and use the ``murmur2_random`` partitioner, which is Kafka's Java default, so a key
lands on the same partition as in the embedded log and in Faust. Consumers never auto-commit:
positions are committed by the pipeline after its effects are durable.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer as _KafkaConsumer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as _KafkaProducer
from confluent_kafka import TopicPartition as _KafkaTopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.cimpl import NewTopic

from streams.kafka_consumer import BrokerHealth, KafkaConsumer
from streams.log import (
    DeliveryError,
    FlushTimeoutError,
    Headers,
    LogError,
    PartitionListener,
    ProduceTimeoutError,
    Record,
    TopicChange,
    TopicSpec,
    UnknownTopicError,
    UnreachableError,
    new_record,
)

_ADMIN_TIMEOUT_S = 30.0
_LIBRDKAFKA_LOG = logging.getLogger("spotcap.kafka.librdkafka")


class _AtDebug(logging.LoggerAdapter):  # type: ignore[type-arg]
    """librdkafka's own log, at debug level whatever its severity: a broker that is down is
    reported once, as a sentence by spotcap, not as a stream of connection attempts."""

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        self.logger.debug(msg, *args, **kwargs)


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
            "logger": _AtDebug(_LIBRDKAFKA_LOG, {}),
            **(client_config or {}),
        }
        self._admin = AdminClient(dict(self._base))
        # Once the broker did not answer, every later question fails at once with the same
        # sentence: a command asking about seven topics waits one timeout, not seven.
        self._unreachable: UnreachableError | None = None

    def describe(self) -> str:
        return f"Kafka at {self.bootstrap}"

    def _metadata(self, timeout_s: float = 10.0) -> Any:
        if self._unreachable is not None:
            raise self._unreachable
        try:
            return self._admin.list_topics(timeout=timeout_s)
        except KafkaException as error:
            self._unreachable = UnreachableError(
                f"Kafka at {self.bootstrap} did not answer within {timeout_s:.0f} s "
                f"({error.args[0].str()}); check --kafka or SPOTCAP_KAFKA_BOOTSTRAP and that "
                "the broker is running (python -m infra.servers kafka start --dir DIR)"
            )
            raise self._unreachable from error

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

    def topic_id(self, topic: str) -> str | None:
        from confluent_kafka import TopicCollection

        self._metadata()  # an unreachable broker is one sentence, as for every question
        future = self._admin.describe_topics(TopicCollection([topic]))[topic]
        try:
            described = future.result(timeout=_ADMIN_TIMEOUT_S)
        except KafkaException as error:
            if error.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise UnknownTopicError(
                    f"topic {topic!r} does not exist on {self.bootstrap}"
                ) from error
            raise LogError(f"could not describe topic {topic}: {error}") from error
        return str(described.topic_id) if described.topic_id is not None else None

    def partitions_for(self, topic: str) -> int:
        found = self._metadata().topics.get(topic)
        if found is None or found.error is not None:
            raise UnknownTopicError(
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

    def committed_offsets(self, group: str, topic: str) -> dict[int, int | None]:
        """The offsets consumer group `group` committed on each partition of `topic` (None:
        none yet), asked without joining the group."""
        partitions = [_KafkaTopicPartition(topic, n) for n in range(self.partitions_for(topic))]
        consumer = _KafkaConsumer({**self._base, "group.id": group})
        try:
            got = consumer.committed(partitions, timeout=_ADMIN_TIMEOUT_S)
        except KafkaException as error:
            raise LogError(
                f"offsets of group {group} on {topic} at {self.bootstrap}: {error}"
            ) from error
        finally:
            consumer.close()
        return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in got}

    def producer(
        self, config: Mapping[str, Any] | None = None, *, queue_full_timeout_s: float = 30.0
    ) -> KafkaProducer:
        return KafkaProducer(
            {**self._base, **(config or {})}, queue_full_timeout_s, bootstrap=self.bootstrap
        )

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
    def __init__(
        self,
        config: Mapping[str, Any],
        queue_full_timeout_s: float = 30.0,
        *,
        bootstrap: str = "the broker",
    ) -> None:
        self._health = BrokerHealth()
        self._producer = _KafkaProducer(
            {
                "enable.idempotence": True,
                "acks": "all",
                "partitioner": "murmur2_random",
                "linger.ms": 5,
                "compression.type": "lz4",
                "error_cb": self._health,
                **config,
            }
        )
        self._bootstrap = bootstrap
        self._queue_full_timeout_s = queue_full_timeout_s
        self._pending: list[Record | KafkaError | None] = []
        # The first flush that gave up: the records it left behind are still in librdkafka's
        # queue, and a later flush or close reports that same loss, not a new count.
        self._lost: FlushTimeoutError | None = None
        # When produce first saw the broker reported down with no delivery since (monotonic).
        self._down_since: float | None = None

    def _not_acknowledged(self, remaining: int, timeout_s: float) -> FlushTimeoutError:
        if self._lost is not None:
            return self._lost
        cause = (
            f"Kafka at {self._bootstrap} went away ({self._health.down})"
            if self._health.down
            else f"Kafka at {self._bootstrap} did not acknowledge in time"
        )
        self._lost = FlushTimeoutError(
            f"{cause}: {remaining:,} records were not acknowledged within {timeout_s} s, "
            "so none of them counts as written"
        )
        return self._lost

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
            self._health.up()
            self._down_since = None
            batch[slot] = new_record(
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
        if self._health.down is not None:
            self._still_down()

    def _still_down(self) -> None:
        """A broker that went away and delivered nothing for the queue-full patience ends the
        batch now, not at its flush: a writer with a large batch would otherwise go on queueing
        (a demo simulated minutes of history into a dead broker before its first flush)."""
        now = time.monotonic()
        if self._down_since is None:
            self._down_since = now
        elif now - self._down_since > self._queue_full_timeout_s:
            raise self._not_acknowledged(len(self._pending), self._queue_full_timeout_s)

    def flush(self, timeout_s: float = 30.0) -> list[Record]:
        remaining = self._producer.flush(timeout_s)
        pending, self._pending = self._pending, []
        if remaining:
            raise self._not_acknowledged(remaining, timeout_s)
        errors = [p for p in pending if isinstance(p, KafkaError)]
        if errors or any(p is None for p in pending):
            first = errors[0] if errors else "no delivery report"
            raise DeliveryError(f"{len(errors)} of {len(pending)} records failed: {first}")
        return [p for p in pending if isinstance(p, Record)]

    def close(self, timeout_s: float = 10.0) -> None:
        remaining = self._producer.flush(timeout_s)
        if remaining:
            raise self._not_acknowledged(remaining, timeout_s)
