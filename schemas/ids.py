"""Event ids: random for facts from outside, derived (UUIDv5) for events with a cause.

A derived id depends only on its cause and what was derived, so a replay of the same inputs
produces the same ids (DESIGN.md §3) and a consumer recognises a re-delivered derived event.
"""

from __future__ import annotations

import uuid
from hashlib import sha1

# The namespace of every spotcap-derived id (a fixed UUIDv5 of the project's name).
SPOTCAP_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "urn:spotcap:events")
_NAMESPACE = SPOTCAP_NAMESPACE.bytes


def new_event_id() -> str:
    """A fresh id for a fact observed from outside (a notice, a rate card, ...)."""
    return str(uuid.uuid4())


def derived_event_id(cause: str, event_type: str, discriminator: str = "") -> str:
    """The id of the `event_type` event derived from `cause` (an event id or a log position).

    `discriminator` separates several events of one type derived from the same cause
    (for example the pool of each allocation).
    """
    # uuid.uuid5, without building a UUID object (a decider run derives hundreds of
    # thousands): SHA-1 of namespace and name, version 5, RFC 4122 variant.
    digest = bytearray(sha1(_NAMESPACE + f"{cause}/{event_type}/{discriminator}".encode()).digest())
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    x = digest[:16].hex()
    return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:32]}"
