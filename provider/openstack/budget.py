"""The hook through which every mutating provider call draws from a token budget (ADR-12).

The adapter calls ``acquire(kind)`` once, immediately before it sends a mutating request. The
actuator's implementation may block until a token is free, or raise to refuse the call; either
way the adapter sends nothing while ``acquire`` has not returned. Reads draw nothing, and a call
refused before any request (a delete of a server that is not ours) draws nothing either.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, TypeAlias

MutatingCall: TypeAlias = Literal["launch", "delete", "reserve", "reclaim"]
"""The kind of mutating call: ``launch``/``delete``/``reserve`` are the actuator's
(``schemas.events.ActuationCall``); ``reclaim`` is the exercise job's call (ADR-33)."""

Acquire: TypeAlias = Callable[[MutatingCall], None]


def unbounded(kind: MutatingCall) -> None:
    """The default budget: every call may proceed at once."""
