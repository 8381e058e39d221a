"""The OpenStack provider: one object over Nova, Placement, Blazar and the provider feeds.

Built from an ``openstack.connection.Connection`` that the composition root makes (in
production from a one-hour, project-scoped application credential, ADR-29). Every mutating call
(launch, delete, reserve, reclaim) draws from the ``acquire`` hook first (ADR-12); every failure
is a typed error naming the call, its target and the HTTP status (``provider.openstack.errors``).
"""

from __future__ import annotations

from collections.abc import Mapping

from openstack.connection import Connection

from provider.openstack import tags as spot_tags
from provider.openstack.blazar import BlazarLeases, Lease, LeaseRequest
from provider.openstack.budget import Acquire, unbounded
from provider.openstack.compute import Instance, LaunchRequest, NovaInstances
from provider.openstack.errors import NotOwnedError, ProviderError
from provider.openstack.feeds import (
    MIN_NOTICE_S,
    FeedSnapshot,
    NoticePage,
    ProviderFeeds,
    ReclaimAccepted,
)
from provider.openstack.placement import PlacementHeadroom, ProviderHeadroom
from schemas.events import ForwardCapacity, RateCard


class NotReclaimableError(ProviderError):
    """Only reclaimable capacity can be reclaimed (the server's purchase-model tag says not)."""


class OpenStackProvider:
    """A region of the organisation's OpenStack cloud, as spotcap uses it."""

    def __init__(
        self,
        conn: Connection,
        *,
        owner_id: str,
        region: str,
        feed_endpoint: str,
        acquire: Acquire = unbounded,
        timeout_s: float = 30.0,
    ) -> None:
        self.region = region
        self.owner_id = owner_id
        self._nova = NovaInstances(conn, owner_id, acquire)
        self._placement = PlacementHeadroom(conn)
        self._blazar = BlazarLeases(conn, acquire, region_name=region, timeout_s=timeout_s)
        self._feeds = ProviderFeeds(conn.session, feed_endpoint, acquire, timeout_s=timeout_s)

    # -- instances (Nova) ----------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> Instance:
        return self._nova.launch(request)

    def get(self, instance_id: str) -> Instance:
        return self._nova.get(instance_id)

    def delete(self, instance_id: str) -> Instance:
        """Delete an instance of ours; NotOwnedError (nothing sent) for any other."""
        return self._nova.delete(instance_id)

    def list_by_tag(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        return self._nova.list_by_tag(tags)

    # -- headroom (Placement) ------------------------------------------------------------------

    def headroom(self, *, member_of: str | None = None) -> list[ProviderHeadroom]:
        return self._placement.providers(member_of=member_of)

    # -- reservations (Blazar) -----------------------------------------------------------------

    def leases(self) -> list[Lease]:
        return self._blazar.leases()

    def create_lease(self, request: LeaseRequest) -> Lease:
        return self._blazar.create_lease(request)

    # -- the private cloud team's feeds --------------------------------------------------------

    def rate_cards(self, pool_id: str | None = None) -> FeedSnapshot[RateCard]:
        return self._feeds.rate_cards(pool_id)

    def forward_capacity(self) -> FeedSnapshot[ForwardCapacity]:
        return self._feeds.forward_capacity()

    def notices(self, after: str | None = None, limit: int = 500) -> NoticePage:
        return self._feeds.notices(after, limit)

    def reclaim(
        self,
        instance_id: str,
        *,
        notice_s: int = MIN_NOTICE_S,
        advisory_lead_s: int | None = None,
        correlation_id: str | None = None,
    ) -> ReclaimAccepted:
        """Reclaim one of our reclaimable instances through the provider's path (ADR-33).

        Ownership and purchase model are read from Nova first; a server that is not ours, or not
        reclaimable, is refused with nothing sent to the reclaim API and no token drawn.
        """
        instance = self._nova.get(instance_id)
        if instance.owner_id != self.owner_id:
            raise NotOwnedError(instance_id, self.owner_id, instance.owner_id)
        model = instance.tags.get(spot_tags.PURCHASE_MODEL)
        if model != "reclaimable":
            raise NotReclaimableError(
                f"refusing to reclaim server {instance_id}: its purchase model is {model!r}"
            )
        return self._feeds.reclaim(
            instance_id,
            notice_s=notice_s,
            advisory_lead_s=advisory_lead_s,
            correlation_id=correlation_id,
        )
