"""The per-event core of every decider runtime: one deterministic order, three stages.

Every runtime (the embedded runner, the Faust app, the simulator's loop) feeds the deciders the
same **items** in the same order and so makes the same decisions (docs/deciders.md, "Runtimes"):

* **Items** are the region's input facts in the merged history's order, with a `Clock` put in
  front of a fact whose event time enters a later clock interval (1 s by default) than every
  fact before it (`Sequence`). Facts are the events some decider or the region view reads, from
  any producer but the deciders themselves; an event id seen before is dropped.
* For each item, in order, three **stages** run:

  1. the **view stage** (`ViewStage`): the fact is folded into the `RegionView`, then the
     exclusion watcher (key pool) and the scorer (key region) step on it; their decisions are
     folded into the view. A clock fires their timers due by its time.
  2. the **workload stage** (`WorkloadStage`): the planner, the replacement decider and the
     fallback arbiter (key workload) step on the fact under its workload, with the view as the
     view stage left it; a decision one of them makes is fed at once to the others of the same
     workload that read it (a placement to the arbiter, a return to the planner), breadth
     first. A clock fires the timers of every workload due by its time, in (due, workload)
     order. Each decision carries its place (`Ordered.order`).
  3. the **actuator stage** (`ActuatorStage`): the guard (key region) steps on the fact or the
     clock, then the canary (key region, ADR-32) does, then the guard steps on each workload
     decision of the item, in their order.

The actuator stage is the end of the line: its decisions (throttling, refused deletes,
breakers) go to the log and to no decider. (The guard refuses deletes only; the workload
deciders act on refused launches only, which come from the I/O side as facts.)

Why stages and clocks, and not "feed every decision to every decider at once": the Faust app
runs each stage on its own partitions (pools, workloads, the region), and what a decision
depends on must not depend on how partitions interleave. A stage sees the facts in one order,
a key's timers fire on clocks every partition gets, the view at an item is a function of the
items before it, and the actuator's order is each decision's place, so the partitioned runtime
can reproduce exactly what this module computes in one process.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeAlias, TypeVar

from schemas.events import EVENT_CLASSES, Envelope
from streams.deciders import (
    ActuatorGuard,
    DeciderSettings,
    ExclusionWatcher,
    FallbackArbiter,
    Planner,
    RegionView,
    Replacement,
    Scorer,
    all_deciders,
)
from streams.deciders.authority import ChangeTrust, trust_event
from streams.deciders.canary import CanaryDecider
from streams.deciders.types import Decider, Tick, step
from streams.deciders.workload import workload_of

US = 1_000_000
DERIVED_PREFIX = "deciders/"  # producer of the deciders' own decisions
VIEW_INPUTS = frozenset(
    {
        "pool_registered",
        "rate_card",
        "forward_capacity",
        "reservation_committed",
        "instance_launched",
        "instance_lost",
        "instance_deleted",
    }
)

S = TypeVar("S")


@dataclass(frozen=True, slots=True)
class Clock:
    """Event time has reached `at_us`: timers due by then fire (with ``Tick(at_us, at_us)``)."""

    at_us: int


Item: TypeAlias = Envelope | Clock


@dataclass(frozen=True, slots=True)
class RuntimeSettings:
    """How a runtime cuts time and remembers inputs (every runtime of one region must agree)."""

    clock_interval_s: float = 1.0
    """Timers of quiet keys fire at the next clock at or after their due time."""
    every_boundary: bool = False
    """False (the partitioned runtime's order, which journals every clock): a fact that enters
    a later interval than every fact before it gets one clock, at the start of its interval,
    and the timers due by then fire there. True: every boundary crossed gets its clock (a
    timer due at `d` fires at the first boundary at or after `d`); with a clock of a
    microsecond that is its due time exactly, which the simulator's loop needs
    (`sim.loop.LOOP_RUNTIME`). The in-process core skips the clocks at which nothing is
    due, so either costs only the clocks that fire."""
    seen_capacity: int = 100_000
    """Input event ids remembered to drop re-delivered duplicates."""

    @property
    def clock_interval_us(self) -> int:
        return max(1, round(self.clock_interval_s * US))


@dataclass(frozen=True, slots=True)
class Ordered:
    """A workload decision with its place among the decisions of one item: (due, key, index)
    at a clock (due of the key's first timer), (0, key, index) at a fact."""

    order: tuple[int, str, int]
    envelope: Envelope


# -- which events are inputs ------------------------------------------------------------------


def input_types(settings: DeciderSettings | None = None) -> frozenset[str]:
    """Event types the deciders or the region view read from the log."""
    types = set(VIEW_INPUTS)
    for decider in all_deciders(settings):
        types |= decider.inputs
    return frozenset(types)


INPUT_TYPES = input_types()


def is_input(event: Envelope) -> bool:
    """Whether `event` is an input fact: read by a decider or the view, not made by one."""
    return event.event_type in INPUT_TYPES and not event.producer.startswith(DERIVED_PREFIX)


def input_topics() -> tuple[str, ...]:
    """The logical topics holding input facts (the topics a runtime merges)."""
    return tuple(sorted({EVENT_CLASSES[t].TOPIC for t in INPUT_TYPES}))


# -- the order ----------------------------------------------------------------------------------


class RecentIds:
    """The last `capacity` input ids, to drop re-delivered duplicates (deterministic: the same
    sequence drops the same events)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def first_time(self, event_id: str) -> bool:
        if event_id in self._ids:
            return False
        self._ids[event_id] = None
        if len(self._ids) > self.capacity:
            self._ids.popitem(last=False)
        return True

    def snapshot(self) -> list[str]:
        return list(self._ids)

    def restore(self, ids: Iterable[str]) -> None:
        self._ids = OrderedDict.fromkeys(ids)


class Sequence:
    """Turns the merged history into items: input facts, duplicates dropped, clocks put in
    (one clock per fact entering a later interval, or, with `every_boundary`, one per
    boundary crossed: see `RuntimeSettings`)."""

    def __init__(self, settings: RuntimeSettings | None = None) -> None:
        settings = settings or RuntimeSettings()
        self.interval_us = settings.clock_interval_us
        self.every_boundary = settings.every_boundary
        self.next_clock_us: int | None = None
        self.seen = RecentIds(settings.seen_capacity)
        self.dropped_duplicates = 0

    def admit(self, event: Envelope) -> bool:
        """Whether `event` is an input fact seen for the first time (counts the duplicates)."""
        if not is_input(event):
            return False
        if not self.seen.first_time(event.event_id):
            self.dropped_duplicates += 1
            return False
        return True

    def items(self, event: Envelope) -> list[Item]:
        """The items `event` gives: none (not an input, or seen), or its clocks (none, one,
        or with `every_boundary` each boundary it crosses) and then itself."""
        if not self.admit(event):
            return []
        clocks: list[Item] = [Clock(at) for at in self.clocks_before(event.occurred_at)]
        return [*clocks, event]

    def clocks_before(self, at_us: int) -> range:
        """The clocks event time `at_us` brings (none the first time), in order: the start of
        its interval, or every boundary crossed (`every_boundary`)."""
        boundary = at_us - at_us % self.interval_us
        start = self.next_clock_us
        if start is None:
            self.next_clock_us = boundary + self.interval_us
            return range(0)
        if at_us < start:
            return range(0)
        self.next_clock_us = boundary + self.interval_us
        if not self.every_boundary:
            start = boundary
        return range(start, boundary + 1, self.interval_us)

    def snapshot(self) -> dict[str, Any]:
        return {"next_clock_us": self.next_clock_us, "seen": self.seen.snapshot()}

    def restore(self, data: Mapping[str, Any]) -> None:
        self.next_clock_us = data["next_clock_us"]
        self.seen.restore(data["seen"])


# -- one decider over its keys --------------------------------------------------------------------


class KeyedStage(Generic[S]):
    """One decider's keyed states and timers."""

    def __init__(self, decider: Decider[S]) -> None:
        self.decider = decider
        self.states: dict[str, S] = {}
        self._due: dict[str, int] = {}  # each key's current timer (the heap may hold stale ones)
        self._timers: list[tuple[int, str]] = []

    def step(self, key: str, event: Envelope | Tick, view: RegionView) -> list[Envelope]:
        decider = self.decider
        found = self.states.get(key)
        state = decider.initial(key) if found is None else found
        state, made = step(decider, state, event, view)
        self.states[key] = state
        due = decider.due_at(state)
        if due is None:
            self._due.pop(key, None)
        elif self._due.get(key) != due:
            self._due[key] = due
            heapq.heappush(self._timers, (due, key))
        return made

    def on_fact(self, event: Envelope, view: RegionView) -> list[Envelope]:
        if event.event_type not in self.decider.inputs:
            return []
        key = self.decider.key(event)
        return [] if key is None else self.step(key, event, view)

    def next_due(self) -> int | None:
        """The earliest timer of any key, if any."""
        timers = self._timers
        while timers and self._due.get(timers[0][1]) != timers[0][0]:
            heapq.heappop(timers)  # stale: the key moved its timer since
        return timers[0][0] if timers else None

    def due(self, at_us: int) -> list[tuple[int, str]]:
        """Keys whose timer is due by `at_us`, as (due, key), in that order."""
        out: list[tuple[int, str]] = []
        timers = self._timers
        while timers and timers[0][0] <= at_us:
            due, key = heapq.heappop(timers)
            if self._due.get(key) != due:
                continue  # stale: the key moved its timer since
            del self._due[key]  # fired by the caller; stepping it sets the next one
            out.append((due, key))
        return out

    def on_clock(self, at_us: int, view: RegionView) -> list[Envelope]:
        out: list[Envelope] = []
        for _, key in self.due(at_us):
            out += self.step(key, Tick(at_us, at_us), view)
        return out

    def snapshot(self) -> dict[str, S]:
        return dict(self.states)

    def restore(self, states: Mapping[str, S]) -> None:
        self.states = dict(states)
        self._due = {}
        for key, state in self.states.items():
            due = self.decider.due_at(state)
            if due is not None:
                self._due[key] = due
        self._timers = [(due, key) for key, due in self._due.items()]
        heapq.heapify(self._timers)


# -- the stages ---------------------------------------------------------------------------------


class ViewStage:
    """The region view and the deciders that feed it: the exclusion watcher and the scorer."""

    def __init__(self, settings: DeciderSettings) -> None:
        self.view = RegionView()
        self.watcher: KeyedStage[Any] = KeyedStage(ExclusionWatcher(settings))
        self.scorer: KeyedStage[Any] = KeyedStage(Scorer(settings))

    def apply(self, item: Item) -> list[Envelope]:
        """The watcher's and the scorer's decisions on `item`, already folded into the view."""
        view = self.view
        if isinstance(item, Clock):
            made = self.watcher.on_clock(item.at_us, view) + self.scorer.on_clock(item.at_us, view)
        else:
            view = view.evolve(item)
            made = self.watcher.on_fact(item, view) + self.scorer.on_fact(item, view)
        self.view = view.fold(made) if made else view
        return made

    def next_due(self) -> int | None:
        return _earliest(self.watcher.next_due(), self.scorer.next_due())

    def snapshot(self) -> dict[str, Any]:
        return {
            "view": self.view,
            "watcher": self.watcher.snapshot(),
            "scorer": self.scorer.snapshot(),
        }

    def restore(self, data: Mapping[str, Any]) -> None:
        self.view = data["view"]
        self.watcher.restore(data["watcher"])
        self.scorer.restore(data["scorer"])


class WorkloadStage:
    """The planner, the replacement decider and the fallback arbiter, per workload."""

    def __init__(self, settings: DeciderSettings) -> None:
        # The keys trusted for changes of authority are the view's (recorded in the order, a
        # ``keyring_trusted`` item), never the settings': a replay then needs no keyring.
        self.settings = dataclasses.replace(settings, trust=None)
        self.trust: ChangeTrust | None = None
        self.stages: tuple[KeyedStage[Any], ...] = (
            KeyedStage(Planner(self.settings)),
            KeyedStage(Replacement(self.settings)),
            KeyedStage(FallbackArbiter(self.settings)),
        )
        self.inputs = frozenset().union(*(s.decider.inputs for s in self.stages))

    def _trusting(self, trust: ChangeTrust | None) -> None:
        """The deciders with the keys `trust` (their states stay)."""
        self.trust = trust
        settings = dataclasses.replace(self.settings, trust=trust)
        planner, replacement, arbiter = self.stages
        planner.decider = Planner(settings)
        replacement.decider = Replacement(settings)
        arbiter.decider = FallbackArbiter(settings)

    def key(self, event: Envelope) -> str | None:
        """The workload a fact is stepped under, or None if no workload decider reads it."""
        return workload_of(event) if event.event_type in self.inputs else None

    def apply(self, item: Item, view: RegionView) -> list[Ordered]:
        """The workload decisions on `item`, in order."""
        if view.trust is not self.trust and view.trust != self.trust:
            self._trusting(view.trust)
        if isinstance(item, Clock):
            dues: dict[str, int] = {}
            for stage in self.stages:
                for due, key in stage.due(item.at_us):
                    dues[key] = min(due, dues.get(key, due))
            out: list[Ordered] = []
            for key, due in sorted(dues.items(), key=lambda kv: (kv[1], kv[0])):
                made = self._cascade(key, Tick(item.at_us, item.at_us), view)
                out += [Ordered((due, key, i), e) for i, e in enumerate(made)]
            return out
        workload = self.key(item)
        if workload is None:
            return []
        made = self._cascade(workload, item, view)
        return [Ordered((0, workload, i), e) for i, e in enumerate(made)]

    def _cascade(self, key: str, first: Envelope | Tick, view: RegionView) -> list[Envelope]:
        """Step the workload's deciders on `first`, then on what they decide, breadth first."""
        out: list[Envelope] = []
        queue: deque[Envelope | Tick] = deque([first])
        while queue:
            current = queue.popleft()
            for stage in self.stages:
                if isinstance(current, Tick):
                    state = stage.states.get(key)
                    due = None if state is None else stage.decider.due_at(state)
                    if due is None or due > current.now_us:
                        continue
                elif (
                    current.event_type not in stage.decider.inputs
                    or stage.decider.key(current) != key
                ):
                    continue
                made = stage.step(key, current, view)
                out += made
                queue.extend(made)
        return out

    def next_due(self) -> int | None:
        return _earliest(*(stage.next_due() for stage in self.stages))

    def snapshot(self) -> dict[str, Any]:
        return {s.decider.name: s.snapshot() for s in self.stages}

    def restore(self, data: Mapping[str, Any]) -> None:
        for stage in self.stages:
            stage.restore(data[stage.decider.name])


class ActuatorStage:
    """The region-keyed deciders at the end of the line: the actuator guard (facts and clocks,
    then the workload decisions) and the canary (ADR-32: facts and clocks only; no decider
    reads its decisions but itself, and the bundle service serves by them)."""

    def __init__(self, settings: DeciderSettings) -> None:
        self.guard = KeyedStage(ActuatorGuard(settings))
        self.canary = KeyedStage(CanaryDecider(settings))
        self._empty = RegionView()  # neither reads the view

    def apply(self, item: Item) -> list[Envelope]:
        if isinstance(item, Clock):
            made = self.guard.on_clock(item.at_us, self._empty)
            return made + self.canary.on_clock(item.at_us, self._empty)
        made = self.guard.on_fact(item, self._empty)
        return made + self.canary.on_fact(item, self._empty)

    def on_decision(self, decision: Envelope) -> list[Envelope]:
        return self.guard.on_fact(decision, self._empty)

    def next_due(self) -> int | None:
        return _earliest(self.guard.next_due(), self.canary.next_due())

    def snapshot(self) -> dict[str, Any]:
        return {"guard": self.guard.snapshot(), "canary": self.canary.snapshot()}

    def restore(self, data: Mapping[str, Any]) -> None:
        if set(data) == {"guard", "canary"}:
            self.guard.restore(data["guard"])
            self.canary.restore(data["canary"])
        else:  # a snapshot from before the canary ran here: the guard's states alone
            self.guard.restore(data)
            self.canary.restore({})


# -- the three stages in one process -------------------------------------------------------------


class DeciderCore:
    """Every decider of a region in one process: what the embedded runner and the simulator's
    loop call, one event at a time (`process`), in the merged history's order."""

    def __init__(
        self,
        settings: DeciderSettings | None = None,
        runtime: RuntimeSettings | None = None,
    ) -> None:
        settings = settings or DeciderSettings()
        self.trust = settings.trust
        """The keyring this runtime was given: put in force (recorded as an item) before the
        first input it processes if the view has another (`process`)."""
        self.sequence = Sequence(runtime or RuntimeSettings())
        self.view_stage = ViewStage(settings)
        self.workload_stage = WorkloadStage(settings)
        self.actuator_stage = ActuatorStage(settings)
        self.items = 0

    @property
    def view(self) -> RegionView:
        return self.view_stage.view

    def process(self, event: Envelope) -> list[Envelope]:
        """The decisions `event` (the next event of the merged history) calls for, in order:
        those of the clocks before it, then its own (none if it is no input or a duplicate)."""
        sequence = self.sequence
        if not sequence.admit(event):
            return []
        trust = self.view.trust
        if trust is not self.trust and trust != self.trust:  # this runtime's keyring, from here
            self.apply(trust_event(self.trust, event.region, self.view.now_us, event.event_id))
            self.trust = self.view.trust  # equal; the same object from now on (`is` is cheap)
        out = self._clocks(sequence.clocks_before(event.occurred_at))
        return out + self.apply(event)

    def advance_to(self, at_us: int) -> list[Envelope]:
        """Move event time to `at_us` without an event (the simulator's loop, at a timer's
        clock): the clocks of the boundaries it crosses and the timers they fire. The same
        clocks come before the next fact otherwise: a replay of the log makes them too."""
        return self._clocks(self.sequence.clocks_before(at_us))

    def next_due_us(self) -> int | None:
        """The earliest timer of any decider and key, if any."""
        return _earliest(
            self.view_stage.next_due(),
            self.workload_stage.next_due(),
            self.actuator_stage.next_due(),
        )

    def next_clock_us(self, due_us: int) -> int:
        """The clock at which a timer due at `due_us` fires from here (a clock boundary)."""
        interval = self.sequence.interval_us
        at = -(-due_us // interval) * interval
        following = self.sequence.next_clock_us
        return at if following is None else max(at, following)

    def _clocks(self, boundaries: range) -> list[Envelope]:
        """Apply the clocks of `boundaries` at which some timer is due (the others change
        nothing; with `every_boundary` they are not counted as items either: with a clock of a
        microsecond they would be every microsecond of the run)."""
        out: list[Envelope] = []
        if not boundaries:
            return out
        if not self.sequence.every_boundary:
            self.items += len(boundaries)  # the one clock, as the partitioned runtime counts
        interval, last = boundaries.step, boundaries[-1]
        start = boundaries[0]
        while start <= last:
            due = self.next_due_us()
            if due is None or due > last:
                break
            at = start if due <= start else start + -(-(due - start) // interval) * interval
            if self.sequence.every_boundary:
                self.items += 1
            out += self._stages(Clock(at))
            start = at + interval
        return out

    def apply(self, item: Item) -> list[Envelope]:
        """The three stages on one item."""
        self.items += 1
        return self._stages(item)

    def _stages(self, item: Item) -> list[Envelope]:
        out = self.view_stage.apply(item)
        workload = self.workload_stage.apply(item, self.view_stage.view)
        out += self.actuator_stage.apply(item)
        for ordered in workload:
            out.append(ordered.envelope)
            out += self.actuator_stage.on_decision(ordered.envelope)
        return out

    def snapshot(self) -> dict[str, Any]:
        return {
            "items": self.items,
            "sequence": self.sequence.snapshot(),
            "view": self.view_stage.snapshot(),
            "workload": self.workload_stage.snapshot(),
            "actuator": self.actuator_stage.snapshot(),
        }

    def restore(self, data: Mapping[str, Any]) -> None:
        self.items = data["items"]
        self.sequence.restore(data["sequence"])
        self.view_stage.restore(data["view"])
        self.workload_stage.restore(data["workload"])
        self.actuator_stage.restore(data["actuator"])


def _earliest(*dues: int | None) -> int | None:
    known = [due for due in dues if due is not None]
    return min(known) if known else None
