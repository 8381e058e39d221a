"""Interruption contracts (docs/contracts.md): the compiler, feasibility, signing and bundles.

What it owns: turning contract files into signed bundles and admission lists. The contract model
itself (units, tiers, the model, tier resolution) is data in `schemas.contracts`; this part adds
what acts on it. Modules, bottom up: `source` (YAML with line numbers), `feasibility` (rules
(a)-(e) over `PoolLike` pools), `diagnose` (errors with file, line, field and fix), `compiler`
(`compile_contracts`), `signing` (`FileSigner`, `TransitSigner`), `bundles` (sign and
`verify_bundle`), `published` and `output` (the admission lists and the bundle directory),
`pool_file` (the ``--pools`` file), `flags` (what ``compile``'s flags may not combine).

What it may import: `schemas`; pydantic, PyYAML, cryptography and hvac (OpenBao transit).
Who calls it: `spotcap contracts`, the agent (bundles), the archive (signing).
"""

from contracts.bundles import (
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
from contracts.compiler import CompiledContract, CompileResult, compile_contracts
from contracts.feasibility import FeasibilityEnv, PoolLike
from contracts.signing import (
    FileSigner,
    Signer,
    SigningError,
    TransitSigner,
    key_id_of,
    load_private_key,
    load_public_key,
)
from schemas.contracts.errors import ContractError, Finding
from schemas.contracts.model import Contract, ContractDocument
from schemas.contracts.resolve import resolve
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
