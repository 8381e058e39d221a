"""The hook through which every mutating provider call draws from the actuator's budget (ADR-12).

The token budget is the actuator's, not the adapter's: one regional budget of mutating calls
(10 a second by default), a termination breaker and gradual recovery, judged in
`streams.deciders.actuator` for every provider and served to adapters by
`streams.actuation.BudgetHook`. The composition root passes that hook in as ``acquire``; this
module is only the adapter's side of the seam.

The adapter calls ``acquire(kind)`` once, immediately before it sends a mutating request. The
hook may block until a token is free, or raise to refuse the call (a breaker is open, or the
wait would be too long); either way the adapter sends nothing while ``acquire`` has not
returned. Reads draw nothing, and a call the adapter refuses before any request (a delete of a
server that is not ours) draws nothing either, so the hook never sees it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, TypeAlias

MutatingCall: TypeAlias = Literal["launch", "delete", "reserve", "reclaim"]
"""The kind of mutating call: ``launch``/``delete``/``reserve`` are the actuator's
(``schemas.events.ActuationCall``); ``reclaim`` is the exercise job's call (ADR-33), which the
budget counts as a delete."""

Acquire: TypeAlias = Callable[[MutatingCall], None]


def unbounded(kind: MutatingCall) -> None:
    """No budget: every call may proceed at once. For read-only tools and tests; a running
    orchestrator passes the actuator's `streams.actuation.BudgetHook` instead."""
