"""The reconciler (`spotcap run reconciler`): level-triggered, on a clock, the provider's tags
against the fleet state (ADR-10, ADR-11).

Each round lists the provider's instances tagged as the orchestrator's own, reads the fleet
state's live instances (PostgreSQL), asks the provider about the state's instances the listing
lacks (`CapacityProvider.get`), and compares (`provider.reconcile.compare`). Each drift is
written to the log as a ``drift_detected`` event, followed by what it implies: an adopted
instance's ``instance_launched`` or a vanished instance's ``instance_lost``, both caused by the
drift event. Nothing is deleted, ever: the reconciler makes no mutating call.

Level-triggered: a round judges what is, not what changed, so a missed round or a restart
loses nothing. Its events have ids derived from the instance and the kind of drift, so a drift
seen again (the state not caught up yet) writes the same events, which readers drop as
duplicates; within one process a drift is written once.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from projections.postgres.connection import Connection, FleetDatabaseError
from provider.base import (
    OWNER_TAG,
    CapacityProvider,
    Instance,
    UnknownInstanceError,
    instance_fact_id,
)
from provider.reconcile.compare import MISSING, UNKNOWN, Drift, StateInstance, compare
from schemas.events import DriftDetected, Envelope, InstanceLaunched, InstanceLost, Payload
from schemas.ids import derived_event_id

log = logging.getLogger("spotcap.reconciler")

US = 1_000_000
PRODUCER = "spotcap/reconciler"
LIVE_STATES = ("requested", "running", "advised", "noticed", "draining", "drained")
RETRY_FIRST_S, RETRY_MAX_S = 1.0, 30.0
TRANSIENT: tuple[type[Exception], ...] = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    FleetDatabaseError,
)
"""What a round raises when the fleet state's database is away: tried again."""
GRACE_S = 120.0
"""An instance launched less than this long ago is not judged (its launch or deletion may
still be on its way)."""


def live_instances(conn: Connection) -> dict[str, StateInstance]:
    """The fleet state's live instances, by id."""
    query = sql.SQL(
        "SELECT instance_id, state, workload_id, pool_id, coalesce(vcpu, 0), purchase_model,"
        " tags->>{owner}, (extract(epoch FROM launched_at) * 1000000)::bigint"
        " FROM instances WHERE state = ANY(%s)"
    ).format(owner=sql.Literal(OWNER_TAG))
    with conn.cursor() as cur:
        cur.execute(query, [list(LIVE_STATES)])
        rows = cur.fetchall()
    conn.commit()
    return {r[0]: StateInstance(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7] or 0) for r in rows}


@dataclass(slots=True)
class RoundReport:
    owned: int = 0
    state: int = 0
    drifts: list[Drift] = field(default_factory=list)
    written: int = 0

    def as_json(self) -> dict[str, Any]:
        """What `spotcap run reconciler --once --json` prints."""
        return {"owned": self.owned, "state": self.state,
                "drifts": [d.as_json() for d in self.drifts]}  # fmt: skip

    def progress(self) -> str:
        """The round in one progress line: both sides' counts and the drifts by kind."""
        return (
            f"reconciler: {self.owned:,} at the provider, {self.state:,} in the state, "
            f"drifts {kinds(self.drifts) or 'none'}"
        )

    def lines(self) -> list[str]:
        """The round for people: both sides' counts, then each drift on its own line."""
        head = (
            f"{self.owned:,} instances at the provider, {self.state:,} live in the state; "
            f"{len(self.drifts)} differ"
        )
        return [head, *(f"  {d.describe()}" for d in self.drifts)]


