"""spotcap's tags on Nova servers: the reconstruction key of fleet state (ADR-11).

spotcap names its tags ``spotcap.io/owner``, ``spotcap.io/pool``, ``spotcap.io/workload`` (the
seam's ``OWNER_TAG``, ``POOL_TAG``, ``WORKLOAD_TAG``) and ``spotcap.io/purchase-model``. Nova
refuses a ``/`` in a metadata key (its schema allows ``^[a-zA-Z0-9-_:. ]{1,255}$``), so on the
wire the ``/`` becomes ``:``: ``spotcap.io:owner``.
The owner tag is also written as a Nova server tag (``spotcap.io:owner=<owner>``, microversion
2.52+), because Nova can filter a server list by tag but not by metadata.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from provider.base import OWNER_TAG, POOL_TAG, WORKLOAD_TAG

PURCHASE_MODEL_TAG = "spotcap.io/purchase-model"
"""The purchase model of the server's pool, so that a reclaim can be refused from Nova alone."""

__all__ = [
    "OWNER_TAG",
    "POOL_TAG",
    "PURCHASE_MODEL_TAG",
    "WORKLOAD_TAG",
    "from_metadata",
    "owner_server_tag",
    "to_metadata",
]

_PREFIX = "spotcap.io/"
_WIRE_PREFIX = "spotcap.io:"
_NOVA_METADATA_KEY = re.compile(r"^[a-zA-Z0-9\-_:. ]{1,255}$")
_NOVA_METADATA_VALUE_MAX = 255
_NOVA_TAG_MAX = 60


def to_metadata(tags: Mapping[str, str]) -> dict[str, str]:
    """spotcap tags as Nova server metadata (``/`` in a key becomes ``:``).

    Raises ValueError for a key or value Nova would refuse, naming it.
    """
    metadata: dict[str, str] = {}
    for key, value in tags.items():
        if ":" in key:
            raise ValueError(f"tag key {key!r}: ':' is reserved for the '/' of spotcap tag keys")
        wire = key.replace("/", ":")
        if not _NOVA_METADATA_KEY.match(wire):
            raise ValueError(f"tag key {key!r} is not a valid Nova metadata key once encoded")
        if len(value) > _NOVA_METADATA_VALUE_MAX:
            raise ValueError(f"tag {key!r}: value longer than {_NOVA_METADATA_VALUE_MAX} chars")
        metadata[wire] = value
    return metadata


def from_metadata(metadata: Mapping[str, str]) -> dict[str, str]:
    """Nova server metadata back as tags (``spotcap.io:x`` becomes ``spotcap.io/x``)."""
    return {
        (_PREFIX + key[len(_WIRE_PREFIX) :] if key.startswith(_WIRE_PREFIX) else key): str(value)
        for key, value in metadata.items()
    }


def owner_server_tag(owner_id: str) -> str:
    """The Nova server tag that marks a server as ``owner_id``'s (used to filter lists)."""
    tag = f"{_WIRE_PREFIX}owner={owner_id}"
    if not owner_id or "," in owner_id or "/" in owner_id or len(tag) > _NOVA_TAG_MAX:
        raise ValueError(
            f"owner id {owner_id!r} cannot be a Nova server tag: it must be non-empty, have no "
            f"',' or '/', and be at most {_NOVA_TAG_MAX - len(tag) + len(owner_id)} characters"
        )
    return tag
