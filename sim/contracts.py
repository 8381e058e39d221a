"""The simulated workloads' interruption contracts: written as their owners would write them,
and compiled by the real compiler (docs/contracts.md).

Each owner writes one file: mostly ``tier: tN`` and the few fields where the workload differs
from its tier (a Spark job on t2 names ``checkpoint.method: spark``, every resumable job its
checkpoint size), some ``tier: bespoke`` with every field written and a reviewer.
`compile_workload_contracts` runs `compile_contracts` on the files against the region's pools;
the simulation acts on the resolved `Contract`s and publishes the compiler's own
``contract_published`` events.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from contracts import CompileResult, FeasibilityEnv, PoolLike, compile_contracts
from contracts.feasibility import checkpoint_write_s
from schemas.contracts.tiers import TIERS, CheckpointMethod, TierDefaults, TierName
from schemas.events import RestartSemantics, Scheduler
from sim.approver import approver_key

MIB = 2**20
REVIEWER = "capacity-review@example.org"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FEASIBILITY = FeasibilityEnv()  # the compiler's defaults: what the owner sizes the drain for


@dataclass(frozen=True, slots=True)
class Behaviour:
    """What a workload does on a notice and after a loss: its kind's nature, whatever its tier."""

    checkpoint_method: CheckpointMethod
    checkpoint_size_bytes: int  # the final checkpoint of one instance; 0 if nothing is written
    periodic_interval_s: int | None
    restart_semantics: RestartSemantics
    effects_on_completion_only: bool | None  # None: the tier's
    drain_budget_s: int | None  # None: the tier's


@dataclass(frozen=True, slots=True)
class Owner:
    """Who writes the contract, and the fields every contract has."""

    workload_id: str
    team: str
    title: str  # what the workload is, for people
    scheduler: Scheduler
    target_vcpu: int


def drain_budget_s(size_bytes: int, at_least_s: int) -> int:
    """The drain budget an owner declares: `at_least_s`, or what writing the final checkpoint
    needs under rule (a), rounded up to 5 s."""
    needed_s = 5 * math.ceil(checkpoint_write_s(size_bytes, _FEASIBILITY) / 5)
    return min(max(at_least_s, needed_s), _FEASIBILITY.max_drain_budget_s)


def contract_yaml(
    rng: random.Random,
    owner: Owner,
    tier: TierName,
    behaviour: Behaviour,
    *,
    bespoke: bool,
    start_us: int,
) -> str:
    """The contract file `owner` writes for a workload that behaves as `behaviour` and picks
    `tier` (or writes a bespoke contract with `tier`'s values for what its behaviour leaves)."""
    defaults = TIERS[tier]
    document: dict[str, Any] = {
        "apiVersion": "spotcap/v1",
        "kind": "InterruptionContract",
        "workload": owner.workload_id,
        "version": rng.randint(1, 4),
        "owner": f"team-{owner.team}",
        "scheduler": owner.scheduler,
        "tier": "bespoke" if bespoke else tier,
        "target_vcpu": owner.target_vcpu,
        "description": f"{owner.title} of team {owner.team}",
    }
    cap_eur = _spend_cap_eur(rng, tier)
    if bespoke:
        document.update(_bespoke_fields(rng, owner, defaults, behaviour, cap_eur))
    else:
        document.update(_overrides(rng, owner, defaults, behaviour, cap_eur))
        if rng.random() < 0.25 and behaviour.checkpoint_method == "pytorch":
            days = rng.randint(10, 30)
            deadline = _EPOCH + timedelta(microseconds=start_us, days=days, hours=6)
            document["deadline"] = deadline.strftime("%Y-%m-%dT%H:%M:%SZ")
    header = f"# Interruption contract of {owner.workload_id} (format: docs/contracts.md)\n"
    return header + yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


