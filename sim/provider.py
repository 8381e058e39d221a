"""The simulated region's provider: instances, launch/delete/list, and the reclaim path.

`SimProvider` implements `provider.base.CapacityProvider` at sim time. The reclaim path is
the one the provider contract specifies: an optional advisory, then a hard notice at least
120 s before the deadline, then the loss at the deadline. Reclaims asked for through the API
(the exercise job, ADR-33) and reclaims the guaranteed tenants' demand causes
(`sim.reclaimer`) take the same path; only the latter can skip the notice (the
no-notice case).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace

from provider.base import (
    MIN_NOTICE_S,
    OWNER_TAG,
    AlreadyReclaimingError,
    CapacityUnavailableError,
    DeleteRequest,
    Instance,
    InstanceState,
    LaunchRequest,
    NoticeTooShortError,
    NotOwnedError,
    NotReclaimableError,
    ReclaimRequest,
    ReclaimScheduled,
    UnknownInstanceError,
    UnknownPoolError,
)
from schemas.events import (
    Advisory,
    Envelope,
    InstanceDeleted,
    InstanceLaunched,
    InstanceLost,
    NoticeReceived,
)
from schemas.pools import Pool, PoolCatalogue
from sim.bus import EventBus
from sim.clock import SECOND_US, Scheduler

PROVIDER = "sim/provider"
AGENT = "sim/agent"


@dataclass(slots=True)
class _Live:
    """A live instance and where it is on the reclaim path."""

    instance: Instance
    pool: Pool
    launch_event_id: str
    state: InstanceState = "active"
    advised: bool = False
    notice_event_id: str | None = None


class SimProvider:
    """A region of simulated private cloud, driven by a `Scheduler`."""

    def __init__(
        self,
        catalogue: PoolCatalogue,
        bus: EventBus,
        clock: Scheduler,
        orchestrator_id: str,
        id_rng: random.Random,
    ) -> None:
        self.catalogue = catalogue
        self._bus = bus
        self._clock = clock
        self._orchestrator_id = orchestrator_id
        self._ids = id_rng
        self._live: dict[str, _Live] = {}
        self._by_pool: dict[str, dict[str, _Live]] = {p.pool_id: {} for p in catalogue}
        self._used_vcpu: dict[str, int] = {p.pool_id: 0 for p in catalogue}
        self._pressed_halls: set[str] = set()

    # -- the seam ---------------------------------------------------------------------------

    @property
    def region(self) -> str:
        return self._bus.region

    @property
    def orchestrator_id(self) -> str:
        return self._orchestrator_id

    def now_us(self) -> int:
        return self._clock.now_us

    def launch(self, request: LaunchRequest) -> Instance:
        if request.pool_id not in self.catalogue:
            raise UnknownPoolError(f"no pool {request.pool_id!r} in region {self.region}")
        pool = self.catalogue.get(request.pool_id)
        if self.room_vcpu(pool.pool_id) < pool.size_vcpu:
            raise CapacityUnavailableError(
                f"pool {pool.pool_id} has no room for a {pool.size_vcpu}-vCPU instance"
            )
        instance = Instance(
            instance_id=str(uuid.UUID(int=self._ids.getrandbits(128), version=4)),
            pool_id=pool.pool_id,
            workload_id=request.workload_id,
            vcpu=pool.size_vcpu,
            purchase_model=pool.purchase_model,
            tags=dict(request.tags),
            launched_at=self._clock.now_us,
        )
        envelope = self._bus.emit(
            InstanceLaunched(
                instance_id=instance.instance_id,
                pool_id=pool.pool_id,
                workload_id=request.workload_id,
                vcpu=pool.size_vcpu,
                purchase_model=pool.purchase_model,
                tags=dict(sorted(request.tags.items())),
            ),
            PROVIDER,
            causation_id=request.causation_id,
            correlation_id=request.correlation_id,
            discriminator=instance.instance_id,
        )
        live = _Live(instance, pool, envelope.event_id)
        self._live[instance.instance_id] = live
        self._by_pool[pool.pool_id][instance.instance_id] = live
        self._used_vcpu[pool.pool_id] += pool.size_vcpu
        return instance

    def delete(self, request: DeleteRequest) -> Instance:
        live = self._owned(request.instance_id, "delete")
        return self._delete(live, request, f"appcred/{self._orchestrator_id}")

    def list_by_tag(self, key: str, value: str) -> list[Instance]:
        found = [self._view(v) for v in self._live.values() if v.instance.tags.get(key) == value]
        return sorted(found, key=lambda i: i.instance_id)

    def get(self, instance_id: str) -> Instance:
        live = self._live.get(instance_id)
        if live is None:
            raise UnknownInstanceError(f"no live instance {instance_id} in region {self.region}")
        return self._view(live)

    def reclaim(self, request: ReclaimRequest) -> ReclaimScheduled:
        return self._schedule_reclaim(self._owned(request.instance_id, "reclaim"), request)

    def poll_events(self, max_events: int = 10_000) -> list[Envelope]:
        return self._bus.drain(max_events)

    # -- the cloud's own calls (sim.cloud: any instance of the project, whoever tagged it) -----

    def remove(self, request: DeleteRequest, principal: str) -> Instance:
        """Delete a live instance whoever owns it: the cloud API's delete, which knows projects,
        not orchestrators (`UnknownInstanceError` if it is not live)."""
        return self._delete(self._live_instance(request.instance_id), request, principal)

    def schedule_reclaim(self, request: ReclaimRequest) -> ReclaimScheduled:
        """`reclaim` without the owner check: the provider's reclaim API, which the project's
        exercise job calls (the owner check is the caller's, ADR-33)."""
        return self._schedule_reclaim(self._live_instance(request.instance_id), request)

    def retag(self, instance_id: str, tags: Mapping[str, str]) -> Instance:
        """Replace a live instance's tags (the cloud's metadata API): who owns it, which claim
        it serves, and so what may be deleted, follow the new tags."""
        live = self._live_instance(instance_id)
        live.instance = replace(live.instance, tags=dict(tags))
        return self._view(live)

    def _schedule_reclaim(self, live: _Live, request: ReclaimRequest) -> ReclaimScheduled:
        if live.pool.purchase_model != "reclaimable":
            raise NotReclaimableError(
                f"instance {request.instance_id} is {live.pool.purchase_model} capacity "
                f"(pool {live.pool.pool_id}); only reclaimable capacity can be reclaimed"
            )
        if request.notice_s < MIN_NOTICE_S:
            raise NoticeTooShortError(
                f"a notice of {request.notice_s} s breaks the provider contract "
                f"(>= {MIN_NOTICE_S} s)"
            )
        if live.state != "active" or live.advised:
            raise AlreadyReclaimingError(
                f"instance {request.instance_id} is already being reclaimed"
            )
        lead_s = request.advisory_lead_s or 0
        notice_at = self._clock.now_us + lead_s * SECOND_US
        self.start_reclaim(
            request.instance_id, request.notice_s, lead_s or None, request.correlation_id
        )
        return ReclaimScheduled(
            request.instance_id,
            notice_at,
            notice_at + request.notice_s * SECOND_US,
            request.correlation_id,
        )

    # -- what the rest of the simulation sees -----------------------------------------------

    def room_vcpu(self, pool_id: str) -> int:
        """vCPU the pool can still lend now (0 in a hall whose tenants want their headroom)."""
        pool = self.catalogue.get(pool_id)
        if pool.purchase_model == "reclaimable" and pool.hall in self._pressed_halls:
            return 0
        return pool.capacity_vcpu - self._used_vcpu[pool_id]

    def used_vcpu(self, pool_id: str) -> int:
        return self._used_vcpu[pool_id]

    def set_hall_pressure(self, hall: str, pressed: bool) -> None:
        """While pressed, the hall's reclaimable pools lend nothing new."""
        if pressed:
            self._pressed_halls.add(hall)
        else:
            self._pressed_halls.discard(hall)

    def hall_pressed(self, hall: str) -> bool:
        return hall in self._pressed_halls

    def reclaimable_ids(self, pool_id: str) -> list[str]:
        """Instances of the pool not yet on the reclaim path, in launch order."""
        return [
            i for i, v in self._by_pool[pool_id].items() if v.state == "active" and not v.advised
        ]

    def is_live(self, instance_id: str) -> bool:
        return instance_id in self._live

    def start_reclaim(
        self,
        instance_id: str,
        notice_s: int,
        advisory_lead_s: int | None = None,
        correlation_id: str | None = None,
        with_notice: bool = True,
    ) -> None:
        """Put a live instance on the reclaim path now (any owner: this is the provider)."""
        live = self._live.get(instance_id)
        if live is None or live.state != "active" or live.advised:
            return
        if not with_notice:
            self._lose(live, correlation_id)
            return
        if advisory_lead_s:
            live.advised = True
            lead_us = advisory_lead_s * SECOND_US
            self._bus.emit(
                Advisory(
                    instance_id=instance_id,
                    pool_id=live.pool.pool_id,
                    expected_reclaim_at=self._clock.now_us + lead_us + notice_s * SECOND_US,
                ),
                PROVIDER,
                correlation_id=correlation_id,
            )
            self._clock.after(lead_us, lambda: self._notice(live, notice_s, correlation_id))
        else:
            self._notice(live, notice_s, correlation_id)

    # -- the reclaim path -------------------------------------------------------------------

    def _notice(self, live: _Live, notice_s: int, correlation_id: str | None) -> None:
        if self._live.get(live.instance.instance_id) is not live or live.state != "active":
            return  # deleted (or lost) since the advisory
        live.state = "noticed"
        notice = self._bus.emit(
            NoticeReceived(
                instance_id=live.instance.instance_id,
                pool_id=live.pool.pool_id,
                workload_id=live.instance.workload_id,
                deadline_at=self._clock.now_us + notice_s * SECOND_US,
                source="nats",
            ),
            AGENT,
            correlation_id=correlation_id,
        )
        live.notice_event_id = notice.event_id
        self._clock.after(notice_s * SECOND_US, lambda: self._deadline(live, correlation_id))

    def _deadline(self, live: _Live, correlation_id: str | None) -> None:
        if self._live.get(live.instance.instance_id) is live:
            self._lose(live, correlation_id)

    def _lose(self, live: _Live, correlation_id: str | None) -> None:
        self._remove(live)
        notice_id = live.notice_event_id
        self._bus.emit(
            InstanceLost(
                instance_id=live.instance.instance_id,
                pool_id=live.pool.pool_id,
                workload_id=live.instance.workload_id,
                vcpu=live.instance.vcpu,
                purchase_model=live.pool.purchase_model,
                with_notice=notice_id is not None,
                reason="reclaimed",
                notice_event_id=notice_id,
            ),
            PROVIDER,
            causation_id=notice_id,
            correlation_id=correlation_id,
        )

    # -- bookkeeping ------------------------------------------------------------------------

    def _delete(self, live: _Live, request: DeleteRequest, principal: str) -> Instance:
        self._remove(live)
        self._bus.emit(
            InstanceDeleted(
                instance_id=live.instance.instance_id,
                pool_id=live.pool.pool_id,
                workload_id=live.instance.workload_id,
                deleted_by=request.deleted_by,
                principal=principal,
                reason=request.reason,
            ),
            PROVIDER,
            causation_id=request.causation_id,
            correlation_id=request.correlation_id,
            discriminator=request.instance_id,
        )
        return self._view(live, "gone")

    def _live_instance(self, instance_id: str) -> _Live:
        live = self._live.get(instance_id)
        if live is None:
            raise UnknownInstanceError(f"no live instance {instance_id} in region {self.region}")
        return live

    def _owned(self, instance_id: str, action: str) -> _Live:
        live = self._live_instance(instance_id)
        if not live.instance.owned_by(self._orchestrator_id):
            owner = live.instance.tags.get(OWNER_TAG, "nobody")
            raise NotOwnedError(
                f"instance {instance_id} is tagged as owned by {owner!r}, not by "
                f"{self._orchestrator_id!r}: refusing to {action} it"
            )
        return live

    def _remove(self, live: _Live) -> None:
        instance_id = live.instance.instance_id
        del self._live[instance_id]
        del self._by_pool[live.pool.pool_id][instance_id]
        self._used_vcpu[live.pool.pool_id] -= live.instance.vcpu
        live.state = "gone"

    @staticmethod
    def _view(live: _Live, state: InstanceState | None = None) -> Instance:
        i = live.instance
        return Instance(
            i.instance_id,
            i.pool_id,
            i.workload_id,
            i.vcpu,
            i.purchase_model,
            dict(i.tags),
            i.launched_at,
            state or live.state,
        )
