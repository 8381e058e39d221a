"""What the provider and the fleet state disagree about (ADR-10, ADR-11): a pure comparison.

The provider's tags hold the fleet for truth, PostgreSQL for speed (ADR-11). `compare` takes
what the provider lists as the orchestrator's own (by owner tag), what the provider says of the
other instances the state knows, and the state's live instances, and returns one `Drift` per
instance they disagree about, with what the reconciler does about it:

* ``unknown_instance``: the provider runs it tagged as ours, the state does not know it as
  live: adopted (its ``instance_launched``, the id the adapter gives it);
* ``missing_instance``: the state has it live as ours, the provider does not list it: lost
  (an ``instance_lost`` without notice, which the replacement decider answers);
* ``owner_changed``: the state has it live as ours, the provider runs it tagged with another
  owner: left alone (never deleted: the provider refuses the delete of what is not ours).

An instance younger than `grace_us` (launched after ``now - grace``) is not judged: its launch
may still be on its way to the state, or its deletion to the provider's listing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from provider.base import OWNER_TAG, Instance

UNKNOWN = "unknown_instance"
MISSING = "missing_instance"
OWNER_CHANGED = "owner_changed"


@dataclass(frozen=True, slots=True)
class StateInstance:
    """A live instance as the fleet state holds it."""

    instance_id: str
    state: str
    workload_id: str | None
    pool_id: str | None
    vcpu: int
    purchase_model: str | None
    owner: str | None
    launched_at_us: int


@dataclass(frozen=True, slots=True)
class Drift:
    kind: str
    instance_id: str
    pool_id: str | None
    workload_id: str | None
    state_says: str
    provider_says: str
    action: str
    instance: Instance | None = None  # the provider's, when it lists it
    known: StateInstance | None = None  # the state's, when it has it

    def as_json(self) -> dict[str, Any]:
        """What `spotcap run reconciler --once --json` prints of it."""
        return {"kind": self.kind, "instance_id": self.instance_id, "state": self.state_says,
                "provider": self.provider_says, "action": self.action}  # fmt: skip

    def describe(self) -> str:
        """The drift in one line: its kind, the instance, what each side says, the action."""
        return (
            f"{self.kind} {self.instance_id}: state {self.state_says}; "
            f"provider {self.provider_says}; {self.action}"
        )


def compare(
    owned: Iterable[Instance],
    state: Mapping[str, StateInstance],
    others: Mapping[str, Instance | None],
    *,
    orchestrator_id: str,
    now_us: int,
    grace_us: int,
) -> list[Drift]:
    """The drifts, by instance id (see the module's doc). `owned`: the provider's instances
    tagged ``spotcap.io/owner = orchestrator_id``; `state`: the state's live instances;
    `others`: for each state instance not in `owned`, the provider's view of it (None: it does
    not list it at all)."""
    drifts: list[Drift] = []
    listed = {i.instance_id: i for i in owned}
    horizon = now_us - grace_us
    for instance_id, instance in listed.items():
        if instance_id in state or instance.launched_at > horizon:
            continue
        drifts.append(
            Drift(
                UNKNOWN,
                instance_id,
                instance.pool_id or None,
                instance.workload_id or None,
                "no live instance of that id",
                f"running, tagged {OWNER_TAG}={orchestrator_id}",
                "adopted: its instance_launched is written from the provider's tags",
                instance=instance,
            )
        )
    for instance_id, known in state.items():
        if instance_id in listed or known.launched_at_us > horizon:
            continue
        says = f"{known.state}, owner {known.owner or orchestrator_id}"
        other = others.get(instance_id)
        if other is None:
            drifts.append(
                Drift(
                    MISSING,
                    instance_id,
                    known.pool_id,
                    known.workload_id,
                    says,
                    "not listed",
                    "lost: an instance_lost without notice is written",
                    known=known,
                )
            )
            continue
        owner = other.tags.get(OWNER_TAG)
        drifts.append(
            Drift(
                OWNER_CHANGED,
                instance_id,
                known.pool_id,
                known.workload_id,
                says,
                f"running, tagged {OWNER_TAG}={owner}",
                "left alone: spotcap deletes only what is tagged as its own",
                instance=other,
                known=known,
            )
        )
    return sorted(drifts, key=lambda d: (d.instance_id, d.kind))
