"""The OpenStack provider adapter (ADR-05): Nova, Placement and Blazar through openstacksdk, and
the provider feeds the private cloud team builds to the contract (see docs/providers.md)."""

from provider.openstack.blazar import BlazarLeases, Lease, LeaseRequest, LeaseReservation
from provider.openstack.budget import Acquire, MutatingCall, unbounded
from provider.openstack.compute import Instance, LaunchRequest, NovaInstances
from provider.openstack.errors import (
    BadRequestError,
    ConflictError,
    FeedFormatError,
    ForbiddenError,
    NotFoundError,
    NotOwnedError,
    OpenStackCallError,
    OverLimitError,
    ProviderError,
    ServiceError,
    UnauthorizedError,
    UnavailableError,
)
from provider.openstack.feeds import FeedSnapshot, NoticePage, ProviderFeeds, ReclaimAccepted
from provider.openstack.placement import PlacementHeadroom, ProviderHeadroom, ResourceHeadroom
from provider.openstack.provider import NotReclaimableError, OpenStackProvider

__all__ = [
    "Acquire",
    "BadRequestError",
    "BlazarLeases",
    "ConflictError",
    "FeedFormatError",
    "FeedSnapshot",
    "ForbiddenError",
    "Instance",
    "LaunchRequest",
    "Lease",
    "LeaseRequest",
    "LeaseReservation",
    "MutatingCall",
    "NotFoundError",
    "NotOwnedError",
    "NotReclaimableError",
    "NoticePage",
    "NovaInstances",
    "OpenStackCallError",
    "OpenStackProvider",
    "OverLimitError",
    "PlacementHeadroom",
    "ProviderError",
    "ProviderFeeds",
    "ProviderHeadroom",
    "ReclaimAccepted",
    "ResourceHeadroom",
    "ServiceError",
    "UnauthorizedError",
    "UnavailableError",
    "unbounded",
]
