"""The embedded runner: every decider of a region in one process, over the region's log.

It reads the input topics through the merged history (`streams.merged`: one deterministic
order), runs each event through `DeciderCore` (`streams.runtime.core`), and writes each decision
to the topic its event type names (`decisions`) through a sink (normally `EventWriter`).

**Resumable by checkpoint.** Every `checkpoint_every` events (and at the end) it flushes the
decisions written so far, then stores, atomically (a temporary file renamed over the old one),
the merged history's positions and the core's whole state (decider states, the region view,
the clock and the recently seen input ids, as `state_codec` JSON). A restart loads the
checkpoint and reads on from those positions. Decisions made after the last checkpoint and
before a crash are made again after the restart with the same ids and the same content: a
consumer that drops duplicates by `event_id` sees each decision once. (Re-deriving the state by
replaying from the start instead would cost the whole history at every start.)

The same log read twice gives byte-identical decisions (the replay-equivalence acceptance).

**Over a live region's recorded inputs** (`replay_journal`): on Kafka the region's sequencer
records the order in which the live deciders took their inputs (the journal,
`streams.runtime.journal`). Events that reach the log later than their event time (an answer
of the provider written after later facts) come out of a live merge after later ones, so a
merged read of the finished log is another order; the journal is the order they were decided
in. Replaying its items through the same core gives the live decisions, byte for byte.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from schemas.codec import Codec
from schemas.events import Envelope
from streams.deciders import DeciderSettings
from streams.log import EventLog, TopicPartition
from streams.merged import MergedHistory, Progress
from streams.runtime import state_codec
from streams.runtime.core import Clock, DeciderCore, RuntimeSettings, input_topics
from streams.runtime.journal import Header, RuntimeTopics
from streams.runtime.kafka_io import PartitionReader
from streams.topics import region_topics

CHECKPOINT_VERSION = 1


class DecisionSink(Protocol):
    """Where decisions go: `EventWriter` (the log), or a list in tests and benchmarks."""

    def write(self, envelope: Envelope) -> None: ...

    def flush(self, timeout_s: float = 30.0) -> Any: ...


class ListSink:
    """Keeps decisions in memory (tests, benchmarks, comparisons)."""

    def __init__(self) -> None:
        self.decisions: list[Envelope] = []

    def write(self, envelope: Envelope) -> None:
        self.decisions.append(envelope)

    def flush(self, timeout_s: float = 30.0) -> None:
        return None


class CheckpointError(RuntimeError):
    """A checkpoint could not be read; the message names the file and what to do."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    positions: Mapping[TopicPartition, int]
    core: Mapping[str, Any]
    events_read: int
    decisions: int


