"""The ``contract_published`` event of an accepted contract, built from one table.

`FIELDS` says where every field of `ContractPublished` comes from: a dotted path into the
`Publication` (the resolved `Contract` and what the compiler adds: the bundle's and the file's
hashes, the file's path, the commit) or, where the event's field is not a plain copy, a function
of it. `tests/test_contract_event.py` checks that the table names every field of the event once
and every field of the contract once (or says why it is not published), so a field added to
either side cannot be forgotten on the other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, TypeAlias

from schemas.contracts.model import Contract
from schemas.events import ContractPublished


@dataclass(frozen=True, slots=True)
class Publication:
    """What one accepted contract publishes: the contract and what the compiler adds."""

    contract: Contract
    contract_sha256: str
    """Hex SHA-256 of the signed bundle the nodes verify."""
    source_path: str
    source_sha256: str
    source_commit: str | None
    signatures: Mapping[str, str] = field(default_factory=dict)
    """Signer -> signature of this version's change statement (ADR-30), from the file's
    ``.signatures.json``: the deciders check them again."""


Source: TypeAlias = str | Callable[[Publication], Any]
"""A dotted attribute path into the `Publication`, or a function of it."""


def _approver(p: Publication) -> str:
    return p.contract.fallback.approver or ""  # the schema's approver is required: "" is none


FIELDS: tuple[tuple[str, Source], ...] = (
    ("workload_id", "contract.workload"),
    ("contract_version", "contract.version"),
    ("contract_sha256", "contract_sha256"),
    ("owner", "contract.owner"),
    ("tier", "contract.tier"),
    ("drain_budget_s", "contract.drain_budget_s"),
    ("restart_semantics", "contract.restart.semantics"),
    ("checkpoint_on_notice", "contract.checkpoint_on_notice"),
    ("proactive_drain_on_advisory", "contract.proactive_drain_on_advisory"),
    ("tolerated_interruptions_per_h", "contract.tolerated_interruptions_per_h"),
    ("target_vcpu", "contract.target_vcpu"),
    ("floor_vcpu", "contract.floor_vcpu"),
    ("spend_cap_eur_micros", "contract.fallback.spend_cap_per_day_eur_micros"),
    ("approver", _approver),
    ("priority", "contract.priority"),
    ("checkpoint_interval_s", "contract.checkpoint.periodic_interval_s"),
    ("deadline_at", "contract.deadline_at_us"),
    ("source_commit", "source_commit"),
    ("scheduler", "contract.scheduler"),
    ("checkpoint_method", "contract.checkpoint.method"),
    ("checkpoint_size_bytes", "contract.checkpoint.size_bytes"),
    ("effects_on_completion_only", "contract.restart.effects_on_completion_only"),
    ("source_path", "source_path"),
    ("source_sha256", "source_sha256"),
    ("approver_key", "contract.fallback.approver_key"),
    ("signatures", "signatures"),
)
"""(field of ``ContractPublished``, where its value comes from), in the event's field order."""

NOT_PUBLISHED: dict[str, str] = {
    "reviewed_by": "who approved a bespoke contract, for people: in the contract file, whose "
    "hash the event carries (source_sha256)",
    "description": "free text for people: in the contract file, like reviewed_by",
}
"""Fields of the `Contract` the event does not carry, and why."""


def value_of(publication: Publication, source: Source) -> Any:
    """The value `source` names in `publication`."""
    if isinstance(source, str):
        return attrgetter(source)(publication)
    return source(publication)


def contract_published(publication: Publication) -> ContractPublished:
    """The payload of the ``contract_published`` event of `publication`."""
    return ContractPublished(**{name: value_of(publication, src) for name, src in FIELDS})


__all__ = ["FIELDS", "NOT_PUBLISHED", "Publication", "contract_published", "value_of"]
