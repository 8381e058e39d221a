"""A second, higher authority (ADR-30): a contract change that raises a floor or a spending cap,
or changes the fallback policy (its approver or approver key), is accepted only with two
signatures: the owner's and a higher authority's.

What is signed (`schemas.contracts.change.change_statement`) is the canonical JSON of the
workload, the contract version, the SHA-256 of the contract file as written and the authority
that version holds, so a signature covers exactly one version of one file. The deciders check
the same signatures again on the ``contract_published`` event, which carries them
(``streams.deciders.authority``). The signatures sit beside the file, in
``<file>.signatures.json``:

    {"signatures": [{"signer": "team-data", "value": "<base64 Ed25519 signature>"},
                    {"signer": "capacity-board", "value": "..."}]}

Whose keys count is the keyring (``spotcap.keyring/v1``, YAML): ``owners`` maps each owner
(the contract's ``owner``) to its public key, ``authorities`` each higher authority to its
own; keys are base64 of the 32 raw bytes (what ``spotcap contracts keygen --json`` prints). An
authority signs in its own name and cannot be the owner. Pure: bytes in, findings out.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from contracts.signing import Signer
from schemas.contracts.change import Authority, authority_changes, change_statement
from schemas.contracts.errors import Finding
from schemas.contracts.model import Contract

KEYRING_FORMAT = "spotcap.keyring/v1"
SIGNATURES_SUFFIX = ".signatures.json"
RULE = "two-signatures"


class KeyringError(ValueError):
    """The keyring cannot be used; says where and why."""


def keyring_keys(data: bytes, source: str = "keyring") -> tuple[dict[str, str], dict[str, str]]:
    """(owners, authorities) of a keyring's YAML, each name -> base64 of its key, every key
    checked (`load_keyring`): what the deciders trust for changes of authority."""
    load_keyring(data, source)
    raw = yaml.safe_load(data)
    return tuple(  # type: ignore[return-value]
        {str(k): str(v) for k, v in (raw.get(name) or {}).items()}
        for name in ("owners", "authorities")
    )


@dataclass(frozen=True, slots=True)
class Keyring:
    owners: Mapping[str, Ed25519PublicKey] = field(default_factory=dict)
    authorities: Mapping[str, Ed25519PublicKey] = field(default_factory=dict)


def _key(raw: Any, where: str) -> Ed25519PublicKey:
    try:
        data = base64.b64decode(str(raw), validate=True)
        return Ed25519PublicKey.from_public_bytes(data)
    except (binascii.Error, ValueError) as error:
        raise KeyringError(f"{where}: not the base64 of a 32-byte Ed25519 public key") from error


def load_keyring(data: bytes, source: str = "keyring") -> Keyring:
    """A keyring from its YAML (see the module's doc)."""
    try:
        raw = yaml.safe_load(data)
    except yaml.YAMLError as error:
        raise KeyringError(f"{source}: not YAML: {error}") from error
    if not isinstance(raw, dict) or raw.get("format") != KEYRING_FORMAT:
        raise KeyringError(f"{source}: format must be {KEYRING_FORMAT}")
    tables: dict[str, dict[str, Ed25519PublicKey]] = {}
    for name in ("owners", "authorities"):
        table = raw.get(name) or {}
        if not isinstance(table, dict):
            raise KeyringError(f"{source}: {name} maps names to keys")
        tables[name] = {str(k): _key(v, f"{source}: {name}.{k}") for k, v in table.items()}
    return Keyring(tables["owners"], tables["authorities"])


Published = Authority
"""What the last published version of a workload's contract held of its authority."""


def authority_of(contract: Contract) -> Authority:
    f = contract.fallback
    return Authority(
        contract.floor_vcpu, f.spend_cap_per_day_eur_micros, f.approver, f.approver_key
    )


@dataclass(frozen=True, slots=True)
class ChangeControl:
    """What the compiler needs to hold changes of authority to two signatures."""

    keyring: Keyring
    previous: Mapping[str, Published]
    """Workload -> what its last published contract held; a workload not here is new."""
    signatures: Mapping[Path, bytes] = field(default_factory=dict)
    """Contract file -> the bytes of its ``.signatures.json`` (if it has one)."""


def statement_of(contract: Contract, source_sha256: str) -> bytes:
    """What the owner and a higher authority sign for this version of `contract`."""
    return change_statement(
        contract.workload, contract.version, source_sha256, authority_of(contract)
    )


def sign_change(
    signer: Signer, name: str, contract: Contract, source_sha256: str
) -> dict[str, str]:
    """One entry of a ``.signatures.json``: `name` signs this version of the contract."""
    statement = statement_of(contract, source_sha256)
    return {"signer": name, "value": base64.b64encode(signer.sign(statement)).decode()}


def changes(previous: Published | None, current: Contract) -> list[tuple[tuple[str, ...], str]]:
    """The changes of authority from `previous` (None: a new workload) to `current`: (where,
    what), each needing two signatures."""
    return authority_changes(previous, authority_of(current))


def signature_entries(raw: bytes | None) -> list[Any]:
    """The entries of a ``.signatures.json`` (none when it is absent or unreadable)."""
    if raw is None:
        return []
    try:
        document = json.loads(raw)
    except ValueError:
        return []
    entries = document.get("signatures", []) if isinstance(document, dict) else []
    return entries if isinstance(entries, list) else []


def published_signatures(raw: bytes | None) -> dict[str, str]:
    """signer -> signature of a ``.signatures.json``, as the ``contract_published`` event
    carries them for the deciders to check again."""
    return {
        str(e["signer"]): e["value"]
        for e in signature_entries(raw)
        if isinstance(e, dict) and isinstance(e.get("value"), str) and "signer" in e
    }


def _verified(entries: Sequence[Any], keys: Mapping[str, Ed25519PublicKey],
              statement: bytes) -> set[str]:  # fmt: skip
    names = set()
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        name, value = str(entry.get("signer")), entry.get("value")
        key = keys.get(name)
        if key is None or not isinstance(value, str):
            continue
        try:
            key.verify(base64.b64decode(value, validate=True), statement)
        except (InvalidSignature, binascii.Error, ValueError):
            continue
        names.add(name)
    return names


def check_change(
    control: ChangeControl, path: Path, contract: Contract, source_sha256: str
) -> Finding | None:
    """A finding when `contract` changes authority without the owner's and a higher
    authority's valid signatures of this very file."""
    found = changes(control.previous.get(contract.workload), contract)
    if not found:
        return None
    where = found[0][0]
    described = "; ".join(w for _, w in found)
    sig_file = path.name + SIGNATURES_SUFFIX
    entries = signature_entries(control.signatures.get(path))
    statement = statement_of(contract, source_sha256)
    owner_key = control.keyring.owners.get(contract.owner)
    owners = {contract.owner: owner_key} if owner_key is not None else {}
    owner_ok = contract.owner in _verified(entries, owners, statement)
    higher = {n: k for n, k in control.keyring.authorities.items() if n != contract.owner}
    authority_ok = bool(_verified(entries, higher, statement))
    if owner_ok and authority_ok:
        return None
    missing = [
        *([] if owner_ok else [f"the owner {contract.owner}'s"]),
        *([] if authority_ok else ["a higher authority's"]),
    ]
    no_keys = not control.keyring.owners and not control.keyring.authorities
    return Finding(
        RULE,
        where,
        f"this change {described}: it needs two signatures, the owner's and a higher "
        f"authority's; {' and '.join(missing)} is missing or does not verify"
        + (" (no keyring was given, so no key can verify one)" if no_keys else ""),
        f"have the owner and a capacity authority sign version {contract.version} of this "
        f"file into {sig_file} (spotcap contracts sign)"
        + (" and compile with --keyring FILE" if no_keys else "")
        + ", or keep the floor, cap and approver as published",
    )


# -- at the edge: files -----------------------------------------------------------------------


def previous_of(published: bytes) -> dict[str, Published]:
    """What a ``published-contracts.json`` says each workload's authority was (entries written
    before it recorded authority are left out: their next change counts as new)."""
    document = json.loads(published)
    previous = {}
    for entry in document.get("contracts", []):
        if "floor_vcpu" in entry:
            previous[str(entry["workload_id"])] = Published(
                int(entry["floor_vcpu"]), int(entry["spend_cap_eur_micros"]),
                entry.get("approver"), entry.get("approver_key"),
            )  # fmt: skip
    return previous


def load_change_control(
    files: Mapping[Path, bytes], published: Path, keyring: Path | None
) -> ChangeControl | None:
    """The change control of a compile: the last publication (`published`, if it exists), the
    keyring (if given) and each contract file's signatures. None on a first compile with no
    keyring (nothing published yet to change; the bootstrap)."""
    if keyring is None and not published.exists():
        return None
    try:
        ring = load_keyring(keyring.read_bytes(), str(keyring)) if keyring else Keyring()
        previous = previous_of(published.read_bytes()) if published.exists() else {}
    except (OSError, ValueError) as error:
        raise KeyringError(f"cannot read the change control's inputs: {error}") from error
    signatures = {}
    for path in files:
        sig = path.with_name(path.name + SIGNATURES_SUFFIX)
        if sig.exists():
            signatures[path] = sig.read_bytes()
    return ChangeControl(ring, previous, signatures)


def sign_contract_file(path: Path, signer: Signer, name: str) -> Path:
    """Add `name`'s signature of this version of the contract file at `path` to its
    ``.signatures.json``; the signatures file."""
    from contracts.compiler import contract_of

    data = path.read_bytes()
    contract, source_sha256 = contract_of(path, data)
    entry = sign_change(signer, name, contract, source_sha256)
    sig = path.with_name(path.name + SIGNATURES_SUFFIX)
    entries = json.loads(sig.read_bytes()).get("signatures", []) if sig.exists() else []
    entries = [e for e in entries if e.get("signer") != name] + [entry]
    sig.write_text(json.dumps({"signatures": entries}, indent=2, sort_keys=True) + "\n")
    return sig
