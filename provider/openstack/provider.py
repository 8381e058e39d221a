"""The OpenStack provider: `provider.base.CapacityProvider` over Nova, Placement, Blazar and the
provider feeds.

Built from an ``openstack.connection.Connection`` that the composition root makes (in
production from a one-hour, project-scoped application credential, ADR-29) and a `PoolMapping`
(the catalogue's pools in Nova's words). Every mutating call (launch, delete, reserve, reclaim)
draws from the ``acquire`` hook first: the actuator's regional budget (ADR-12,
`streams.actuation.BudgetHook`); every failure is a `provider.base.ProviderError`
naming the call, its target and the HTTP status (``provider.openstack.errors``).

Lifecycle facts the adapter causes (`InstanceLaunched`, `InstanceDeleted`) are queued when the
call succeeds; the feeds' facts (rate cards, forward capacity, notices, advisories) are read when
`poll_events` asks (``provider.openstack.facts``). Both leave through `poll_events`. This is an
edge adapter, not a decider: ``now_us`` is its ``clock``, the wall clock of a real cloud or a
served simulated region's clock, which runs ``clock_speed`` times as fast as real time.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any, TypeGuard, get_args

from keystoneauth1.access import AccessInfoV3
from keystoneauth1.identity.base import BaseIdentityPlugin
from openstack.connection import Connection

from provider.base import (
    OWNER_TAG,
    DeleteRequest,
    Instance,
    InstanceState,
    LaunchRequest,
    NotReclaimableError,
    ProviderError,
    ReclaimRequest,
    ReclaimScheduled,
    instance_fact_id,
    owned_tags,
)
from provider.openstack import tags as spot_tags
from provider.openstack.blazar import BlazarLeases, Lease, LeaseRequest
from provider.openstack.budget import Acquire, unbounded
from provider.openstack.compute import NovaInstances, Server
from provider.openstack.facts import Clock, FeedFacts, FeedPosition, envelope
from provider.openstack.feeds import ProviderFeeds, check_notice
from provider.openstack.mapping import PoolMapping
from provider.openstack.placement import PlacementHeadroom, ProviderHeadroom
from schemas.events import Envelope, InstanceDeleted, InstanceLaunched, PurchaseModel

log = logging.getLogger(__name__)

_PURCHASE_MODELS: frozenset[str] = frozenset(get_args(PurchaseModel))
_GONE = frozenset({"DELETED", "SOFT_DELETED"})


def wall_clock_us() -> int:
    """Microseconds since the epoch, UTC, from the wall clock."""
    return time.time_ns() // 1_000


class OpenStackProvider:
    """A region of the organisation's OpenStack cloud, held to the provider contract (ADR-05)."""

    def __init__(
        self,
        conn: Connection,
        *,
        orchestrator_id: str,
        pools: PoolMapping,
        feed_endpoint: str,
        acquire: Acquire = unbounded,
        timeout_s: float = 30.0,
        position: FeedPosition | None = None,
        clock: Clock = wall_clock_us,
        clock_speed: float = 1.0,
    ) -> None:
        if not clock_speed > 0:
            raise ValueError(f"clock_speed {clock_speed!r}: seconds of `clock` per real second")
        self._conn = conn
        self._orchestrator_id = orchestrator_id
        self._pools = pools
        self._clock = clock
        self._clock_speed = clock_speed
        self._nova = NovaInstances(conn, orchestrator_id, acquire)
        self._placement = PlacementHeadroom(conn)
        self._blazar = BlazarLeases(conn, acquire, timeout_s=timeout_s)
        self._feeds = ProviderFeeds(conn.session, feed_endpoint, acquire, timeout_s=timeout_s)
        self._facts = FeedFacts(self._feeds, pools.region, clock, position)
        self._outbox: deque[Envelope] = deque()
        self._noticed: set[str] = set()
        self._feed_errors: tuple[ProviderError, ...] = ()

    # -- the seam -------------------------------------------------------------------------------

    @property
    def region(self) -> str:
        return self._pools.region

    @property
    def orchestrator_id(self) -> str:
        return self._orchestrator_id

    @property
    def session(self) -> Any:
        """The keystoneauth session every call goes through (a capacity authority re-binds
        its credential, `provider.authority.ProjectAuthority`)."""
        return self._conn.session

    def now_us(self) -> int:
        return self._clock()

    @property
    def clock_speed(self) -> float:
        """Seconds of `now_us` per real second: 1 on the wall clock, a served simulated
        region's speed-up on its clock."""
        return self._clock_speed

    def launch(self, request: LaunchRequest) -> Instance:
        """Boot one server of the pool's flavor, image, networks and zone, tagged as ours.

        The tags are the request's, then the seam's ``owned_tags`` for this orchestrator and
        the workload, the pool and its purchase model (those four always win). `UnknownPoolError`
        (nothing sent) for a pool not in the catalogue.
        """
        spec = self._pools.spec(request.pool_id)
        pool = spec.pool
        tags = {
            **request.tags,
            **owned_tags(self._orchestrator_id, request.workload_id),
            spot_tags.POOL_TAG: pool.pool_id,
            spot_tags.PURCHASE_MODEL_TAG: pool.purchase_model,
        }
        name = f"{request.workload_id}-{uuid.uuid4().hex[:8]}"
        server = self._nova.create(spec, name, tags)
        now = self._clock()
        instance = Instance(
            instance_id=server.server_id,
            pool_id=pool.pool_id,
            workload_id=request.workload_id,
            vcpu=pool.size_vcpu,
            purchase_model=pool.purchase_model,
            tags=tags,
            launched_at=now,
        )
        payload = InstanceLaunched(
            instance_id=instance.instance_id,
            pool_id=pool.pool_id,
            workload_id=request.workload_id,
            vcpu=pool.size_vcpu,
            purchase_model=pool.purchase_model,
            tags=dict(sorted(tags.items())),
        )
        self._queue(payload, now, request.causation_id, request.correlation_id)
        return instance

    def delete(self, request: DeleteRequest) -> Instance:
        """Delete a server of ours: read from Nova, ownership checked, then deleted.

        `NotOwnedError` (nothing deleted, no token drawn) for a server whose metadata does not
        name this orchestrator; `InstanceNotFoundError` (an `UnknownInstanceError`) if it is gone.
        """
        server = self._nova.delete(request.instance_id)
        instance = self._instance(server, "gone")
        self._noticed.discard(instance.instance_id)
        payload = InstanceDeleted(
            instance_id=instance.instance_id,
            pool_id=instance.pool_id,
            workload_id=instance.workload_id,
            deleted_by=request.deleted_by,
            principal=self._principal(),
            reason=request.reason,
        )
        self._queue(payload, self._clock(), request.causation_id, request.correlation_id)
        return instance

    def list_by_tag(self, key: str, value: str) -> list[Instance]:
        """Live servers whose metadata has ``key`` = ``value``, by id.

        ``OWNER_TAG`` asks Nova for that owner's server tag; any other tag is looked for among
        this orchestrator's servers (Nova cannot filter on metadata, and the credential's
        project holds other servers that are none of spotcap's business).
        """
        owner = value if key == OWNER_TAG else self._orchestrator_id
        return [
            self._instance(s)
            for s in self._nova.list_owned_by(owner)
            if s.tags.get(key) == value and s.status not in _GONE
        ]

    def reclaim(self, request: ReclaimRequest) -> ReclaimScheduled:
        """Reclaim one of our reclaimable servers through the provider's path (ADR-33).

        Checked before anything is sent or drawn: the notice (`NoticeTooShortError`), the owner
        (`NotOwnedError`) and the purchase model (`NotReclaimableError`), read from Nova. The
        advisory, notice and loss that follow come out of `poll_events` from the feeds.
        """
        check_notice(request)
        server = self._nova.owned(request.instance_id, "reclaim")
        model = server.tags.get(spot_tags.PURCHASE_MODEL_TAG)
        if model != "reclaimable":
            raise NotReclaimableError(
                f"refusing to reclaim server {request.instance_id}: its purchase model is "
                f"{model!r}; only reclaimable capacity can be reclaimed"
            )
        return self._feeds.reclaim(request)

    def poll_events(self, max_events: int = 10_000) -> list[Envelope]:
        """The facts since the last poll, each once: the lifecycle events of this adapter's own
        calls, then what the feeds published (notices and advisories, rate cards, forecasts),
        oldest first.

        A feed that fails does not hold the others back: its error is kept in `feed_errors`
        (and logged), its position does not move, and the next poll reads it again. One element
        of a notice page that cannot be taken does not hold back the rest of the page: it comes
        out as a ``dead_lettered`` event (naming the feed, the element and what is wrong) and the
        cursor moves past it; a notice of a server spotcap did not launch (no workload) is
        skipped and counted in `notices_not_ours`.
        """
        if len(self._outbox) < max_events:
            self._read_feeds(max_events - len(self._outbox))
        count = min(max_events, len(self._outbox))
        return [self._outbox.popleft() for _ in range(count)]

    # -- beyond the seam ------------------------------------------------------------------------

    @property
    def pools(self) -> PoolMapping:
        return self._pools

    @property
    def position(self) -> FeedPosition:
        """How far the feeds have been read (persist it to resume without repeats)."""
        return self._facts.position

    @property
    def feed_errors(self) -> tuple[ProviderError, ...]:
        """The feeds that failed during the last `poll_events`, as their typed errors."""
        return self._feed_errors

    @property
    def notices_not_ours(self) -> int:
        """Feed notices skipped since this adapter started because they name no workload: the
        reclaims of servers in the project that spotcap did not launch."""
        return self._facts.not_ours

    def get(self, instance_id: str) -> Instance:
        """One server, ours or not, as a seam `Instance`."""
        return self._instance(self._nova.get(instance_id))

    def headroom(self, *, member_of: str | None = None) -> list[ProviderHeadroom]:
        """Placement headroom per resource provider (of the aggregate ``member_of``)."""
        return self._placement.providers(member_of=member_of)

    def leases(self) -> list[Lease]:
        """Blazar leases of the project."""
        return self._blazar.leases()

    def create_lease(self, request: LeaseRequest) -> Lease:
        """Reserve instances through Blazar (one ``reserve`` token)."""
        return self._blazar.create_lease(request)

    # -- inside ---------------------------------------------------------------------------------

    def _queue(
        self,
        payload: InstanceLaunched | InstanceDeleted,
        at_us: int,
        causation_id: str | None,
        correlation_id: str | None,
    ) -> None:
        # One launch and one delete per server ever: the server id names the fact.
        self._outbox.append(
            envelope(
                payload,
                event_id=instance_fact_id(self.region, payload.instance_id, payload.EVENT_TYPE),
                occurred_at=at_us,
                recorded_at=at_us,
                region=self.region,
                causation_id=causation_id,
                correlation_id=correlation_id,
            )
        )

    def _read_feeds(self, wanted: int) -> None:
        fresh: list[Envelope] = []
        errors: list[ProviderError] = []
        reads: list[tuple[str, Callable[[], None]]] = [
            ("notices", lambda: self._facts.notices(fresh, wanted)),
            ("rate cards", lambda: self._facts.rate_cards(fresh)),
            ("forward capacity", lambda: self._facts.forward_capacity(fresh)),
        ]
        try:
            for name, read in reads:
                try:
                    read()
                except ProviderError as exc:
                    log.warning("provider feed %s not read: %s", name, exc)
                    errors.append(exc)
        finally:  # whatever was read has moved the position: it must reach the outbox
            fresh.sort(key=lambda e: e.occurred_at)
            self._outbox.extend(fresh)
            self._noticed.update(e.key for e in fresh if e.event_type == "notice_received")
            self._feed_errors = tuple(errors)

    def _instance(self, server: Server, state: InstanceState | None = None) -> Instance:
        tags = server.tags
        pool_id = tags.get(spot_tags.POOL_TAG, "")
        pool = self._pools.pool(pool_id)
        model = tags.get(spot_tags.PURCHASE_MODEL_TAG)
        purchase_model: PurchaseModel
        if model is not None and _is_purchase_model(model):
            purchase_model = model
        elif pool is not None:
            purchase_model = pool.purchase_model
        else:  # untagged and unknown: never treat it as capacity that may be reclaimed
            purchase_model = "guaranteed"
        vcpu = server.vcpus or (pool.size_vcpu if pool is not None else 0)
        if state is None:
            if server.status in _GONE:
                state = "gone"
            elif server.server_id in self._noticed:
                state = "noticed"
            else:
                state = "active"
        return Instance(
            instance_id=server.server_id,
            pool_id=pool_id,
            workload_id=tags.get(spot_tags.WORKLOAD_TAG, ""),
            vcpu=vcpu,
            purchase_model=purchase_model,
            tags=dict(tags),
            launched_at=server.created_at_us or 0,
            state=state,
        )

    def _principal(self) -> str:
        """The identity the calls are made as: the application credential, else the user."""
        session = self._conn.session
        if isinstance(session.auth, BaseIdentityPlugin):  # authenticated by now: no request
            access = session.auth.get_access(session)
            if isinstance(access, AccessInfoV3) and access.application_credential_id:
                return f"appcred/{access.application_credential_id}"
            if access.user_id:
                return f"user/{access.user_id}"
        return f"orchestrator/{self._orchestrator_id}"


def _is_purchase_model(value: str) -> TypeGuard[PurchaseModel]:
    return value in _PURCHASE_MODELS
