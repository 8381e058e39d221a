"""The OpenStack provider adapter (ADR-05): `provider.base.CapacityProvider` over Nova, Placement
and Blazar through openstacksdk, and the provider feeds the private cloud team builds to the
contract (see docs/providers.md).

The seam's types (`LaunchRequest`, `Instance`, `NotOwnedError`, ...) are `provider.base`'s; this
package adds only what is OpenStack's own: the pool mapping, the HTTP errors (each a
`provider.base.ProviderError`), Placement headroom, Blazar leases and the feed position.
"""

from provider.openstack.blazar import BlazarLeases, Lease, LeaseRequest, LeaseReservation
from provider.openstack.budget import Acquire, MutatingCall, unbounded
from provider.openstack.errors import (
    BadRequestError,
    ConflictError,
    FeedFormatError,
    ForbiddenError,
    InstanceNotFoundError,
    MappingMismatchError,
    NoCapacityError,
    NotFoundError,
    OpenStackCallError,
    OverLimitError,
    QuotaExceededError,
    ReclaimConflictError,
    ServiceError,
    UnauthorizedError,
    UnavailableError,
)
from provider.openstack.facts import NOTICE_FEED_TOPIC, PRODUCER, FeedPosition
from provider.openstack.feeds import FeedSnapshot, NoticePage, ProviderFeeds, UnreadNotice
from provider.openstack.mapping import PoolMapping, PoolMappingError
from provider.openstack.placement import PlacementHeadroom, ProviderHeadroom, ResourceHeadroom
from provider.openstack.provider import OpenStackProvider, wall_clock_us

__all__ = [
    "NOTICE_FEED_TOPIC",
    "PRODUCER",
    "Acquire",
    "BadRequestError",
    "BlazarLeases",
    "ConflictError",
    "FeedFormatError",
    "FeedPosition",
    "FeedSnapshot",
    "ForbiddenError",
    "InstanceNotFoundError",
    "Lease",
    "LeaseRequest",
    "LeaseReservation",
    "MappingMismatchError",
    "MutatingCall",
    "NoCapacityError",
    "NotFoundError",
    "NoticePage",
    "OpenStackCallError",
    "OpenStackProvider",
    "OverLimitError",
    "PlacementHeadroom",
    "PoolMapping",
    "PoolMappingError",
    "ProviderFeeds",
    "ProviderHeadroom",
    "QuotaExceededError",
    "ReclaimConflictError",
    "ResourceHeadroom",
    "ServiceError",
    "UnauthorizedError",
    "UnavailableError",
    "UnreadNotice",
    "unbounded",
    "wall_clock_us",
]
