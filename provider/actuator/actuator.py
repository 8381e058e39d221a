"""The actuator's I/O half: it carries out the guard's orders through a provider, each once.

`Actuator` takes the book's ready orders (`provider.actuator.book`) and makes their calls
through a `provider.base.CapacityProvider`: a launch with every tag of the book, a delete of an
instance the guard allowed. The provider's answers become events: the lifecycle facts the
provider hands out (`poll_events`: ``instance_launched``, ``instance_deleted``, and whatever
its feeds publish), ``launch_failed`` when it refuses a launch, and ``actuation_refused`` when
the actuator will not carry an order out (rule ``expired``: the order waited longer than
`max_age_s`, so what it asked for is stale; rule ``not_owned``: the provider says the instance
is not ours; rule ``no_authority``: the actuator holds no live credential for the project,
ADR-29, `provider.authority`). Every event names the decision it carries out as its cause.
An authority that cannot tell now (OpenBao unreachable and no live credential held:
`AuthorityUnavailableError`) refuses nothing: the orders wait in the book and go out, once
each, when it answers (or are refused as ``expired`` once older than `max_age_s`).

**Once, whatever is killed when.** Before a call goes out, its order is written to the
`Journal` (``start``, fsync'd); after its answer is in the log, ``done``. An order started and
not done is one whose answer may have been lost: `recover` asks the provider what happened
before anything else is sent. A launch is looked up by its order's tag
(``spotcap.io/call``): found, its ``instance_launched`` is written (the same event id the
adapter gives it, `provider.base.instance_fact_id`) and nothing is launched; not found, it never
happened, and the order goes out as usual. A delete whose instance the provider no longer lists
gets its ``instance_deleted``; one still listed is deleted. An order the journal never started
was never sent.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from provider.actuator.book import (
    ACTUATOR,
    Order,
    OrderBook,
    failure_id,
    refusal_id,
)
from provider.authority import AuthorityUnavailableError
from provider.base import (
    CALL_TAG,
    OWNER_TAG,
    CapacityProvider,
    Instance,
    NotOwnedError,
    ProviderError,
    UnknownInstanceError,
    instance_fact_id,
)
from schemas.events import (
    ActuationRefused,
    Envelope,
    InstanceDeleted,
    InstanceLaunched,
    LaunchFailed,
    Payload,
)
from streams.actuation import ActuationRefusedError

log = logging.getLogger("spotcap.actuator")

US = 1_000_000
MAX_AGE_S = 900.0
"""How long an order may wait (its not-before to now) and still be carried out."""


def launch_failed(book: OrderBook, order: Order, error: ProviderError) -> LaunchFailed:
    """The ``launch_failed`` of a launch the provider refused (not retryable: the deciders
    place elsewhere, and the fallback arbiter covers what stays short)."""
    pool_id = order.pool_id or ""
    model, vcpu = book.pool(pool_id) or ("reclaimable", 0)
    return LaunchFailed(
        workload_id=order.workload_id,
        pool_id=pool_id,
        vcpu=vcpu,
        purchase_model=model,  # type: ignore[arg-type]  # a registered pool's, or the default
        error_class=type(error).__name__,
        reason=str(error),
        retryable=False,
    )


class ActionAuthority(Protocol):
    """Whether the actuator may make a mutating call now (ADR-29: `provider.authority`)."""

    def refusal(self, call: str) -> str | None:
        """Why `call` must not go out; None when it may; `AuthorityUnavailableError` when that
        cannot be told now (the call waits)."""
        ...

    def keep_fresh(self) -> None:
        """Renew what the actuator's reads go out with, when due (called every step)."""
        ...


class Journal:
    """The orders this actuator started and finished: an append-only file of lines
    ``start <order id>`` (fsync'd before the call) and ``done <order id>``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.started: set[str] = set()
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                what, _, order_id = line.partition(" ")
                if what == "start":
                    self.started.add(order_id)
                elif what == "done":
                    self.started.discard(order_id)
        self._file = path.open("a", encoding="utf-8")

    def start(self, order_id: str) -> None:
        self._file.write(f"start {order_id}\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self.started.add(order_id)

    def done(self, order_id: str) -> None:
        if order_id in self.started:
            self._file.write(f"done {order_id}\n")
            self.started.discard(order_id)

    def compact(self) -> None:
        """Rewrite the file with only the orders started and not done."""
        self._file.close()
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as out:
            out.writelines(f"start {order_id}\n" for order_id in sorted(self.started))
            out.flush()
            os.fsync(out.fileno())
        tmp.replace(self.path)
        self._file = self.path.open("a", encoding="utf-8")

    def close(self) -> None:
        self._file.close()


@dataclass(slots=True)
class Counts:
    """What the actuator did, for its progress lines and the demo's summary."""

    launched: int = 0
    deleted: int = 0
    failed: int = 0
    refused: int = 0
    recovered: int = 0
    gone: int = 0
    facts: int = 0
    by_rule: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        """What the actuator did, in words (its last line when it stops)."""
        return (
            f"launched {self.launched:,}, deleted {self.deleted:,}, launch failed "
            f"{self.failed:,}, refused {self.refused:,}, recovered after a restart "
            f"{self.recovered:,}"
        )


