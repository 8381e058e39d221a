"""Nova: launch servers tagged as the orchestrator's own, list them by tag, delete only ours.

Tags are the reconstruction key of fleet state (ADR-11): every server carries the owner, pool,
workload and purchase model in its metadata, and the owner also as a Nova server tag so that a
list asks Nova for our servers only. Only servers whose metadata names this orchestrator as the
owner can be deleted (ADR-12, ADR-29); ownership is read from Nova right before the delete.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from openstack.compute.v2.server import Server
from openstack.connection import Connection

from provider.openstack import tags as spot_tags
from provider.openstack._calls import translated
from provider.openstack._time import iso_to_us
from provider.openstack.budget import Acquire, unbounded
from provider.openstack.errors import NotOwnedError
from schemas.events import PurchaseModel


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """One server to launch for a workload in a pool."""

    name: str
    pool_id: str
    workload_id: str
    flavor_id: str
    image_id: str
    network_ids: tuple[str, ...]
    purchase_model: PurchaseModel = "reclaimable"
    availability_zone: str | None = None
    """The hall's availability zone; None lets Nova choose."""
    tags: Mapping[str, str] = field(default_factory=dict)
    """Extra tags; the owner, pool, workload and purchase-model tags are always set."""


@dataclass(frozen=True, slots=True)
class Instance:
    """A Nova server as spotcap sees it."""

    instance_id: str
    name: str
    status: str
    """Nova's status: BUILD, ACTIVE, ERROR, SHUTOFF, DELETED, ..."""
    tags: Mapping[str, str]
    """The server's metadata, keys decoded (``spotcap.io/owner``)."""
    vcpus: int | None = None
    """From the embedded flavor (microversion 2.47+); None when Nova did not say."""
    availability_zone: str | None = None
    created_at_us: int | None = None

    @property
    def owner_id(self) -> str | None:
        return self.tags.get(spot_tags.OWNER)

    @property
    def pool_id(self) -> str | None:
        return self.tags.get(spot_tags.POOL)

    @property
    def workload_id(self) -> str | None:
        return self.tags.get(spot_tags.WORKLOAD)


class NovaInstances:
    """Launch, list and delete the orchestrator's servers through ``conn.compute``."""

    def __init__(self, conn: Connection, owner_id: str, acquire: Acquire = unbounded) -> None:
        self._conn = conn
        self._owner_id = owner_id
        self._owner_server_tag = spot_tags.owner_server_tag(owner_id)
        self._acquire = acquire

    def launch(self, request: LaunchRequest) -> Instance:
        """Create the server (Nova answers 202 at once; the server starts in BUILD)."""
        tags = {
            **request.tags,
            spot_tags.OWNER: self._owner_id,
            spot_tags.POOL: request.pool_id,
            spot_tags.WORKLOAD: request.workload_id,
            spot_tags.PURCHASE_MODEL: request.purchase_model,
        }
        attrs: dict[str, Any] = {
            "name": request.name,
            "flavor_id": request.flavor_id,
            "image_id": request.image_id,
            "networks": [{"uuid": net} for net in request.network_ids],
            "metadata": spot_tags.to_metadata(tags),
            "tags": [self._owner_server_tag],
        }
        if request.availability_zone is not None:
            attrs["availability_zone"] = request.availability_zone
        self._acquire("launch")
        with translated("nova.create_server", f"server {request.name} in pool {request.pool_id}"):
            server = self._conn.compute.create_server(**attrs)
        return Instance(
            instance_id=str(server.id),
            name=request.name,
            status=str(server.status or "BUILD"),
            tags=tags,
            availability_zone=request.availability_zone,
        )

    def get(self, instance_id: str) -> Instance:
        with translated("nova.get_server", f"server {instance_id}"):
            server = self._conn.compute.get_server(instance_id)
        return _instance(server)

    def delete(self, instance_id: str) -> Instance:
        """Delete the server if, and only if, Nova says it carries our owner tag.

        Returns the server as it was just before the delete (Nova deletes asynchronously).
        Raises NotOwnedError (sending no DELETE and drawing no token) otherwise, and
        NotFoundError if the server does not exist.
        """
        instance = self.get(instance_id)
        if instance.owner_id != self._owner_id:
            raise NotOwnedError(instance_id, self._owner_id, instance.owner_id)
        target = f"server {instance_id} in pool {instance.pool_id or '?'}"
        self._acquire("delete")
        with translated("nova.delete_server", target):
            self._conn.compute.delete_server(instance_id, ignore_missing=False)
        return instance

    def list_by_tag(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        """Our servers (owner tag) whose metadata carries every one of ``tags``.

        Nova filters on the owner server tag; the metadata is then checked here, including the
        owner, so a server whose server tag and metadata disagree is not taken for ours.
        """
        wanted = {**(tags or {}), spot_tags.OWNER: self._owner_id}
        with translated("nova.list_servers", f"servers tagged {self._owner_server_tag}"):
            servers = list(self._conn.compute.servers(details=True, tags=self._owner_server_tag))
        found = [_instance(s) for s in servers]
        return [i for i in found if all(i.tags.get(k) == v for k, v in wanted.items())]


def _instance(server: Server) -> Instance:
    flavor = server.flavor if isinstance(server.flavor, Mapping) else {}
    vcpus = flavor.get("vcpus")
    created = server.created_at
    return Instance(
        instance_id=str(server.id),
        name=str(server.name),
        status=str(server.status),
        tags=spot_tags.from_metadata(server.metadata or {}),
        vcpus=int(vcpus) if vcpus is not None else None,
        availability_zone=server.availability_zone or None,
        created_at_us=iso_to_us(created) if created else None,
    )
