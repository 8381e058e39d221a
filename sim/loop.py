"""The deciders in the loop: they drive the simulated region through its orchestrator seam.

`DecidersOrchestrator` implements `sim.orchestration.Orchestrator`. It feeds what the
region publishes to the deciders through the shared per-event core (`streams.runtime.core`,
the same core the embedded runner and replay use), publishes their decisions into the region's
log at sim time, and carries out the provider calls the actuator guard allows:

* **Settling an instant.** Events are gathered as they are observed; once an instant is
  complete (a wake-up after everything the region does in that microsecond,
  ``wake_at(..., last=True)``), its events go to the core (`DeciderCore.process`, which keeps
  the input facts) in the merged history's order: by topic and partition (the log's order of
  one instant across partitions, `streams.merged`), and within a partition as published (its
  offsets). The loop therefore needs the partition counts of the log the run is written to
  (`topics`). The decisions are published at that instant, and so are in the log with the
  region's events. The loop runs the core with a clock of one microsecond (`LOOP_RUNTIME`):
  a timer fires at its due time exactly, and its decisions (stamped with that time) are
  published then; the loop settles that instant even when nothing happens in it. A replay of
  the log with the same runtime settings puts the same clock before the next fact
  (`streams.runtime.core.Sequence`). (With the 1 s clock of the partitioned runtime a timer's
  decision would be made up to a second after the time it carries, which a simulated region,
  where sim time is event time, cannot publish.)
* **Acting.** The guard judges every call a decision implies (token budget of 10 calls/s of
  event time, termination breaker, ownership) and orders each allowed one
  (`actuation_ordered`, a decision in the log); a refused one is never made (the refusal is a
  decision too). The loop carries the orders out as the actuator service does, from the same
  book (`provider.actuator.OrderBook`): an order goes out one microsecond after its decision, or
  at its ``not_before`` when it was throttled. Launches carry the book's tags (owner, workload,
  pool, role, the claim they serve, which the region's schedulers count and whose release
  scales it down, the decision and the order). A launch the provider refuses becomes
  `launch_failed` (not retryable: the fallback arbiter covers it).
* **What comes back.** The provider's answers (launched, deleted, failed) are facts of the
  instant of the call, observed and settled like any other: nothing a decision causes lands in
  the instant it was made, so a replay of the log puts every instant's inputs in the same order
  and makes the same decisions: the embedded runner over the recorded log makes them byte for
byte (tests/test_loop_replay.py).

Escalations wait for the region's approvers (`sim.approver`); returns delete the
fallback's instances; a released claim's instances are deleted at an orderly pace. The book
forgets what was settled an hour before the instants it settles (`OrderBook.forget`: the causes
no order waits on, the instances gone, the orders done), so the loop's memory does not grow with
the length of the run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from provider.actuator import ACTUATOR, Order, OrderBook, launch_failed
from provider.base import (
    CapacityProvider,
    CapacityUnavailableError,
    ProviderError,
    UnknownInstanceError,
)
from schemas.events import ActuationOrdered, Envelope
from sim.orchestration import OrchestratorHost
from streams.deciders.settings import DeciderSettings
from streams.log import TopicSpec
from streams.partitioner import partition_for
from streams.runtime.core import DERIVED_PREFIX, DeciderCore, RuntimeSettings
from streams.topics import LOGICAL_NAMES, region_topics, topic_name

SETTLE = "settle"
CALLS = "calls"
NEXT_US = 1  # calls go out one microsecond after the decision at the earliest
# The book forgets what was settled this long before the instant settled (once per that long):
# the orders of a cause come in its own instant, so this is only a margin.
FORGET_AFTER_US = 3_600_000_000
# The core's clock in the loop: timers fire at their due time, to the microsecond.
LOOP_RUNTIME = RuntimeSettings(clock_interval_s=1e-6, every_boundary=True)


def owned_by(orchestrator_id: str, settings: DeciderSettings | None = None) -> DeciderSettings:
    """`settings` (the defaults) for an orchestrator whose instances carry `orchestrator_id`
    as their owner tag: what the loop runs with, and what a replay of its log must use."""
    settings = settings or DeciderSettings()
    return replace(settings, actuator=replace(settings.actuator, orchestrator_id=orchestrator_id))


class DecidersOrchestrator:
    """The deciders and the actuator as the simulated region's orchestrator."""

    def __init__(
        self,
        orchestrator_id: str,
        settings: DeciderSettings | None = None,
        *,
        topics: Sequence[TopicSpec] | None = None,
        runtime: RuntimeSettings | None = None,
        forget_after_us: int | None = FORGET_AFTER_US,
    ) -> None:
        """`runtime`: the core's clock (`LOOP_RUNTIME` by default; a replay must use the
        same). `topics`: the region's topics as the log the run is written to has them (their
        partition counts order an instant's events as a replay of the log will); the default
        is `region_topics` of the host's region at full scale. `forget_after_us`: how long
        after an instant is settled the book forgets what it learnt (None: never)."""
        self.settings = owned_by(orchestrator_id, settings)
        self.runtime = runtime or LOOP_RUNTIME
        self.core = DeciderCore(self.settings, self.runtime)
        self.book = OrderBook(orchestrator_id, forgets=forget_after_us is not None)
        self._forget_after_us = forget_after_us
        self._forgot_us = 0  # when the book last forgot what was settled
        self.orchestrator_id = orchestrator_id
        self._topics = topics
        self._partitions: dict[str, tuple[str, int]] = {}  # logical topic -> (name, partitions)
        self._host: OrchestratorHost | None = None
        self._inputs: list[Envelope] = []  # observed in the instant not settled yet
        self._settles: set[int] = set()  # instants with a settle asked for
        self._call_wakes: set[int] = set()
        self.counts: Counter[str] = Counter()  # what the I/O side did, for the summary

    # -- the seam ----------------------------------------------------------------------------

    def start(self, host: OrchestratorHost) -> None:
        self._host = host
        specs = self._topics if self._topics is not None else region_topics(host.region)
        counts = {spec.name: spec.partitions for spec in specs}
        for logical in LOGICAL_NAMES:
            name = topic_name(host.region, logical)
            if name in counts:
                self._partitions[logical] = (name, counts[name])

    def observe(self, event: Envelope) -> None:
        if event.producer.startswith(DERIVED_PREFIX):
            return  # its own, made by the core: not an input
        self._inputs.append(event)
        self.book.observe(event)

    def act(self, now_us: int, provider: CapacityProvider, due: Sequence[str]) -> None:
        self._make_calls(now_us, provider)
        if SETTLE in due and now_us in self._settles:
            self._settles.discard(now_us)
            self._settle(now_us)
        elif self._inputs:
            self._settle_at(now_us)

    # -- settling an instant -----------------------------------------------------------------

    def _settle(self, now_us: int) -> None:
        inputs, self._inputs = sorted(self._inputs, key=self._merged_place), []
        core = self.core
        decisions = core.advance_to(now_us)  # the clocks up to now (those a fact would bring)
        for event in inputs:
            decisions += core.process(event)
        host = self._ready()
        for decision in decisions:
            self.book.observe(decision)
            host.publish(decision)
            p = decision.payload
            if isinstance(p, ActuationOrdered):
                self._wake_for_call(max(p.not_before_at, now_us + NEXT_US))
        for decision in decisions:
            if decision.event_type == "actuation_refused":
                self.counts[f"{decision.payload.call} refused"] += 1  # type: ignore[union-attr]
        due = core.next_due_us()
        if due is not None:  # a quiet key's timer: settle at the clock that fires it
            self._settle_at(core.next_clock_us(due))
        after = self._forget_after_us
        if after is not None and not self._inputs and now_us - self._forgot_us >= after:
            # Nothing observed waits to be settled: what the book learnt before is settled.
            self.book.forget(now_us - after)
            self._forgot_us = now_us

    def _merged_place(self, event: Envelope) -> tuple[str, int]:
        """Where the merged history puts `event` among the events of its instant (a stable
        sort keeps the publication order, which is the offset order, within a partition)."""
        name, partitions = self._partitions[event.payload.TOPIC]
        return name, partition_for(event.key.encode(), partitions)

    def _settle_at(self, at_us: int) -> None:
        if at_us not in self._settles:
            self._settles.add(at_us)
            self._ready().wake_at(at_us, SETTLE, last=True)

    def _wake_for_call(self, at_us: int) -> None:
        if at_us not in self._call_wakes:
            self._call_wakes.add(at_us)
            self._ready().wake_at(at_us, CALLS)

    # -- acting ------------------------------------------------------------------------------

    def _make_calls(self, now_us: int, provider: CapacityProvider) -> None:
        self._call_wakes.discard(now_us)
        for order in self.book.ready(now_us):
            if order.call == "launch":
                self._launch(order, provider)
            else:
                self._delete(order, provider)
            self.book.finish(order.order_id)

    def _launch(self, order: Order, provider: CapacityProvider) -> None:
        try:
            provider.launch(self.book.launch_request(order))
        except ProviderError as error:
            self._ready().emit(
                launch_failed(self.book, order, error),
                ACTUATOR,
                causation_id=order.cause_id,
                correlation_id=order.correlation_id,
                discriminator=f"{order.index}",
            )
            reason = "no room" if isinstance(error, CapacityUnavailableError) else "error"
            self.counts[f"launch failed ({reason})"] += 1
        else:
            self.counts["launched"] += 1

    def _delete(self, order: Order, provider: CapacityProvider) -> None:
        try:
            provider.delete(self.book.delete_request(order))
        except UnknownInstanceError:
            self.counts["delete of an instance already gone"] += 1
        else:
            self.counts["deleted"] += 1

    def _ready(self) -> OrchestratorHost:
        if self._host is None:
            raise RuntimeError("the deciders' orchestrator was used before start(host)")
        return self._host