def _overrides(
    rng: random.Random,
    owner: Owner,
    defaults: TierDefaults,
    behaviour: Behaviour,
    cap_eur: int,
) -> dict[str, Any]:
    """Only what differs from the tier: the tier's defaults hold for every field left out."""
    fields: dict[str, Any] = {}
    if behaviour.drain_budget_s not in (None, defaults.drain_budget_s):
        fields["drain_budget_s"] = behaviour.drain_budget_s
    checkpoint: dict[str, Any] = {}
    method = behaviour.checkpoint_method
    if method != defaults.checkpoint_method:
        checkpoint["method"] = method
    if behaviour.checkpoint_size_bytes:
        checkpoint["size_bytes"] = _size_text(behaviour.checkpoint_size_bytes)
    # The resolver gives no periodic interval to a workload whose method is none.
    inherited_s = None if method == "none" else defaults.periodic_interval_s
    if behaviour.periodic_interval_s != inherited_s:
        checkpoint["periodic_interval_s"] = _duration_text(behaviour.periodic_interval_s)
    if checkpoint:
        fields["checkpoint"] = checkpoint
    restart: dict[str, Any] = {}
    if behaviour.restart_semantics != defaults.restart_semantics:
        restart["semantics"] = behaviour.restart_semantics
    effects = behaviour.effects_on_completion_only
    if effects is not None and effects != defaults.effects_on_completion_only:
        restart["effects_on_completion_only"] = effects
    if restart:
        fields["restart"] = restart
    if rng.random() < 0.15:  # a team that wants calmer pools than its tier's
        fields["tolerated_interruptions_per_h"] = (
            "0.015/h" if defaults.tier == "t1" else rng.choice(("0.03/h", "0.04/h", "1/day"))
        )
    if defaults.floor_percent == 0 and owner.scheduler == "slurm" and rng.random() < 0.2:
        fields["floor_vcpu"] = 64  # a few nodes kept for the interactive queue
    if cap_eur:
        fields["fallback"] = _fallback(owner, cap_eur)
    return fields


def _bespoke_fields(
    rng: random.Random,
    owner: Owner,
    defaults: TierDefaults,
    behaviour: Behaviour,
    cap_eur: int,
) -> dict[str, Any]:
    """Every field written, as ``tier: bespoke`` requires (ADR-02), and who reviewed it."""
    checkpoint: dict[str, Any] = {"method": behaviour.checkpoint_method}
    if behaviour.checkpoint_size_bytes:
        checkpoint["size_bytes"] = _size_text(behaviour.checkpoint_size_bytes)
    checkpoint["periodic_interval_s"] = _duration_text(behaviour.periodic_interval_s)
    effects = behaviour.effects_on_completion_only
    rate = defaults.tolerated_interruptions_per_h
    return {
        "reviewed_by": REVIEWER,
        "drain_budget_s": _duration_text(behaviour.drain_budget_s or defaults.drain_budget_s),
        "checkpoint": checkpoint,
        "restart": {
            "semantics": behaviour.restart_semantics,
            "effects_on_completion_only": defaults.effects_on_completion_only
            if effects is None
            else effects,
        },
        "tolerated_interruptions_per_h": f"{rate if rate < 0.05 else rng.choice((0.05, 0.08))}/h",
        "floor_vcpu": defaults.floor_vcpu(owner.target_vcpu),
        "priority": defaults.priority,
        "fallback": _fallback(owner, cap_eur),
        "proactive_drain_on_advisory": defaults.proactive_drain_on_advisory,
    }


# tier: (share of workloads that declare a fallback spend cap, the cap in EUR a day)
_SPEND_CAPS: Mapping[str, tuple[float, int]] = {
    "t1": (1.0, 70),
    "t2": (0.8, 35),
    "t3": (0.3, 15),
    "t4": (0.2, 4),
    "t5": (0.0, 0),
}


def _spend_cap_eur(rng: random.Random, tier: TierName) -> int:
    share, cap_eur = _SPEND_CAPS[tier]
    return cap_eur if rng.random() < share else 0


def _fallback(owner: Owner, cap_eur: int) -> dict[str, Any]:
    fallback: dict[str, Any] = {"spend_cap_per_day_eur_micros": f"EUR {cap_eur}.00"}
    if cap_eur:
        fallback["approver"] = f"oncall-{owner.team}@example.org"
        fallback["approver_key"] = approver_key(fallback["approver"])
    return fallback


def _size_text(size_bytes: int) -> str:
    mib, rest = divmod(size_bytes, MIB)
    if rest:
        return str(size_bytes)
    if mib >= 1024 and mib % 256 == 0:  # quarters of a GiB are exact decimals: 1.25 GiB
        return f"{mib / 1024:g} GiB"
    return f"{mib} MiB"


def _duration_text(seconds: int | None) -> str | None:
    if seconds is None:
        return None  # an explicit "no periodic checkpoint"
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


# -- compiling --------------------------------------------------------------------------------


def repository_commit(files: Mapping[Path, str]) -> str:
    """A stand-in for the contract repository's commit: the SHA-1 of every path and text."""
    digest = hashlib.sha1(usedforsecurity=False)
    for path in sorted(files):
        digest.update(f"{path.as_posix()}\0{files[path]}\0".encode())
    return digest.hexdigest()


def compile_workload_contracts(
    files: Mapping[Path, str], pools: Sequence[PoolLike], *, published_at_us: int, region: str
) -> CompileResult:
    """The compiler's verdict on the owners' files against the region's pools (all five rules)."""
    return compile_contracts(
        files,
        FeasibilityEnv(pools=pools),
        published_at_us=published_at_us,
        region=region,
        source_commit=repository_commit(files),
    )
