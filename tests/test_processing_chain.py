"""The processing chain on both logs: decode -> step -> batch -> write -> commit. A step that
fails dead-letters exactly those inputs and the chain commits past them; past the dead-letter
cap the processor stops with a named error; a crash between write and commit replays the batch
(duplicates carry the same event_id); a busy sink pauses the partitions instead of losing
input."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import pytest

from schemas.codec import Codec
from schemas.events import DeadLettered, Envelope, NoticeReceived, RateCard
from schemas.ids import derived_event_id
from streams.deadletter import DeadLetters
from streams.embedded import EmbeddedLog
from streams.kafka import KafkaLog
from streams.log import EventLog, TopicPartition
from streams.merged import MergedHistory
from streams.processing.dead_letters import (
    DeadLetterGuard,
    DeadLetterPolicy,
    DeadLetterRatioExceeded,
)
from streams.processing.factory import BatchSettings, ChainFactory
from streams.processing.runner import Processor
from streams.processing.step import StepFunction
from streams.processing.write import EventSink, Sink, SinkUnavailable
from streams.reader import Decoded, Decoder, SeenEvents
from streams.topics import region_topics, topic_name
from streams.writer import EventWriter
from tests.factories import notice

CODEC = Codec()
BATCH = BatchSettings(max_rows=16, max_inputs=16, max_age_s=0.2)
LENIENT = DeadLetterPolicy(max_ratio=0.5, min_inputs=10)


@pytest.fixture(params=["embedded", "kafka"])
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EventLog]:
    if request.param == "embedded":
        opened: EventLog = EmbeddedLog(tmp_path / "log")
    else:
        opened = KafkaLog(request.getfixturevalue("kafka").address)
    yield opened
    opened.close()


@pytest.fixture
def region(log: EventLog) -> str:
    name = f"t{uuid.uuid4().hex[:10]}"
    log.apply_topics(region_topics(name, partitions_scale=0.5))
    return name


def price_of(event: Decoded, bad: frozenset[int] = frozenset()) -> list[Envelope]:
    """The step under test: a notice becomes a rate card for its pool (deterministic id); it
    fails on the notices whose sequence number is in `bad`."""
    envelope = event.envelope
    payload = envelope.payload
    assert isinstance(payload, NoticeReceived)
    seq = (envelope.occurred_at - 1_796_000_000_000_000) // 1_000_000
    if seq in bad:
        raise ValueError(f"cannot price notice {seq}")
    return [
        Envelope(
            event_id=derived_event_id(envelope.event_id, RateCard.EVENT_TYPE, "test-step"),
            event_type=RateCard.EVENT_TYPE,
            occurred_at=envelope.occurred_at,
            recorded_at=envelope.occurred_at,
            region=envelope.region,
            key=payload.pool_id,
            causation_id=envelope.event_id,
            correlation_id=envelope.correlation_id,
            producer="test-step",
            payload=RateCard(
                pool_id=payload.pool_id,
                purchase_model="reclaimable",
                price_per_vcpu_h_eur_micros=seq,
                guaranteed_price_per_vcpu_h_eur_micros=40_000,
                valid_from_at=envelope.occurred_at,
                valid_until_at=envelope.occurred_at + 1,
            ),
        )
    ]


def write_notices(log: EventLog, region: str, count: int, junk: Sequence[bytes] = ()) -> None:
    producer = log.producer()
    topic = topic_name(region, "lifecycle")
    for i in range(count):
        event = notice(region, i % 13, seq=i)
        producer.produce(topic, CODEC.encode(event), key=event.key.encode())
    for value in junk:
        producer.produce(topic, value, key=b"i-00001")
    producer.flush()


def processor(
    log: EventLog,
    region: str,
    group: str,
    step: StepFunction[Envelope],
    *,
    policy: DeadLetterPolicy = LENIENT,
    sink: Sink[Envelope] | None = None,
) -> Processor[Envelope]:
    factory = ChainFactory(
        lambda partitions: step,
        sink or EventSink(EventWriter(log, CODEC, region)),
        Decoder(CODEC),
        DeadLetterGuard(DeadLetters(log.producer(), CODEC, region, "test-step"), policy),
        BATCH,
    )
    return Processor(log, group, [topic_name(region, "lifecycle")], factory, poll_timeout_s=0.2)


def run_until(proc: Processor[Envelope], inputs: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while proc.processed < inputs and time.monotonic() < deadline:
        proc.run_once()
    assert proc.processed == inputs


def history(log: EventLog, region: str, logical: str) -> list[Envelope]:
    return [d.envelope for d in MergedHistory(log, CODEC, region, [logical])]


def committed_all(log: EventLog, region: str, group: str) -> bool:
    topic = topic_name(region, "lifecycle")
    check = log.consumer(group, [topic])
    try:
        committed = check.committed()
    finally:
        check.close()
    ends = log.end_offsets(topic)
    return committed == {(topic, n): end for n, end in ends.items() if end}


def test_a_failing_step_dead_letters_exactly_those_inputs_and_commits_past_them(
    log: EventLog, region: str
) -> None:
    bad = frozenset({3, 17, 18, 40})
    write_notices(log, region, 60, junk=[b"not avro", b"\x00\x01"])
    group = f"g-{uuid.uuid4().hex}"
    proc = processor(log, region, group, lambda e: price_of(e, bad))
    run_until(proc, 62)
    proc.close()
    assert committed_all(log, region, group)

    written = history(log, region, "market")
    assert sorted(p.price_per_vcpu_h_eur_micros for p in payloads(written, RateCard)) == [
        seq for seq in range(60) if seq not in bad
    ]
    letters = payloads(history(log, region, "deadletter"), DeadLettered)
    failed = sorted(x.reason for x in letters if x.reason.startswith("processing_error"))
    assert failed == sorted(
        f"processing_error: ValueError: cannot price notice {seq}" for seq in bad
    )
    assert sorted(x.raw_value for x in letters if x.reason.startswith("bad_magic")) == sorted(
        [b"not avro", b"\x00\x01"]
    )


def test_past_the_dead_letter_cap_the_processor_stops_with_a_named_error(
    log: EventLog, region: str
) -> None:
    write_notices(log, region, 120)
    bad = frozenset(range(40, 120))  # a bad release: everything after 40 fails
    policy = DeadLetterPolicy(max_ratio=0.2, window=40, min_inputs=20)
    group = f"g-{uuid.uuid4().hex}"
    proc = processor(log, region, group, lambda e: price_of(e, bad), policy=policy)
    with pytest.raises(DeadLetterRatioExceeded, match=r"stopped at .*lifecycle\[\d+\]@\d+"):
        proc.run(stop=lambda: False, max_s=120)
    proc.close()  # a clean stop: what was taken before the cap is written and committed
    letters = payloads(history(log, region, "deadletter"), DeadLettered)
    assert 0 < len(letters) <= 0.2 * 40, "the cap holds: not everything was dead-lettered"
    assert not committed_all(log, region, group), "the input past the cap is not committed"

    # Fixed and restarted: processing resumes at the input that crossed the line.
    fixed = processor(log, region, group, price_of, policy=policy)
    topic = topic_name(region, "lifecycle")
    ends = {(topic, n): end for n, end in log.end_offsets(topic).items() if end}
    fixed.run(stop=lambda: fixed.consumer.committed() == ends, max_s=120)
    fixed.close()
    assert committed_all(log, region, group)
    written = payloads(history(log, region, "market"), RateCard)
    dead = {int(x.reason.rsplit(" ", 1)[1]) for x in letters}
    assert {p.price_per_vcpu_h_eur_micros for p in written} | dead == set(range(120)), (
        "every input written or dead-lettered"
    )


def test_a_crash_between_write_and_commit_replays_the_batch(log: EventLog, region: str) -> None:
    write_notices(log, region, 50)
    group = f"g-{uuid.uuid4().hex}"

    class CrashAfterWrite:
        """Writes, then dies before the commit (the process is gone: nothing is joined)."""

        def __init__(self, inner: Sink[Envelope]) -> None:
            self.inner = inner

        def write(
            self,
            rows: Sequence[Envelope],
            positions: Mapping[TopicPartition, int],
            timeout_s: float,
        ) -> None:
            self.inner.write(rows, positions, timeout_s)
            raise SystemExit("killed between write and commit")

    crashing = processor(
        log,
        region,
        group,
        price_of,
        sink=CrashAfterWrite(EventSink(EventWriter(log, CODEC, region))),
    )
    with pytest.raises(SystemExit):
        crashing.run(stop=lambda: False, max_s=120)
    crashing.terminate()

    restarted = processor(log, region, group, price_of)
    run_until(restarted, 50)
    restarted.close()
    assert committed_all(log, region, group)
    written = history(log, region, "market")
    counts = Counter(e.event_id for e in written)
    assert len(counts) == 50 and len(written) > 50, "the crashed batch was written again"
    seen = SeenEvents()
    unique = [e for e in written if seen.first_time(e.event_id)]
    assert sorted(p.price_per_vcpu_h_eur_micros for p in payloads(unique, RateCard)) == list(
        range(50)
    )
    by_id: dict[str, Envelope] = {}
    for event in written:
        assert by_id.setdefault(event.event_id, event) == event, "a duplicate is the same event"


def test_a_busy_sink_pauses_the_partitions_and_loses_nothing(
    log: EventLog, region: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_notices(log, region, 40)
    group = f"g-{uuid.uuid4().hex}"

    class FlakySink:
        def __init__(self, inner: Sink[Envelope], refusals: int) -> None:
            self.inner = inner
            self.refusals = refusals

        def write(
            self,
            rows: Sequence[Envelope],
            positions: Mapping[TopicPartition, int],
            timeout_s: float,
        ) -> None:
            if self.refusals:
                self.refusals -= 1
                raise SinkUnavailable("the database is restarting")
            self.inner.write(rows, positions, timeout_s)

    sink = FlakySink(EventSink(EventWriter(log, CODEC, region)), refusals=3)
    proc = processor(log, region, group, price_of, sink=sink)
    pauses: list[list[TopicPartition]] = []
    pause = proc.consumer.pause

    def counted(partitions: Sequence[TopicPartition]) -> None:
        # Every pause, also one resumed within the same step (a look between steps missed
        # those on a loaded machine).
        pauses.append(list(partitions))
        pause(partitions)

    monkeypatch.setattr(proc.consumer, "pause", counted)
    deadline = time.monotonic() + 120
    while proc.processed < 40 and time.monotonic() < deadline:
        proc.run_once()
    proc.close()
    assert proc.processed == 40, f"{proc.processed} of 40 inputs taken in 120 s"
    assert pauses, "the busy sink never paused the partitions"
    assert sink.refusals == 0, f"{sink.refusals} refusals of the sink never made"
    assert committed_all(log, region, group)
    written = history(log, region, "market")
    assert sorted(p.price_per_vcpu_h_eur_micros for p in payloads(written, RateCard)) == list(
        range(40)
    ), "every input written exactly once"


P = TypeVar("P")


def payloads(events: Sequence[Envelope], kind: type[P]) -> list[P]:
    found = [e.payload for e in events]
    assert all(isinstance(p, kind) for p in found)
    return [p for p in found if isinstance(p, kind)]
