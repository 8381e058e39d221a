"""Interruption contracts (ADR-01..04): the model, the tiers, the compiler and signed bundles.

Modules, bottom up: `units` (durations, sizes, money, rates), `source` (YAML with line
numbers), `tiers` (the five tiers as data), `model` (the contract as written and resolved),
`resolve` (tier defaults), `feasibility` (rules (a)-(e) over `PoolLike` pools), `diagnose`
(errors with file, line, field and fix), `compiler` (`compile_contracts`), `signing`
(`FileSigner`, `TransitSigner`), `bundles` (sign and `verify_bundle`), `published` and
`output` (the admission lists and the bundle directory), `pool_file` (the ``--pools`` file).
"""

from schemas.contracts.bundles import (
    Bundle,
    BundleError,
    MalformedBundleError,
    TamperedBundleError,
    UnsignedBundleError,
    WrongKeyError,
    bundle_for,
    bundle_sha256,
    sign_bundle,
    verify_bundle,
)
from schemas.contracts.compiler import CompiledContract, CompileResult, compile_contracts
from schemas.contracts.errors import ContractError, Finding
from schemas.contracts.feasibility import FeasibilityEnv, PoolLike
from schemas.contracts.model import Contract, ContractDocument
from schemas.contracts.resolve import resolve
from schemas.contracts.signing import (
    FileSigner,
    Signer,
    SigningError,
    TransitSigner,
    key_id_of,
    load_private_key,
    load_public_key,
)
from schemas.contracts.tiers import TIERS, TierDefaults

__all__ = [
    "TIERS",
    "Bundle",
    "BundleError",
    "CompileResult",
    "CompiledContract",
    "Contract",
    "ContractDocument",
    "ContractError",
    "FeasibilityEnv",
    "FileSigner",
    "Finding",
    "MalformedBundleError",
    "PoolLike",
    "Signer",
    "SigningError",
    "TamperedBundleError",
    "TierDefaults",
    "TransitSigner",
    "UnsignedBundleError",
    "WrongKeyError",
    "bundle_for",
    "bundle_sha256",
    "compile_contracts",
    "key_id_of",
    "load_private_key",
    "load_public_key",
    "resolve",
    "sign_bundle",
    "verify_bundle",
]
