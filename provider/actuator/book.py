"""The actuator's book: what the log orders done, what each call carries, and what is done.

The actuator guard (``streams/deciders/actuator.py``) orders every provider call it allows:
an `actuation_ordered` event, caused by the decision (or the fact) the call carries out, that
says when the call may go out. The book folds a region's events into what carrying the orders
out needs, and does nothing else (no I/O, no clock): the simulator's loop keeps one, the
actuator service (`provider.actuator.service`) keeps one and snapshots it.

* **Orders and their causes.** An order waits until its cause has been seen: in the partitioned
  runtime the guard's order can reach the log before the workload stage's decision. Orders are
  handed out by (``not_before_at``, the order they were seen in).
* **Tags (ADR-11).** A launch carries the owner, workload and pool tags of the seam, its role
  (``spotcap.io/role``: floor, fallback, spare or spread, from the pool's purchase model and the
  decision), the claim it serves (``spotcap.io/claim``, learnt from the claim, the placement,
  the instance replaced, or the cause's cause), its decision (``spotcap.io/decision``) and its
  order (``spotcap.io/call``, which finds the instance again if the answer was lost).
* **Done.** A launch order is done when an instance tagged with its id is launched, or when
  its ``launch_failed`` (id derived from the cause and the call's place) or its refusal by the
  actuator (id derived from the order) is in the log; a delete order when its instance is gone
  (deleted or lost, before or after the order) or the delete was refused.

Memory is bounded when `memory` is given: the claims learnt and the causes seen are kept for
the last `memory` events that carry one (a cause is needed only until its orders are seen,
which is at once), and the ids of the last `memory` orders done (a copy of an order the
deciders send again after a restart is not an order again). A book whose orders always come
with their causes (the simulator's loop: the guard orders a call while it judges the event the
call carries out, in the same instant) can also `forget` what was settled before a moment: the
causes no order waits on, the instances gone and their claims, the orders done, and the claims
learnt of events for a claim released longer ago than the guard remembers released claims (a
day, `RELEASED_MEMORY_US`: a released claim's work is done, and by then the guard too has
forgotten it); so that its memory stays flat in the history's length.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from provider.base import (
    AGENT_VERSION_TAG,
    CALL_TAG,
    DECISION_TAG,
    POOL_TAG,
    DeleteRequest,
    LaunchRequest,
    owned_tags,
)
from schemas.events import (
    ActuationOrdered,
    CapacityClaimOpened,
    CapacityReleased,
    Envelope,
    FallbackDecided,
    FallbackReturned,
    FallbackReviewed,
    InstanceDeleted,
    InstanceLaunched,
    InstanceLost,
    NoticeReceived,
    PlacementDecided,
    PoolRegistered,
    ReplacementRequested,
)
from schemas.ids import derived_event_id
from streams.deciders.actuator import RELEASED_MEMORY_US
from streams.deciders.workload import (
    CLAIM_TAG,
    FALLBACK_ROLE,
    FLOOR_ROLE,
    ROLE_TAG,
    SPARE_ROLE,
    SPREAD_ROLE,
)

ACTUATOR = "spotcap/actuator"
"""The producer of the events the actuator itself writes (``launch_failed``, refusals)."""


def failure_id(cause_id: str, index: int) -> str:
    """The id of the ``launch_failed`` of the `index`-th call of `cause_id`."""
    return derived_event_id(cause_id, "launch_failed", str(index))


def refusal_id(order_id: str) -> str:
    """The id of the ``actuation_refused`` the actuator writes for an order it will not carry
    out (too old by the time it could)."""
    return derived_event_id(order_id, "actuation_refused")


@dataclass(frozen=True, slots=True)
class Order:
    """One call the guard ordered (an `actuation_ordered`), as the actuator carries it out."""

    order_id: str
    cause_id: str
    call: str  # launch | delete | reserve
    index: int
    not_before_us: int
    ordered_at_us: int
    pool_id: str | None
    instance_id: str | None
    workload_id: str
    orderly: bool
    correlation_id: str | None
    seq: int  # the order it was seen in

    @classmethod
    def of(cls, event: Envelope, seq: int) -> Order:
        p = event.payload
        assert isinstance(p, ActuationOrdered)
        return cls(
            order_id=event.event_id,
            cause_id=event.causation_id or "",
            call=p.call,
            index=p.call_index,
            not_before_us=p.not_before_at,
            ordered_at_us=event.occurred_at,
            pool_id=p.pool_id,
            instance_id=p.instance_id,
            workload_id=p.workload_id or "",
            orderly=p.orderly,
            correlation_id=event.correlation_id,
            seq=seq,
        )

    @property
    def answers(self) -> tuple[str, ...]:
        """The ids of the events that end this order without an instance fact."""
        if self.call == "launch":
            return (failure_id(self.cause_id, self.index), refusal_id(self.order_id))
        return (refusal_id(self.order_id),)


@dataclass(frozen=True, slots=True)
class Cause:
    """What an order needs of its cause: the role of what it launches on guaranteed capacity
    and the reason of what it deletes."""

    event_id: str
    correlation_id: str | None
    guaranteed_role: str
    delete_reason: str
    committed_role: str = FLOOR_ROLE
    """A placement without floor on committed capacity is work on room the floors left."""


FINISHED_KEPT = 100_000
"""Order ids done, kept by a book whose memory is not bounded otherwise."""
# The events `OrderBook.observe` folds beyond the answers it waits for (its own chains and
# `_learn_claim`'s and `_cause`'s): any other leaves the book as it was (issue 26: rankings and
# rate cards, two events of three, went through every check of those chains).
_FOLDED = (ActuationOrdered, PoolRegistered, CapacityClaimOpened, PlacementDecided,
           ReplacementRequested, InstanceLaunched, NoticeReceived, InstanceLost, InstanceDeleted,
           FallbackDecided, FallbackReturned, FallbackReviewed, CapacityReleased)  # fmt: skip


class _Bounded(OrderedDict[str, Any]):
    """A mapping that forgets its oldest entries beyond `limit` (None: never)."""

    def __init__(self, limit: int | None) -> None:
        super().__init__()
        self.limit = limit

    def remember(self, key: str, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        if self.limit is not None and len(self) > self.limit:
            self.popitem(last=False)


class OrderBook:
    """The actuator's fold of one region's log (see the module's doc)."""

    def __init__(
        self,
        orchestrator_id: str,
        memory: int | None = None,
        *,
        agent_version: str | None = None,
        forgets: bool = False,
    ) -> None:
        self.orchestrator_id = orchestrator_id
        self.agent_version = agent_version
        """The agent release new launches boot with (ADR-32): set it to release a new agent;
        the launches after carry it, the instances running keep the version they booted with."""
        self.memory = memory
        self._pools: dict[str, tuple[str, int]] = {}  # pool -> (purchase model, vCPU)
        self._claim_of: _Bounded = _Bounded(memory)  # event or instance id -> claim
        self._causes: _Bounded = _Bounded(memory)  # event id -> Cause
        self._gone: _Bounded = _Bounded(memory)  # instance id -> event time it went
        self._orders: dict[str, Order] = {}  # not done yet, by order id
        # The ids of orders done, so that a resend is no order (bounded even without `memory`:
        # a resend comes soon after its first copy, and a long simulation orders millions).
        self._finished: _Bounded = _Bounded(memory if memory is not None else FINISHED_KEPT)
        self._answers: dict[str, str] = {}  # answering event id -> order id
        self._deletes: dict[str, set[str]] = {}  # instance id -> delete orders not done
        self._seq = 0
        self._now_us = 0  # the newest event time observed
        # With `forgets` (the caller calls `forget`): (event time, id) of each cause learnt,
        # the ids of the events each claim was learnt of, and (event time, claim) of each release.
        self._learnt: deque[tuple[int, str]] | None = deque() if forgets else None
        self._learnt_of: dict[str, list[str]] | None = {} if forgets else None
        self._released: deque[tuple[int, str]] | None = deque() if forgets else None
        self.done = 0

    # -- the fold ----------------------------------------------------------------------------

    def observe(self, event: Envelope) -> None:
        """Fold one event of the region's log (any event; most change nothing)."""
        p = event.payload
        self._now_us = max(self._now_us, event.occurred_at)
        order_id = self._answers.get(event.event_id)
        if order_id is not None:
            self.finish(order_id)
        if not isinstance(p, _FOLDED):
            return  # most events (rate cards, rankings): one check instead of the chains below
        if isinstance(p, ActuationOrdered):
            self._order(event)
            return
        if isinstance(p, PoolRegistered):
            self._pools[p.pool_id] = (p.purchase_model, p.instance_vcpu)
            return
        self._learn_claim(event)
        if isinstance(p, CapacityReleased) and self._released is not None:
            self._released.append((event.occurred_at, p.claim_id))
        if isinstance(p, InstanceLaunched):
            order = p.tags.get(CALL_TAG)
            if order is not None:
                self.finish(order)
        elif isinstance(p, InstanceDeleted | InstanceLost):
            self._gone.remember(p.instance_id, event.occurred_at)
            for order in sorted(self._deletes.pop(p.instance_id, ())):
                self.finish(order)
        cause = _cause(event)
        if cause is not None:
            self._causes.remember(event.event_id, cause)
            if self._learnt is not None:
                self._learnt.append((event.occurred_at, event.event_id))

    def _order(self, event: Envelope) -> None:
        if event.event_id in self._orders or event.event_id in self._finished:
            # Seen again: a runtime may send a decision twice (same id, same bytes), also after
            # the order was carried out and answered; a tailing reader then sees the copy after
            # the answer (it was written later), and must not carry the order out again.
            return
        self._seq += 1
        order = Order.of(event, self._seq)
        if order.call == "delete" and order.instance_id in self._gone:
            self.done += 1
            return  # its instance is gone already: nothing to delete
        self._orders[order.order_id] = order
        for answer in order.answers:
            self._answers[answer] = order.order_id
        if order.call == "delete" and order.instance_id is not None:
            self._deletes.setdefault(order.instance_id, set()).add(order.order_id)

    def finish(self, order_id: str) -> None:
        """`order_id` is done (its answer is in the log, or the actuator wrote it)."""
        self._finished.remember(order_id, self._now_us)
        order = self._orders.pop(order_id, None)
        if order is None:
            return
        self.done += 1
        for answer in order.answers:
            self._answers.pop(answer, None)
        if order.instance_id is not None:
            waiting = self._deletes.get(order.instance_id)
            if waiting is not None:
                waiting.discard(order_id)
                if not waiting:
                    del self._deletes[order.instance_id]

    def _learn_claim(self, event: Envelope) -> None:
        """Remember the claim an event serves, from its own fields or its cause's."""
        p = event.payload
        claims = self._claim_of
        claim: str | None = None
        if isinstance(p, CapacityClaimOpened):
            claim = p.claim_id
        elif isinstance(p, PlacementDecided):
            claim = p.claim_id or claims.get(event.causation_id or "")
        elif isinstance(p, ReplacementRequested):
            claim = claims.get(p.replaces_instance_id)
        elif isinstance(p, InstanceLaunched):
            claim = p.tags.get(CLAIM_TAG)
            if claim is not None:
                claims.remember(p.instance_id, claim)
        elif isinstance(p, NoticeReceived | InstanceLost):
            claim = claims.get(p.instance_id)
        elif isinstance(p, FallbackDecided | FallbackReturned | FallbackReviewed):
            claim = claims.get(event.causation_id or "")
        if claim is not None:
            claims.remember(event.event_id, claim)
            if self._learnt_of is not None:
                self._learnt_of.setdefault(claim, []).append(event.event_id)

    def forget(self, before_us: int) -> None:
        """Forget what was settled before event time `before_us`: the causes no open order
        waits on, the instances gone (and the claims learnt of them), the orders done, and what
        was learnt of events for a claim released `RELEASED_MEMORY_US` before it. Only for
        a book whose orders come with their causes, whose decisions never name an instance gone
        that long ago, and whose orders are never sent twice (the simulator's loop); the actuator
        service, whose orders may come before their causes or again after a restart, bounds its
        book by `memory` instead."""
        learnt, causes = self._learnt, self._causes
        if learnt is None:
            raise ValueError("this book was made without forgets=True: it cannot forget")
        waited_on = {o.cause_id for o in self._orders.values()}
        kept: list[tuple[int, str]] = []
        while learnt and learnt[0][0] < before_us:
            entry = learnt.popleft()
            if entry[1] in waited_on:
                kept.append(entry)  # a throttled order still to go out: its cause stays
            else:
                causes.pop(entry[1], None)
        learnt.extendleft(reversed(kept))
        gone, claims = self._gone, self._claim_of
        while gone:
            instance_id, at_us = next(iter(gone.items()))
            if at_us >= before_us or instance_id in self._deletes:
                break
            del gone[instance_id]
            claims.pop(instance_id, None)
        finished = self._finished
        while finished:
            order_id, at_us = next(iter(finished.items()))
            if at_us >= before_us:
                break
            del finished[order_id]
        self._forget_released(before_us - RELEASED_MEMORY_US)

    def _forget_released(self, before_us: int) -> None:
        """Forget the claims learnt of events for each claim released before `before_us` (the
        claims learnt of instances go with the instances). A decision's cause can be days old (a
        fallback's return or review, a placement on a timer), but not one whose claim's work was
        done a day before: in the 7-day demo none of the entries dropped was asked for again,
        and the log is the same byte for byte (docs/performance.md, "The demo")."""
        released, learnt_of, claims = self._released, self._learnt_of, self._claim_of
        assert released is not None and learnt_of is not None  # a book made with forgets=True
        while released and released[0][0] < before_us:
            _, claim = released.popleft()
            for event_id in learnt_of.pop(claim, ()):
                if claims.get(event_id) == claim:
                    del claims[event_id]

    # -- what to do --------------------------------------------------------------------------

    @property
    def open_orders(self) -> int:
        return len(self._orders)

    def orders(self) -> list[Order]:
        """Every order not done, in the order they go out."""
        return sorted(self._orders.values(), key=lambda o: (o.not_before_us, o.seq))

    def ready(self, now_us: int) -> list[Order]:
        """The orders whose time has come and whose cause is known, in the order they go out."""
        due = [
            o
            for o in self._orders.values()
            if o.not_before_us <= now_us and o.cause_id in self._causes
        ]
        return sorted(due, key=lambda o: (o.not_before_us, o.seq))

    def next_due_us(self) -> int | None:
        """When the next order whose cause is known may go out."""
        dues = [o.not_before_us for o in self._orders.values() if o.cause_id in self._causes]
        return min(dues, default=None)

    def launch_request(self, order: Order) -> LaunchRequest:
        """The provider request of a launch order, with every tag it carries."""
        cause: Cause = self._causes[order.cause_id]
        pool_id = order.pool_id or ""
        extra = {
            POOL_TAG: pool_id,
            ROLE_TAG: self.role(pool_id, cause),
            DECISION_TAG: order.cause_id,
            CALL_TAG: order.order_id,
        }
        claim = self._claim_of.get(order.cause_id)
        if claim is not None:
            extra[CLAIM_TAG] = claim
        if self.agent_version is not None:
            extra[AGENT_VERSION_TAG] = self.agent_version
        return LaunchRequest(
            pool_id,
            order.workload_id,
            owned_tags(self.orchestrator_id, order.workload_id, extra),
            causation_id=order.cause_id,
            correlation_id=cause.correlation_id,
        )

    def delete_request(self, order: Order) -> DeleteRequest:
        cause: Cause = self._causes[order.cause_id]
        return DeleteRequest(
            order.instance_id or "",
            cause.delete_reason,
            causation_id=order.cause_id,
            correlation_id=cause.correlation_id,
        )

    def role(self, pool_id: str, cause: Cause) -> str:
        """The role tag of an instance launched in `pool_id` for `cause` (ADR-11)."""
        model = self._pools.get(pool_id, ("", 0))[0]
        if model == "reclaimable":
            return SPREAD_ROLE
        if model == "committed":
            return cause.committed_role
        return cause.guaranteed_role

    def pool(self, pool_id: str) -> tuple[str, int] | None:
        """The purchase model and instance size of `pool_id`, once registered."""
        return self._pools.get(pool_id)

    # -- snapshots ---------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The book as JSON-able data (`restore` takes it back)."""
        return {
            "orchestrator_id": self.orchestrator_id,
            "pools": {k: list(v) for k, v in self._pools.items()},
            "claims": list(self._claim_of.items()),
            "causes": [asdict(c) for c in self._causes.values()],
            "gone": list(self._gone),
            "orders": [asdict(o) for o in self._orders.values()],
            "finished": list(self._finished),
            "seq": self._seq,
            "done": self.done,
        }

    @classmethod
    def restore(cls, data: Mapping[str, Any], memory: int | None = None) -> OrderBook:
        book = cls(str(data["orchestrator_id"]), memory)
        book._pools = {k: (str(m), int(v)) for k, (m, v) in data["pools"].items()}
        for key, claim in data["claims"]:
            book._claim_of.remember(key, claim)
        for cause in data["causes"]:
            book._causes.remember(cause["event_id"], Cause(**cause))
        for instance_id in data["gone"]:
            book._gone.remember(instance_id, 0)
        book._add_orders(Order(**o) for o in data["orders"])
        for order_id in data.get("finished", ()):  # books stored before it was kept: none
            book._finished.remember(order_id, 0)
        book._seq = int(data["seq"])
        book.done = int(data["done"])
        return book

    def _add_orders(self, orders: Iterable[Order]) -> None:
        for order in orders:
            self._orders[order.order_id] = order
            for answer in order.answers:
                self._answers[answer] = order.order_id
            if order.call == "delete" and order.instance_id is not None:
                self._deletes.setdefault(order.instance_id, set()).add(order.order_id)


def _cause(event: Envelope) -> Cause | None:
    """What an order needs of `event`, if `event` is of a kind that can cause calls."""
    p = event.payload
    role = FLOOR_ROLE  # the planner places only the floor on guaranteed capacity
    if isinstance(p, ReplacementRequested):
        role = FLOOR_ROLE if p.floor else FALLBACK_ROLE
    elif isinstance(p, FallbackDecided):
        role = FLOOR_ROLE if p.kind == "floor_restore" else FALLBACK_ROLE
    if isinstance(p, FallbackReturned):
        reason = "fallback returned to reclaimable capacity"
    elif isinstance(p, CapacityReleased):
        reason = f"claim {p.claim_id} released: its work is done"
    elif isinstance(p, InstanceLaunched):
        reason = "landed after its claim was released"
    elif isinstance(p, PlacementDecided | ReplacementRequested | FallbackDecided):
        reason = ""
    else:
        return None
    spare = isinstance(p, PlacementDecided) and p.floor_vcpu == 0
    return Cause(
        event.event_id, event.correlation_id, role, reason, SPARE_ROLE if spare else FLOOR_ROLE
    )
