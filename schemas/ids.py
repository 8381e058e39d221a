"""Event ids: random for facts from outside, derived (UUIDv5) for events with a cause.

A derived id depends only on its cause and what was derived, so a replay of the same inputs
produces the same ids (DESIGN.md §3) and a consumer recognises a re-delivered derived event.
"""

from __future__ import annotations

import uuid

# The namespace of every spotcap-derived id (a fixed UUIDv5 of the project's name).
SPOTCAP_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "urn:spotcap:events")


def new_event_id() -> str:
    """A fresh id for a fact observed from outside (a notice, a rate card, ...)."""
    return str(uuid.uuid4())


def derived_event_id(cause: str, event_type: str, discriminator: str = "") -> str:
    """The id of the `event_type` event derived from `cause` (an event id or a log position).

    `discriminator` separates several events of one type derived from the same cause
    (for example the pool of each allocation).
    """
    return str(uuid.uuid5(SPOTCAP_NAMESPACE, f"{cause}/{event_type}/{discriminator}"))
