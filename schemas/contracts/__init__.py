"""The interruption contract as data (ADR-01, ADR-02): the model, the tiers, their resolution.

Modules, bottom up: `units` (durations, sizes, money, rates), `errors` (findings about a
field), `tiers` (the five tiers as data), `model` (the contract as written and resolved),
`resolve` (tier defaults). The compiler, the feasibility rules, signing and bundles are in the
top-level `contracts` part, which imports this one.
"""

from schemas.contracts.errors import ContractError, Finding
from schemas.contracts.model import Contract, ContractDocument
from schemas.contracts.resolve import resolve
from schemas.contracts.tiers import TIERS, TierDefaults

__all__ = [
    "TIERS",
    "Contract",
    "ContractDocument",
    "ContractError",
    "Finding",
    "TierDefaults",
    "resolve",
]
