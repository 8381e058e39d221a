"""The stages of the partitioned runtime, one partition at a time, with no Faust in them.

Each class here holds the state of one partition of one stage and applies that partition's
records (`StageRecord`: a journal item's copy, a progress marker, or a workload decision) in
the order its topic gives them. `faust_app` feeds them from Faust streams and stores their
snapshots in Faust tables; tests feed them from lists in any interleaving.

* `KeyedPartition`: one keyed decider over its records: the exclusion watcher on a pool
  partition, the scorer on the region's.
* `WorkloadPartition`: the workload deciders of the workloads routed to it, with its own copy of
  the region view, brought to each record's position from the journal (`JournalItems`).
* `ActuatorPartition`: the actuator guard and the canary (ADR-32); it merges the workload
  partitions' decisions by their place and applies position after position once every
  workload partition has said it is past it (progress), reading the facts and clocks of those
  positions from the journal.

A partition knows the last position it applied; a record at or below it was applied already
(a copy sent again after a crash) and is skipped. Its snapshot is everything it holds (the
actuator's: what it received and has not applied too), so a restarted partition goes on after
the last record its snapshot took in, with the same state.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from schemas.events import Envelope
from streams.deciders import DeciderSettings, RegionView
from streams.deciders.types import Decider
from streams.runtime.core import (
    ActuatorStage,
    Clock,
    Item,
    KeyedStage,
    ViewStage,
    WorkloadStage,
)
from streams.runtime.journal import Header


@dataclass(frozen=True, slots=True)
class StageRecord:
    """One record of a stage topic, decoded."""

    header: Header
    envelope: Envelope | None  # facts and decisions

    @property
    def position(self) -> int:
        return self.header.position

    def item(self) -> Item:
        if self.header.kind == "clock":
            assert self.header.clock_us is not None
            return Clock(self.header.clock_us)
        assert self.envelope is not None, f"a {self.header.kind} record carries no event"
        return self.envelope


@dataclass(frozen=True, slots=True)
class Placed:
    """A workload decision on its way to the actuator stage: its position and place."""

    position: int
    order: tuple[int, str, int]
    envelope: Envelope


@dataclass(slots=True)
class StageOutput:
    """What applying records gave: decisions to publish, and for the workload stage what goes
    to the actuator stage (its decisions with their places, then how far it has got)."""

    decisions: list[Envelope] = field(default_factory=list)
    to_actuator: list[Placed] = field(default_factory=list)
    progress: int | None = None


class JournalItems(Protocol):
    """Reads journal items by position (`faust_app` reads the journal topic)."""

    def items(self, first: int, last: int) -> list[tuple[int, Item]]:
        """The items at positions `first` to `last` inclusive, in order."""
        ...


class KeyedPartition:
    """One decider over one partition of its stage topic (exclusion watcher, scorer)."""

    def __init__(self, decider: Decider[Any]) -> None:
        self.stage: KeyedStage[Any] = KeyedStage(decider)
        self.position = -1
        self._view = RegionView()  # the watcher and the scorer read no view

    def apply(self, records: Sequence[StageRecord]) -> StageOutput:
        out = StageOutput()
        for record in records:
            if record.position <= self.position:
                continue
            self.position = record.position
            kind = record.header.kind
            if kind == "clock":
                assert record.header.clock_us is not None
                out.decisions += self.stage.on_clock(record.header.clock_us, self._view)
            elif kind == "fact":
                assert record.envelope is not None
                out.decisions += self.stage.on_fact(record.envelope, self._view)
        return out

    def snapshot(self) -> dict[str, Any]:
        return {"position": self.position, "states": self.stage.snapshot()}

    def restore(self, data: dict[str, Any]) -> None:
        self.position = data["position"]
        self.stage.restore(data["states"])


class WorkloadPartition:
    """The workload deciders of one workload partition, with its own region view."""

    def __init__(self, settings: DeciderSettings, journal: JournalItems) -> None:
        self.view_stage = ViewStage(settings)
        self.view_position = -1  # the last journal position folded into the view
        self.stage = WorkloadStage(settings)
        self.position = -1
        self.journal = journal

    def catch_up(self, position: int) -> None:
        """Bring the view to `position` (inclusive) from the journal."""
        if position <= self.view_position:
            return
        for at, item in self.journal.items(self.view_position + 1, position):
            self.view_stage.apply(item)  # the view stage's decisions are the pool stage's
            self.view_position = at
        self.view_position = position

    def apply(self, records: Sequence[StageRecord]) -> StageOutput:
        out = StageOutput()
        for record in records:
            if record.position <= self.position:
                continue
            self.position = record.position
            out.progress = record.position
            if record.header.kind == "progress":
                continue
            self.catch_up(record.position)
            made = self.stage.apply(record.item(), self.view_stage.view)
            for ordered in made:
                out.decisions.append(ordered.envelope)
                out.to_actuator.append(Placed(record.position, ordered.order, ordered.envelope))
        return out

    def snapshot(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "view_position": self.view_position,
            "view": self.view_stage.snapshot(),
            "workloads": self.stage.snapshot(),
        }

    def restore(self, data: dict[str, Any]) -> None:
        self.position = data["position"]
        self.view_position = data["view_position"]
        self.view_stage.restore(data["view"])
        self.stage.restore(data["workloads"])


class ActuatorPartition:
    """The actuator guard and the canary, merging the workload partitions' decisions by their
    place (the canary reads facts and clocks only)."""

    def __init__(
        self,
        settings: DeciderSettings,
        journal: JournalItems,
        workload_partitions: int,
    ) -> None:
        self.stage = ActuatorStage(settings)
        self.journal = journal
        self.sources = workload_partitions
        self.position = -1
        self.progress = [-1] * workload_partitions
        self._waiting: list[tuple[int, tuple[int, str, int], int, Envelope]] = []
        self._seen: set[tuple[int, tuple[int, str, int]]] = set()

    @property
    def reachable(self) -> int:
        """The last position every workload partition has said it is past."""
        return min(self.progress)

    def apply(self, records: Sequence[StageRecord]) -> StageOutput:
        self.receive(records)
        return self.advance()

    def receive(self, records: Sequence[StageRecord]) -> None:
        """Take decisions and progress in; nothing is applied yet (see `advance`)."""
        for record in records:
            header = record.header
            if header.position <= self.position or header.source is None:
                continue
            if header.kind == "progress":
                source = header.source
                self.progress[source] = max(self.progress[source], header.position)
            elif header.kind == "decision" and header.order is not None:
                assert record.envelope is not None
                place = (header.position, header.order)
                if place not in self._seen:  # a copy sent again: the first one stands
                    self._seen.add(place)
                    heapq.heappush(
                        self._waiting,
                        (header.position, header.order, len(self._seen), record.envelope),
                    )

    def advance(self, until: int | None = None) -> StageOutput:
        """Apply every position all workload partitions are past (at most up to `until`)."""
        out = StageOutput()
        target = self.reachable if until is None else min(until, self.reachable)
        if target <= self.position:
            return out
        stage = self.stage
        for at, item in self.journal.items(self.position + 1, target):
            out.decisions += stage.apply(item)
            while self._waiting and self._waiting[0][0] == at:
                _, order, _, decision = heapq.heappop(self._waiting)
                self._seen.discard((at, order))
                out.decisions += stage.on_decision(decision)
        if self._waiting and self._waiting[0][0] <= target:
            raise ValueError(
                f"a workload decision at position {self._waiting[0][0]} names no journal item"
            )
        self.position = target
        return out

    def snapshot(self) -> dict[str, Any]:
        """Everything it holds, what it received but has not applied included (the workload
        partitions' progress and their decisions waiting for it): a partition restored from
        it goes on after the last record it received, as every other stage does."""
        waiting = sorted(self._waiting, key=lambda w: (w[0], w[1]))
        return {
            "position": self.position,
            "guard": self.stage.snapshot(),
            "progress": tuple(self.progress),
            "waiting": [(at, order, decision) for at, order, _, decision in waiting],
        }

    def restore(self, data: dict[str, Any]) -> None:
        self.position = data["position"]
        self.stage.restore(data["guard"])
        # A snapshot from before it held these: it goes on from the consumer's offset.
        self.progress = list(data.get("progress", [-1] * self.sources))
        self._waiting, self._seen = [], set()
        for at, order, decision in data.get("waiting", []):
            self._seen.add((at, order))
            heapq.heappush(self._waiting, (at, order, len(self._seen), decision))