class Actuator:
    """Carries out a book's orders through `provider`; `write` appends an event to the log
    and `flush` waits until the log holds everything written (see the module's doc)."""

    def __init__(
        self,
        provider: CapacityProvider,
        book: OrderBook,
        journal: Journal,
        write: Callable[[Envelope], None],
        flush: Callable[[], object],
        *,
        max_age_s: float = MAX_AGE_S,
        on_step: Callable[[str], None] | None = None,
        authority: ActionAuthority | None = None,
    ) -> None:
        if provider.orchestrator_id != book.orchestrator_id:
            raise ValueError(
                f"the provider acts as {provider.orchestrator_id!r} but the orders are for "
                f"{book.orchestrator_id!r}: give both the same orchestrator id "
                "(actuator.orchestrator_id)"
            )
        self.provider = provider
        self.book = book
        self.journal = journal
        self._write = write
        self._flush = flush
        self.max_age_us = round(max_age_s * US)
        self.authority = authority
        self.counts = Counts()
        self.waiting: str | None = None
        """Why the last `act` held its orders back (the authority cannot tell now), if it did."""
        # told "started" (journalled, nothing sent), "called" (the provider answered, nothing
        # written), "answered" (the answer is in the log, the order not yet done) and "done"
        # (nothing of it stored but the journal's line): the crash tests stop the process there
        self._on_step = on_step or (lambda step: None)

    # -- after a restart ---------------------------------------------------------------------

    def recover(self) -> int:
        """Settle the orders started before a crash and not finished (call this once the book
        has read the log to its end, so that every answer written is known). Returns how many
        were settled without a call."""
        started = [o for o in self.book.orders() if o.order_id in self.journal.started]
        for order_id in self.journal.started - {o.order_id for o in started}:
            self.journal.done(order_id)  # answered in the log since
        deletes = [o for o in started if o.call == "delete"]
        live = (
            {i.instance_id for i in self.provider.list_by_tag(OWNER_TAG, self.book.orchestrator_id)}
            if deletes
            else set()
        )
        answered: list[Order] = []
        for order in started:
            if order.call == "launch":
                found = self.provider.list_by_tag(CALL_TAG, order.order_id)
                if found:
                    self._emit_launched(order, found[0])
                    answered.append(order)
            elif order.instance_id not in live:
                self._emit_deleted(order)
                answered.append(order)
        self._flush()
        for order in answered:
            self.book.finish(order.order_id)
            self.journal.done(order.order_id)
        settled = len(answered)
        self.counts.recovered += settled
        if started:
            log.info(
                "recovered %d order(s) started before a restart: %d settled from the provider",
                len(started),
                settled,
            )
        return settled

    def _emit_launched(self, order: Order, instance: Instance) -> None:
        payload = InstanceLaunched(
            instance_id=instance.instance_id,
            pool_id=instance.pool_id,
            workload_id=instance.workload_id,
            vcpu=instance.vcpu,
            purchase_model=instance.purchase_model,
            tags=dict(sorted(instance.tags.items())),
        )
        at_us = instance.launched_at or self.provider.now_us()
        event_id = instance_fact_id(self.provider.region, instance.instance_id, "instance_launched")
        self._emit(payload, order, at_us, event_id)

    def _emit_deleted(self, order: Order) -> None:
        request = self.book.delete_request(order)
        payload = InstanceDeleted(
            instance_id=request.instance_id,
            pool_id="",
            workload_id=order.workload_id,
            deleted_by=request.deleted_by,
            principal=f"orchestrator/{self.book.orchestrator_id}",
            reason=f"{request.reason} (found gone when the actuator restarted)",
        )
        event_id = instance_fact_id(self.provider.region, request.instance_id, "instance_deleted")
        self._emit(payload, order, self.provider.now_us(), event_id)

    # -- acting ------------------------------------------------------------------------------

    def act(self, now_us: int | None = None) -> int:
        """Carry out every ready order, oldest first; returns how many calls went out."""
        now_us = self.provider.now_us() if now_us is None else now_us
        calls = 0
        waited, self.waiting = self.waiting, None
        for order in self.book.ready(now_us):
            if now_us - order.not_before_us > self.max_age_us:
                self._refuse(order, "expired", self._expired(order, now_us))
                continue
            try:
                refusal = self.authority.refusal(order.call) if self.authority else None
            except AuthorityUnavailableError as error:  # nothing sent, nothing refused: later
                self.waiting = str(error)
                if waited is None:
                    log.warning("orders wait for the capacity authority: %s", error)
                break
            if refusal is not None:  # nothing sent: the order is done, refused
                self._refuse(order, "no_authority", refusal)
                continue
            self.journal.start(order.order_id)
            self._on_step("started")
            calls += 1
            if order.call == "launch":
                self._launch(order)
            elif order.call == "delete":
                self._delete(order)
            else:
                self._refuse(order, "unsupported", f"the actuator makes no {order.call} calls")
            self._on_step("called")
            self.pump()
            self._flush()  # the answer is in the log before the order is done
            self._on_step("answered")
            self.book.finish(order.order_id)
            self.journal.done(order.order_id)
            self._on_step("done")
        return calls

    def pump(self) -> int:
        """Write what the provider has published since the last call (its answers, and its
        feeds' facts); returns how many events (`flush` makes sure the log holds them)."""
        events = self.provider.poll_events()
        for event in events:
            self._write(event)
        self.counts.facts += len(events)
        return len(events)

    def _launch(self, order: Order) -> None:
        request = self.book.launch_request(order)
        try:
            self.provider.launch(request)
        except ActuationRefusedError as error:  # the budget's own event says why
            self._refused_by_budget(order, error)
        except ProviderError as error:
            log.warning("launch for order %s failed: %s", order.order_id, error)
            payload = launch_failed(self.book, order, error)
            self._emit(
                payload, order, self.provider.now_us(), failure_id(order.cause_id, order.index)
            )
            self.counts.failed += 1
        else:
            self.counts.launched += 1

    def _delete(self, order: Order) -> None:
        request = self.book.delete_request(order)
        try:
            self.provider.delete(request)
        except ActuationRefusedError as error:
            self._refused_by_budget(order, error)
        except UnknownInstanceError:
            self.counts.gone += 1  # gone already; its loss or deletion is the provider's fact
        except NotOwnedError as error:
            self._refuse(order, "not_owned", str(error))
        except ProviderError as error:
            log.warning("delete for order %s failed: %s", order.order_id, error)
            self._refuse(order, "provider_error", str(error))
        else:
            self.counts.deleted += 1

    def _refused_by_budget(self, order: Order, error: ActuationRefusedError) -> None:
        """The regional budget at the wall clock refused the call (its breaker is open): the
        budget wrote its ``actuation_refused``; the order is done, unsent."""
        log.warning("order %s refused by the regional budget: %s", order.order_id, error)
        self.counts.refused += 1
        self.counts.by_rule["budget"] = self.counts.by_rule.get("budget", 0) + 1

    def _expired(self, order: Order, now_us: int) -> str:
        waited_s = (now_us - order.not_before_us) // US
        return (
            f"the order waited {waited_s} s, more than the actuator's "
            f"{self.max_age_us // US} s: what its decision asked for is stale; the deciders "
            "decide again"
        )

    def _refuse(self, order: Order, rule: str, why: str) -> None:
        payload = ActuationRefused(
            call=order.call,  # type: ignore[arg-type]  # an order's call is an ActuationCall
            rule=rule,
            reason=why,
            instance_id=order.instance_id,
            pool_id=order.pool_id,
            workload_id=order.workload_id or None,
        )
        self._emit(payload, order, self.provider.now_us(), refusal_id(order.order_id))
        self.book.finish(order.order_id)
        self.counts.refused += 1
        self.counts.by_rule[rule] = self.counts.by_rule.get(rule, 0) + 1

    def _emit(self, payload: Payload, order: Order, at_us: int, event_id: str) -> None:
        event = Envelope(
            event_id=event_id,
            event_type=payload.EVENT_TYPE,
            occurred_at=at_us,
            recorded_at=at_us,
            region=self.provider.region,
            key=self.provider.region if payload.KEY == "region" else getattr(payload, payload.KEY),
            causation_id=order.cause_id,
            correlation_id=order.correlation_id,
            producer=ACTUATOR,
            payload=payload,
        )
        self._write(event)
