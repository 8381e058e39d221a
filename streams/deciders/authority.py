"""Two signatures where authority is spent (ADR-30): the deciders' check of a published contract
that raises a floor or a spending cap, or changes the fallback policy.

The compiler refuses such a change without the owner's and a higher authority's signatures; but
a ``contract_published`` event on the log is what the deciders act on, whoever wrote it. So the
workload deciders check it again, from the event alone: given the keys they trust
(`ChangeTrust`, from the same keyring the compiler reads), a version whose authority
(`schemas.contracts.change.Authority`) is above the one in force takes effect only when the
event carries valid Ed25519 signatures of its change statement by the contract's owner and by
a higher authority other than the owner. Otherwise the workload keeps the terms in force and
the fallback arbiter says so (``contract_refused``). Lowering needs no signature.

Which keys are trusted is itself an input (``keyring_trusted``): the region's sequencer records
the keyring it was started with in the deciders' journal, at its start and whenever the keyring
changes (`trust_event`), and the region view folds it (`RegionView.trust`); the workload
deciders use the keys of the view. So a replay of the journal decides with the keys the run
trusted at each point, with no keyring given (`trust_of`).

Pure: no I/O, no clock; `cryptography` only to verify.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from schemas.contracts.change import Authority, authority_changes, change_statement
from schemas.events import ContractPublished, Envelope, KeyringTrusted
from schemas.frozen import FrozenMap
from schemas.ids import derived_event_id

TRUST_PRODUCER = "deciders/keyring"
"""The producer of a recorded keyring (a deciders' record: never an input from outside)."""


@dataclass(frozen=True, slots=True)
class ChangeTrust:
    """The keys the deciders trust for changes of authority: name -> base64 of the 32 raw bytes
    of an Ed25519 public key (what ``spotcap contracts keygen --json`` prints)."""

    owners: Mapping[str, str] = field(default_factory=FrozenMap)
    authorities: Mapping[str, str] = field(default_factory=FrozenMap)

    def __post_init__(self) -> None:  # hashable, like the settings that hold it
        object.__setattr__(self, "owners", FrozenMap(self.owners))
        object.__setattr__(self, "authorities", FrozenMap(self.authorities))


def trust_digest(trust: ChangeTrust | None) -> str:
    """Hex SHA-256 of the keys' canonical JSON: which keyring (None: the empty one)."""
    owners = dict(trust.owners) if trust is not None else {}
    authorities = dict(trust.authorities) if trust is not None else {}
    canonical = json.dumps({"authorities": authorities, "owners": owners}, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def trust_event(trust: ChangeTrust | None, region: str, at_us: int, after: str) -> Envelope:
    """The record that `trust` (None: no keyring) is in force from here on, at event time
    `at_us`; its id is derived from the keyring and `after` (where in the order it was put:
    the runtime's position or the next input's id), so a record made again is the same."""
    digest = trust_digest(trust)
    payload = KeyringTrusted(
        keyring_sha256=digest,
        owners=dict(trust.owners) if trust is not None else {},
        authorities=dict(trust.authorities) if trust is not None else {},
    )
    event_id = derived_event_id(f"keyring/{region}/{after}", "keyring_trusted", digest)
    return Envelope(
        event_id, "keyring_trusted", at_us, at_us, region, region, None, None, TRUST_PRODUCER,
        payload,
    )  # fmt: skip


def trust_of(p: KeyringTrusted) -> ChangeTrust | None:
    """The keys a ``keyring_trusted`` record puts in force (None: no keyring)."""
    if not p.owners and not p.authorities:
        return None
    return ChangeTrust(owners=p.owners, authorities=p.authorities)


def authority_of(p: ContractPublished) -> Authority:
    return Authority(p.floor_vcpu, p.spend_cap_eur_micros, p.approver, p.approver_key)


def _verifies(key_b64: str, signature_b64: str, statement: bytes) -> bool:
    try:
        key = Ed25519PublicKey.from_public_bytes(base64.b64decode(key_b64, validate=True))
        key.verify(base64.b64decode(signature_b64, validate=True), statement)
    except (InvalidSignature, binascii.Error, ValueError):
        return False
    return True


def refusal(trust: ChangeTrust, in_force: Authority | None, p: ContractPublished) -> str | None:
    """Why `p` does not take effect (None: it changes no authority, or it carries both
    signatures). `in_force` is the authority of the version in force (None: a new workload)."""
    found = authority_changes(in_force, authority_of(p))
    if not found:
        return None
    statement = change_statement(
        p.workload_id, p.contract_version, p.source_sha256 or "", authority_of(p)
    )
    signatures = p.signatures or {}
    owner_key = trust.owners.get(p.owner)
    owner_ok = (
        owner_key is not None
        and p.owner in signatures
        and _verifies(owner_key, signatures[p.owner], statement)
    )
    authority_ok = any(
        name != p.owner and name in signatures and _verifies(key, signatures[name], statement)
        for name, key in trust.authorities.items()
    )
    if owner_ok and authority_ok:
        return None
    missing = [
        *([] if owner_ok else [f"the owner {p.owner}'s"]),
        *([] if authority_ok else ["a higher authority's"]),
    ]
    described = "; ".join(what for _, what in found)
    return (
        f"version {p.contract_version} {described}: that needs two signatures, the owner's and "
        f"a higher authority's, and {' and '.join(missing)} is missing or does not verify; "
        "the version in force stays (have both sign the file: spotcap contracts sign, and "
        "compile again)"
    )


__all__ = [
    "TRUST_PRODUCER",
    "ChangeTrust",
    "authority_of",
    "refusal",
    "trust_digest",
    "trust_event",
    "trust_of",
]
