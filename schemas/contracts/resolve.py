"""Resolving a contract as written against its tier's defaults (ADR-02).

A field the author wrote wins; a field left out takes the tier's default. ``tier: bespoke`` has
no defaults, so every field must be written (``periodic_interval_s: null`` is an explicit "no
periodic checkpoint"). `resolve` returns a consistent `Contract` or raises `ContractFindingsError`
naming every missing or conflicting field.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from schemas.contracts.errors import ContractFindingsError, Finding, KeyPath, dotted
from schemas.contracts.model import (
    Checkpoint,
    Contract,
    ContractDocument,
    FallbackAuthority,
    Restart,
)
from schemas.contracts.tiers import TIERS, TierDefaults

_MISSING = object()
# Fields where an explicit null means something ("no periodic checkpoint").
_NULLABLE: frozenset[KeyPath] = frozenset({("checkpoint", "periodic_interval_s")})

# Example values shown in the fix of a missing field.
_EXAMPLES: dict[KeyPath, str] = {
    ("drain_budget_s",): "90s",
    ("checkpoint", "method"): "none | application | spark | pytorch | slurm-requeue",
    ("checkpoint", "size_bytes"): "2 GiB",
    ("checkpoint", "periodic_interval_s"): "60m (or null for none)",
    ("restart", "semantics"): "resume | requeue | restart",
    ("restart", "effects_on_completion_only"): "true",
    ("tolerated_interruptions_per_h",): "0.05",
    ("floor_vcpu",): "0",
    ("priority",): "2",
    ("fallback", "spend_cap_per_day_eur_micros"): '"EUR 20.00"',
    ("proactive_drain_on_advisory",): "false",
}


class _Resolver:
    def __init__(self, document: ContractDocument) -> None:
        self.document = document
        self.tier: TierDefaults | None = TIERS.get(document.tier)
        self.findings: list[Finding] = []

    def take(self, path: KeyPath, default: Any, why: str = "", fix: str = "") -> Any:
        """The written value at `path`, else `default`, else a finding saying `why`."""
        node: BaseModel | None = self.document
        for part in path[:-1]:
            node = getattr(node, str(part)) if node is not None else None
        if node is not None and path[-1] in node.model_fields_set:
            value = getattr(node, str(path[-1]))
            if value is not None or path in _NULLABLE:
                return value
            self.findings.append(
                Finding(
                    "schema",
                    path,
                    "is empty (null)",
                    f"write a value, e.g. {dotted(path)}: {_EXAMPLES.get(path, '...')}, or "
                    "leave the field out to take the tier default",
                )
            )
            return None
        if default is not _MISSING:
            return default
        example = _EXAMPLES.get(path, "...")
        self.findings.append(
            Finding(
                "tier",
                path,
                why or "is required: tier bespoke has no defaults, every field is declared",
                fix or f"add {dotted(path)}: {example}, or pick a tier t1..t5 whose defaults fit",
            )
        )
        return None

    def default(self, name: str) -> Any:
        return getattr(self.tier, name) if self.tier is not None else _MISSING


def resolve(document: ContractDocument) -> Contract:
    """The resolved contract of `document`; raises `ContractFindingsError` if it cannot be built."""
    r = _Resolver(document)
    method = r.take(("checkpoint", "method"), r.default("checkpoint_method"))
    writes_nothing = method in (None, "none", "slurm-requeue")
    size_bytes = r.take(
        ("checkpoint", "size_bytes"),
        0 if writes_nothing else _MISSING,
        why=f"is required: checkpoint.method is {method}, and the size of the final checkpoint "
        "decides whether it fits the drain budget",
        fix="add checkpoint.size_bytes: <the largest final checkpoint of one instance, e.g. 2 GiB>",
    )
    floor_default = r.tier.floor_vcpu(document.target_vcpu) if r.tier is not None else _MISSING
    fields = {
        "drain_budget_s": r.take(("drain_budget_s",), r.default("drain_budget_s")),
        # A workload that overrides the method to none inherits no periodic interval.
        "periodic_interval_s": r.take(
            ("checkpoint", "periodic_interval_s"),
            None if method == "none" and r.tier is not None else r.default("periodic_interval_s"),
        ),
        "semantics": r.take(("restart", "semantics"), r.default("restart_semantics")),
        "effects": r.take(
            ("restart", "effects_on_completion_only"), r.default("effects_on_completion_only")
        ),
        "rate": r.take(
            ("tolerated_interruptions_per_h",), r.default("tolerated_interruptions_per_h")
        ),
        "floor_vcpu": r.take(("floor_vcpu",), floor_default),
        "priority": r.take(("priority",), r.default("priority")),
        "cap": r.take(
            ("fallback", "spend_cap_per_day_eur_micros"),
            r.default("spend_cap_per_day_eur_micros"),
        ),
        "proactive": r.take(
            ("proactive_drain_on_advisory",), r.default("proactive_drain_on_advisory")
        ),
    }
    if r.findings:
        raise ContractFindingsError(r.findings)
    approver = document.fallback.approver if document.fallback is not None else None
    approver_key = document.fallback.approver_key if document.fallback is not None else None
    try:
        return Contract(
            workload=document.workload,
            version=document.version,
            owner=document.owner,
            scheduler=document.scheduler,
            tier=document.tier,
            target_vcpu=document.target_vcpu,
            drain_budget_s=fields["drain_budget_s"],
            checkpoint=Checkpoint(
                method=method,
                size_bytes=size_bytes,
                periodic_interval_s=fields["periodic_interval_s"],
            ),
            restart=Restart(
                semantics=fields["semantics"], effects_on_completion_only=fields["effects"]
            ),
            tolerated_interruptions_per_h=fields["rate"],
            floor_vcpu=fields["floor_vcpu"],
            deadline=document.deadline,
            priority=fields["priority"],
            fallback=FallbackAuthority(
                spend_cap_per_day_eur_micros=fields["cap"],
                approver=approver,
                approver_key=approver_key,
            ),
            proactive_drain_on_advisory=fields["proactive"],
            reviewed_by=document.reviewed_by,
            description=document.description,
        )
    except ValidationError as error:
        for detail in error.errors():
            problems = detail.get("ctx", {}).get("error")
            if isinstance(problems, ContractFindingsError):
                raise problems from None
        raise
