"""The embedded runner over a region's log: replay equivalence, resumption, no decision lost or
made twice (after de-duplication by event id) across a crash, and decisions written to the log."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from schemas.events import Envelope
from sim.loop import LOOP_RUNTIME, owned_by
from streams.embedded import EmbeddedLog
from streams.runtime.core import DERIVED_PREFIX, DeciderCore, input_topics
from streams.runtime.embedded import CheckpointFile, EmbeddedRunner, ListSink
from streams.topics import topic_name
from streams.writer import EventWriter
from tests.runtime_scenario import CODEC, CONFIG, REGION, by_id, scenario, write_scenario


def read_by_runner() -> list[Envelope]:
    """The scenario's events on the topics the runner merges (not usage)."""
    return [e for e in scenario() if e.payload.TOPIC in input_topics()]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("recorded") / "log"
    write_scenario(EmbeddedLog(root))
    return root


@pytest.fixture(scope="module")
def full_run(recorded: Path) -> list[Envelope]:
    sink = ListSink()
    report = EmbeddedRunner(EmbeddedLog(recorded), CODEC, REGION, sink).run()
    assert report.events_read == len(read_by_runner())
    return sink.decisions


def test_the_run_makes_every_kind_of_decision(full_run: list[Envelope]) -> None:
    kinds = Counter(d.event_type for d in full_run)
    for kind in (
        "pool_excluded",
        "pool_readmitted",
        "pool_ranked",
        "placement_decided",
        "replacement_requested",
        "fallback_decided",
        "fallback_returned",
        "actuation_throttled",
        "bundle_canaried",
        "bundle_rolled_back",
    ):
        assert kinds[kind], f"no {kind} in {dict(kinds)}"
    assert len(by_id(full_run)) == len(full_run)  # ids are unique within a run


def test_a_replay_of_the_log_gives_byte_identical_decisions(
    recorded: Path, full_run: list[Envelope]
) -> None:
    sink = ListSink()
    EmbeddedRunner(EmbeddedLog(recorded), CODEC, REGION, sink).run()
    assert [CODEC.encode(d) for d in sink.decisions] == [CODEC.encode(d) for d in full_run]


def test_a_resumed_run_makes_the_rest_and_nothing_else(
    recorded: Path, full_run: list[Envelope], tmp_path: Path
) -> None:
    checkpoint = CheckpointFile(tmp_path / "deciders.ckpt")
    first, second = ListSink(), ListSink()
    runner = EmbeddedRunner(EmbeddedLog(recorded), CODEC, REGION, first, checkpoint=checkpoint)
    report = runner.run(max_events=900)
    assert report.events_read == 900 and checkpoint.path.exists() and not report.resumed
    again = EmbeddedRunner(EmbeddedLog(recorded), CODEC, REGION, second, checkpoint=checkpoint)
    rest = again.run()
    assert rest.resumed and rest.events_read == len(read_by_runner()) - 900
    assert first.decisions + second.decisions == full_run


class CrashError(RuntimeError):
    pass


class CrashingSink(ListSink):
    """Takes `limit` decisions, then fails as a process killed mid-run would stop."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def write(self, envelope: Envelope) -> None:
        if len(self.decisions) >= self.limit:
            raise CrashError("killed")
        super().write(envelope)


def test_after_a_crash_no_decision_is_lost_or_made_twice_after_deduplication(
    recorded: Path, full_run: list[Envelope], tmp_path: Path
) -> None:
    checkpoint = CheckpointFile(tmp_path / "deciders.ckpt")
    crashing = CrashingSink(limit=len(full_run) // 2)
    with pytest.raises(CrashError):
        EmbeddedRunner(
            EmbeddedLog(recorded),
            CODEC,
            REGION,
            crashing,
            checkpoint=checkpoint,
            checkpoint_every=300,
        ).run()
    assert checkpoint.path.exists()
    after = ListSink()
    EmbeddedRunner(EmbeddedLog(recorded), CODEC, REGION, after, checkpoint=checkpoint).run()
    together = crashing.decisions + after.decisions
    assert len(together) > len(full_run)  # decisions after the checkpoint were made again
    assert by_id(together) == by_id(full_run)


def test_decisions_go_to_the_decisions_topic_and_a_rerun_reads_past_them(
    tmp_path: Path, full_run: list[Envelope]
) -> None:
    log = EmbeddedLog(tmp_path / "log")
    write_scenario(log)
    topic = topic_name(REGION, "decisions")
    before = log.end_offsets(topic)  # the recorded run's own decisions (the loop's)
    writer = EventWriter(log, CODEC, REGION)
    report = EmbeddedRunner(log, CODEC, REGION, writer).run()
    writer.close()
    assert report.decisions_total == len(full_run)
    written = [
        CODEC.decode(r.value or b"", r.origin)
        for n in range(log.partitions_for(topic))
        for r in log.partition(topic, n).read(before.get(n, 0), 10**7)
    ]
    assert len(written) == len(full_run) and by_id(written) == by_id(full_run)
    # The decisions now in the log are the deciders' own: a second run skips them as inputs.
    again = ListSink()
    EmbeddedRunner(log, CODEC, REGION, again).run()
    assert [CODEC.encode(d) for d in again.decisions] == [CODEC.encode(d) for d in full_run]


def test_the_loops_own_decisions_are_what_the_runner_makes_on_the_loops_clock(
    recorded: Path,
) -> None:
    """The recorded run was driven by the deciders in the simulator's loop: read back with the
    loop's runtime settings, the log gives the loop's decisions, byte for byte, in order. The
    loop's clock went on after the last input fact (the scenario's demand ends before it does):
    its timers' decisions there are made at the log's end."""
    sink = ListSink()
    settings = owned_by(CONFIG.orchestrator.orchestrator_id)
    runner = EmbeddedRunner(
        EmbeddedLog(recorded), CODEC, REGION, sink, settings=settings, runtime=LOOP_RUNTIME
    )
    runner.run(clock_to_last_event=True)
    recorded_decisions = [e for e in scenario() if e.producer.startswith(DERIVED_PREFIX)]
    assert len(recorded_decisions) > 1000
    assert [CODEC.encode(d) for d in sink.decisions] == [
        CODEC.encode(d) for d in recorded_decisions
    ]
    # Without it, as on a live log, the runner stops at the last fact: a prefix of the loop's.
    live = ListSink()
    EmbeddedRunner(
        EmbeddedLog(recorded), CODEC, REGION, live, settings=settings, runtime=LOOP_RUNTIME
    ).run()
    assert 0 < len(live.decisions) < len(sink.decisions)
    assert live.decisions == sink.decisions[: len(live.decisions)]


def _by_time(events: list[Envelope]) -> list[Envelope]:
    return sorted(events, key=lambda e: e.occurred_at)  # stable: a copy stays after its original


def test_a_redelivered_input_is_dropped() -> None:
    events = list(scenario())
    with_duplicates = events[:500] + events[100:200] + events[500:]
    once, twice = DeciderCore(), DeciderCore()
    expected = [d for e in _by_time(events) for d in once.process(e)]
    made = [d for e in _by_time(with_duplicates) for d in twice.process(e)]
    assert twice.sequence.dropped_duplicates == 100
    assert [CODEC.encode(d) for d in made] == [CODEC.encode(d) for d in expected]