class Reconciler:
    """One region's reconciler: `round()` compares once and writes what it found."""

    def __init__(
        self,
        provider: CapacityProvider,
        conn: Connection,
        write: Callable[[Envelope], None],
        flush: Callable[[], object],
        *,
        grace_s: float = GRACE_S,
        reconnect: Callable[[], Connection] | None = None,
    ) -> None:
        self.provider = provider
        self.conn = conn
        self._reconnect = reconnect
        self._write = write
        self._flush = flush
        self.grace_us = round(grace_s * US)
        self._written: set[str] = set()

    def round(self) -> RoundReport:
        orchestrator = self.provider.orchestrator_id
        owned = self.provider.list_by_tag(OWNER_TAG, orchestrator)
        state = live_instances(self.conn)
        listed = {i.instance_id for i in owned}
        others = {i: self._ask(i) for i in state if i not in listed}
        now_us = self.provider.now_us()
        drifts = compare(
            owned,
            state,
            others,
            orchestrator_id=orchestrator,
            now_us=now_us,
            grace_us=self.grace_us,
        )
        report = RoundReport(len(owned), len(state), drifts)
        for drift in drifts:
            report.written += self._report(drift, now_us)
        self._flush()
        return report

    def reconnect(self) -> None:
        """A new connection to the fleet state in place of one that was lost (raises what
        connecting raises; without a way to reconnect, `FleetDatabaseError`)."""
        if self._reconnect is None:
            raise FleetDatabaseError("the connection to the fleet state was lost")
        with contextlib.suppress(Exception):
            self.conn.close()
        try:
            self.conn = self._reconnect()
        except Exception as error:  # whatever connecting raises: the database is not back
            raise FleetDatabaseError(str(error)) from error

    def _ask(self, instance_id: str) -> Instance | None:
        try:
            instance = self.provider.get(instance_id)
        except UnknownInstanceError:
            return None
        return None if instance.state == "gone" else instance

    def _report(self, drift: Drift, now_us: int) -> int:
        region = self.provider.region
        drift_id = derived_event_id(f"{region}:instance/{drift.instance_id}", "drift", drift.kind)
        if drift_id in self._written:
            return 0
        payload = DriftDetected(
            kind=drift.kind,
            instance_id=drift.instance_id,
            pool_id=drift.pool_id,
            workload_id=drift.workload_id,
            state_says=drift.state_says,
            provider_says=drift.provider_says,
            action=drift.action,
        )
        events = [self._event(payload, drift_id, now_us, None)]
        if drift.kind == UNKNOWN and drift.instance is not None:
            i = drift.instance
            adopted = InstanceLaunched(
                instance_id=i.instance_id,
                pool_id=i.pool_id,
                workload_id=i.workload_id,
                vcpu=i.vcpu,
                purchase_model=i.purchase_model,
                tags=dict(sorted(i.tags.items())),
            )
            launched_id = instance_fact_id(region, i.instance_id, "instance_launched")
            events.append(self._event(adopted, launched_id, i.launched_at or now_us, drift_id))
        elif drift.kind == MISSING and drift.known is not None:
            k = drift.known
            lost = InstanceLost(
                instance_id=k.instance_id,
                pool_id=k.pool_id or "",
                workload_id=k.workload_id or "",
                vcpu=k.vcpu,
                purchase_model=k.purchase_model or "reclaimable",  # type: ignore[arg-type]
                with_notice=False,
                reason="deleted_outside",
            )
            lost_id = derived_event_id(drift_id, "instance_lost")
            events.append(self._event(lost, lost_id, now_us, drift_id))
        for event in events:
            self._write(event)
        self._written.add(drift_id)
        log.warning(
            "drift: %s %s (state: %s; provider: %s): %s",
            drift.kind,
            drift.instance_id,
            drift.state_says,
            drift.provider_says,
            drift.action,
        )
        return len(events)

    def _event(
        self, payload: Payload, event_id: str, at_us: int, causation_id: str | None
    ) -> Envelope:
        return Envelope(
            event_id=event_id,
            event_type=payload.EVENT_TYPE,
            occurred_at=at_us,
            recorded_at=at_us,
            region=self.provider.region,
            key=str(getattr(payload, payload.KEY)),
            causation_id=causation_id,
            correlation_id=None,
            producer=PRODUCER,
            payload=payload,
        )


def run_reconciler(
    reconciler: Reconciler,
    *,
    every_s: float,
    should_stop: Callable[[], bool],
    on_round: Callable[[RoundReport], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    on_error: Callable[[str], None] | None = None,
) -> int:
    """Round after round, `every_s` apart, until `should_stop`; returns how many rounds.

    A round that fails because the fleet state's database went away (killed, restarting, a
    lost connection) is given up, said through `on_error`, and tried again on a new
    connection after a backoff (1 s, doubled up to 30 s): rounds judge what is, so a round
    given up loses nothing, and the events of a round are written at its end, after every
    read. (It used to end the process with a traceback.)"""
    rounds = 0
    backoff_s = RETRY_FIRST_S
    while not should_stop():
        started = time.monotonic()
        try:
            report = reconciler.round()
        except TRANSIENT as error:
            said = str(error).strip().splitlines()[0] if str(error).strip() else ""
            if on_error is not None:
                on_error(f"reconciler: the fleet state is unreachable ({type(error).__name__}: "
                         f"{said}); trying again in {backoff_s:.0f} s")  # fmt: skip
            _wait(backoff_s, should_stop, sleep)
            backoff_s = min(backoff_s * 2, RETRY_MAX_S)
            with contextlib.suppress(*TRANSIENT):
                reconciler.reconnect()
            continue
        backoff_s = RETRY_FIRST_S
        rounds += 1
        if on_round is not None:
            on_round(report)
        left = every_s - (time.monotonic() - started)
        while left > 0 and not should_stop():
            sleep(min(left, 0.5))
            left = every_s - (time.monotonic() - started)
    return rounds


def _wait(seconds: float, should_stop: Callable[[], bool], sleep: Callable[[float], None]) -> None:
    until = time.monotonic() + seconds
    while not should_stop() and (left := until - time.monotonic()) > 0:
        sleep(min(left, 0.5))


def kinds(drifts: Iterable[Drift]) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in drifts:
        out[d.kind] = out.get(d.kind, 0) + 1
    return out