class CheckpointFile:
    """One runner's checkpoint, in one file replaced atomically."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def load(self) -> Checkpoint | None:
        if not self.path.exists():
            return None
        try:
            data = state_codec.decode(self.path.read_bytes())
        except state_codec.StateCodecError as error:
            raise CheckpointError(
                f"the deciders' checkpoint {self.path} cannot be read ({error}); remove it "
                "to start again from the beginning of the log (decisions already written are "
                "made again with the same ids)"
            ) from error
        if data.get("version") != CHECKPOINT_VERSION:
            raise CheckpointError(
                f"the deciders' checkpoint {self.path} is of version {data.get('version')}, this "
                f"release reads version {CHECKPOINT_VERSION}; remove it to start again"
            )
        positions = {(t, p): o for (t, p), o in data["positions"].items()}
        return Checkpoint(positions, data["core"], data["events_read"], data["decisions"])

    def save(self, checkpoint: Checkpoint) -> None:
        data = {
            "version": CHECKPOINT_VERSION,
            "positions": dict(checkpoint.positions),
            "core": dict(checkpoint.core),
            "events_read": checkpoint.events_read,
            "decisions": checkpoint.decisions,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(state_codec.encode(data))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


@dataclass(slots=True)
class RunReport:
    """What one run did."""

    events_read: int = 0
    inputs: int = 0
    decisions: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    resumed: bool = False
    duplicates_dropped: int = 0

    @property
    def decisions_total(self) -> int:
        return sum(self.decisions.values())

    @property
    def events_per_s(self) -> float:
        return self.events_read / self.seconds if self.seconds else 0.0


class EmbeddedRunner:
    """Runs the deciders of `region` over `log` (see the module docstring)."""

    def __init__(
        self,
        log: EventLog,
        codec: Codec,
        region: str,
        sink: DecisionSink,
        *,
        settings: DeciderSettings | None = None,
        runtime: RuntimeSettings | None = None,
        checkpoint: CheckpointFile | None = None,
        checkpoint_every: int = 20_000,
    ) -> None:
        self.log = log
        self.codec = codec
        self.region = region
        self.sink = sink
        self.settings = settings or DeciderSettings()
        self.runtime = runtime or RuntimeSettings()
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every

    def run(
        self,
        *,
        until: Literal["end"] | None = "end",
        max_events: int | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        should_stop: Callable[[], bool] = lambda: False,
        clock_to_last_event: bool = False,
    ) -> RunReport:
        """Read from the checkpoint (or the start) to the log's end now (``until="end"``), or
        follow the log (``until=None``) until `should_stop`; `max_events` stops early (tests).

        `clock_to_last_event`: the log is a finished run whose deciders' clock went on to its
        last event (the simulator's loop fires every timer at its due time until the run ends,
        publishing decisions after the last input fact): at the log's end, the timers due up
        to the latest event read (input or not, the loop's own decisions included) fire too.
        Without it, those timers wait for a fact that brings their clock, as on a live log."""
        started = time.monotonic()
        report = RunReport()
        core = DeciderCore(self.settings, self.runtime)
        positions: dict[TopicPartition, int] = {}
        saved = self.checkpoint.load() if self.checkpoint is not None else None
        decisions_before = 0
        if saved is not None:
            core.restore(saved.core)
            positions = dict(saved.positions)
            report.resumed = True
            decisions_before = saved.decisions
        self.log.apply_topics(region_topics(self.region))
        history = MergedHistory(
            self.log,
            self.codec,
            self.region,
            input_topics(),
            until=until,
            start=positions,
            poll_records=2000,
            buffer_per_partition=4000,
        )
        since_checkpoint = 0
        last_at = 0  # the latest event time read
        try:
            while not history.finished and not should_stop():
                batch = history.read(1000, timeout_s=1.0)
                for decoded in batch:
                    origin = decoded.origin
                    positions[(origin.topic, origin.partition)] = origin.offset + 1
                    last_at = max(last_at, decoded.envelope.occurred_at)
                    for decision in core.process(decoded.envelope):
                        self.sink.write(decision)
                        report.decisions[decision.event_type] += 1
                    report.events_read += 1
                    since_checkpoint += 1
                    if max_events is not None and report.events_read >= max_events:
                        break
                if on_progress is not None and batch:
                    on_progress(history.progress)
                if since_checkpoint >= self.checkpoint_every:
                    self._save(core, positions, report, decisions_before)
                    since_checkpoint = 0
                if max_events is not None and report.events_read >= max_events:
                    break
            if clock_to_last_event and history.finished and last_at:
                for decision in core.advance_to(last_at):
                    self.sink.write(decision)
                    report.decisions[decision.event_type] += 1
            self._save(core, positions, report, decisions_before)
        finally:
            history.close()
        report.inputs = core.items
        report.duplicates_dropped = core.sequence.dropped_duplicates
        report.seconds = time.monotonic() - started
        return report

    def _save(
        self,
        core: DeciderCore,
        positions: Mapping[TopicPartition, int],
        report: RunReport,
        decisions_before: int,
    ) -> None:
        # Decisions first: a checkpoint never claims decisions the log does not hold.
        self.sink.flush()
        if self.checkpoint is not None:
            self.checkpoint.save(
                Checkpoint(
                    dict(positions),
                    core.snapshot(),
                    report.events_read,
                    decisions_before + report.decisions_total,
                )
            )


def replay_journal(
    bootstrap: str,
    codec: Codec,
    region: str,
    sink: DecisionSink,
    *,
    settings: DeciderSettings | None = None,
    timeout_s: float = 120.0,
) -> int:
    """Run `region`'s deciders over the items its sequencer recorded in the journal on Kafka
    at `bootstrap`, in the journal's order (facts and clocks, as the Faust stages take them),
    writing the decisions to `sink`; returns how many items were replayed. A racing
    sequencer's record (not at the position it expected) is no item, as for every reader."""
    reader = PartitionReader(bootstrap, RuntimeTopics(region).journal)
    core = DeciderCore(settings)
    items = 0
    try:
        end = reader.end()
        for m in reader.read_until(end - 1, timeout_s) if end else []:
            header = Header.decode(m.headers)
            if header.position != m.offset:
                continue
            if header.kind == "clock":
                assert header.clock_us is not None
                decisions = core.apply(Clock(header.clock_us))
            else:
                decisions = core.apply(codec.decode(m.value or b""))
            for decision in decisions:
                sink.write(decision)
            items += 1
        sink.flush()
    finally:
        reader.close()
    return items
