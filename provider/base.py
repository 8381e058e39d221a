"""The capacity-provider seam (ADR-05): what spotcap needs from a private cloud, and nothing more.

The provider contract is five commitments. Four of them are *facts the provider publishes*;
in this event-sourced system they come out of the provider as `Envelope`s that the caller
writes to the log unchanged (`CapacityProvider.poll_events`):

| commitment | events (payload classes) |
|---|---|
| 1. hard notice >= 120 s before deletion | `NoticeReceived`, then `InstanceLost` (with_notice) |
| 2. advisory when it arrives | `Advisory` |
| 3. rate card per pool every 5 minutes | `RateCard` |
| 4. forward capacity and reservations | `ForwardCapacity`, `ReservationCommitted` |
| 5. reclaim API (for the daily exercise, ADR-33) | `CapacityProvider.reclaim` |

A provider that misses commitment 1 still reports the loss: `InstanceLost` with
``with_notice=False`` and no notice before it (the no-notice case the design is safe in).

The provider's own lifecycle facts come out the same way: `launch` yields `InstanceLaunched`,
`delete` yields `InstanceDeleted`. Each request carries the causation id (the decision or loss
that asked for it), so the cause chain survives the provider call.

Tags are the reconstruction key (ADR-11): every instance the orchestrator launches carries
``spotcap.io/owner = <orchestrator id>``, and `delete` refuses (`NotOwnedError`) anything that
does not, whoever asks. `list_by_tag` rebuilds the fleet from the provider alone. The actuator
also tags each launch with its decision (``spotcap.io/decision``) and its order
(``spotcap.io/call``): `list_by_tag` on the order finds what a call launched although the
answer was lost, so a call is carried out once (`instance_fact_id` names its fact).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from schemas.events import DeletionInitiator, Envelope, PurchaseModel
from schemas.ids import derived_event_id

OWNER_TAG = "spotcap.io/owner"
WORKLOAD_TAG = "spotcap.io/workload"
POOL_TAG = "spotcap.io/pool"
DECISION_TAG = "spotcap.io/decision"  # the decision an instance was launched for
CALL_TAG = "spotcap.io/call"  # the order (actuation_ordered) whose call launched it
# The node agent release a launch boots with (ADR-32: a new agent reaches only new launches).
AGENT_VERSION_TAG = "spotcap.io/agent-version"
MIN_NOTICE_S = 120

InstanceState = Literal["active", "noticed", "gone"]


def owned_tags(
    orchestrator_id: str, workload_id: str, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The tags of an instance the orchestrator launches for `workload_id`."""
    tags = {OWNER_TAG: orchestrator_id, WORKLOAD_TAG: workload_id}
    tags.update(extra or {})
    return tags


def instance_fact_id(region: str, instance_id: str, event_type: str) -> str:
    """The id of a lifecycle fact a provider call causes (``instance_launched``,
    ``instance_deleted``): one of each per instance ever, so whoever writes it (the adapter's
    answer, or the actuator finding the instance by its call tag after a crash) writes the
    same event."""
    return derived_event_id(f"{region}:instance/{instance_id}", event_type)


# -- requests and results ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """Launch one instance of `pool_id`'s size in that pool for `workload_id`."""

    pool_id: str
    workload_id: str
    tags: Mapping[str, str]
    causation_id: str | None = None
    correlation_id: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteRequest:
    """Delete an instance on purpose (not a reclaim)."""

    instance_id: str
    reason: str
    deleted_by: DeletionInitiator = "orchestrator"
    causation_id: str | None = None
    correlation_id: str | None = None


@dataclass(frozen=True, slots=True)
class ReclaimRequest:
    """Ask the provider to reclaim an instance through its own path (the exercise job, ADR-33).

    The provider gives the hard notice `notice_s` (>= 120) before deletion, preceded by an
    advisory `advisory_lead_s` before the notice when that is set.
    """

    instance_id: str
    notice_s: int = MIN_NOTICE_S
    advisory_lead_s: int | None = None
    correlation_id: str | None = None


@dataclass(frozen=True, slots=True)
class ReclaimScheduled:
    """What `reclaim` promised: the notice time and the deletion deadline."""

    instance_id: str
    notice_at: int
    deadline_at: int
    correlation_id: str | None


@dataclass(frozen=True, slots=True)
class Instance:
    """An instance as the provider lists it."""

    instance_id: str
    pool_id: str
    workload_id: str
    vcpu: int
    purchase_model: PurchaseModel
    tags: Mapping[str, str] = field(default_factory=dict)
    launched_at: int = 0
    state: InstanceState = "active"

    def owned_by(self, orchestrator_id: str) -> bool:
        return self.tags.get(OWNER_TAG) == orchestrator_id


# -- errors -----------------------------------------------------------------------------------


class ProviderError(RuntimeError):
    """The provider refused or failed a call; the message says which and why."""

    retryable: bool = False


class UnknownPoolError(ProviderError):
    """No such pool in the provider's region."""


class CapacityUnavailableError(ProviderError):
    """The pool has no room for another instance now (retry later or elsewhere)."""

    retryable = True


class UnknownInstanceError(ProviderError):
    """No live instance with that id."""


class NotOwnedError(ProviderError):
    """The instance is not tagged as the orchestrator's own; it is never deleted or reclaimed."""


class NotReclaimableError(ProviderError):
    """Only reclaimable capacity can be reclaimed."""


class AlreadyReclaimingError(ProviderError):
    """The instance is already on the reclaim path (advised or noticed)."""


class NoticeTooShortError(ProviderError):
    """A reclaim asked for less notice than the provider contract's 120 s."""


# -- the seam ---------------------------------------------------------------------------------


@runtime_checkable
class CapacityProvider(Protocol):
    """A region of a private cloud, held to the provider contract (ADR-05)."""

    @property
    def region(self) -> str: ...

    @property
    def orchestrator_id(self) -> str:
        """The identity whose instances this client may delete (the value of ``OWNER_TAG``)."""
        ...

    def now_us(self) -> int:
        """The provider's current time, microseconds since the epoch (sim time in the sim)."""
        ...

    def launch(self, request: LaunchRequest) -> Instance:
        """Launch one instance; `CapacityUnavailableError` when the pool has no room."""
        ...

    def delete(self, request: DeleteRequest) -> Instance:
        """Delete an owned instance; `NotOwnedError` (and nothing deleted) otherwise."""
        ...

    def list_by_tag(self, key: str, value: str) -> list[Instance]:
        """Live instances carrying tag `key` = `value`, ordered by instance id."""
        ...

    def get(self, instance_id: str) -> Instance:
        """One instance as the provider has it, ours or not (read-only: the reconciler asks
        about an instance the state knows and the owner listing lacks);
        `UnknownInstanceError` when it has no live instance of that id."""
        ...

    def reclaim(self, request: ReclaimRequest) -> ReclaimScheduled:
        """Reclaim an owned, reclaimable instance through the provider's own notice path."""
        ...

    def poll_events(self, max_events: int = 10_000) -> list[Envelope]:
        """The facts published since the last poll, oldest first, to be written to the log."""
        ...
