"""Signed bundles: the drain-relevant part of a contract that every node holds (ADR-03, ADR-15).

A bundle carries only what the node agent needs to act on a notice without the control plane:
the workload, the contract version and the SHA-256 of its source file, the scheduler, the drain
budget, the checkpoint method and size, the restart semantics and the proactive-drain flag. It
has no expiry (ADR-15: bundles never expire) and no money (spend caps are the control plane's).

Format (``spotcap.bundle/v1``): the file is canonical JSON (keys sorted, no whitespace, ASCII)
of ``{"bundle": {...}, "signature": {"alg": "ed25519", "key_id": ..., "value": <base64>}}``.
The signature covers the canonical JSON of the ``bundle`` object alone, and its SHA-256 is the
``contract_sha256`` of the `ContractPublished` event. `verify_bundle` refuses anything but the
exact bytes that were written: a file that is not canonical, unsigned, signed by another key
(``key_id`` must be the verifying key's), with a signature that does not verify, or with a
signature encoded any other way than the canonical base64 of 64 bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any, Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contracts.signing import Signer, key_id_of
from schemas.contracts.model import Contract
from schemas.contracts.tiers import CheckpointMethod
from schemas.events import RestartSemantics, Scheduler

BUNDLE_FORMAT: Literal["spotcap.bundle/v1"] = "spotcap.bundle/v1"
SIGNATURE_ALG = "ed25519"
SIGNATURE_BYTES = 64


class BundleError(ValueError):
    """A bundle the node must not act on; the subclass says why."""

    def as_json(self) -> dict[str, Any]:
        """`spotcap contracts verify --json`'s refusal: the error's kind and the reason."""
        return {"ok": False, "error": type(self).__name__, "reason": str(self)}


class MalformedBundleError(BundleError):
    """Not a bundle: not canonical JSON, unknown fields, or an unknown format."""


class UnsignedBundleError(BundleError):
    """The bundle carries no signature."""


class WrongKeyError(BundleError):
    """The bundle was signed by another key than the one given to verify it."""


class TamperedBundleError(BundleError):
    """The signature does not match the bytes: something changed after signing."""


class Bundle(BaseModel):
    """The drain-relevant fields of one contract, as the node agent reads them."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    format: Literal["spotcap.bundle/v1"] = BUNDLE_FORMAT
    workload_id: str
    contract_version: int = Field(ge=1)
    source_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    scheduler: Scheduler
    drain_budget_s: int = Field(gt=0)
    checkpoint_method: CheckpointMethod
    checkpoint_size_bytes: int = Field(ge=0)
    restart_semantics: RestartSemantics
    proactive_drain_on_advisory: bool


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no whitespace, ASCII only: one byte string per value."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


def bundle_for(contract: Contract, source_sha256: str) -> Bundle:
    """The bundle of a resolved contract whose source file hashes to `source_sha256`."""
    return Bundle(
        workload_id=contract.workload,
        contract_version=contract.version,
        source_sha256=source_sha256,
        scheduler=contract.scheduler,
        drain_budget_s=contract.drain_budget_s,
        checkpoint_method=contract.checkpoint.method,
        checkpoint_size_bytes=contract.checkpoint.size_bytes,
        restart_semantics=contract.restart.semantics,
        proactive_drain_on_advisory=contract.proactive_drain_on_advisory,
    )


def signed_bytes(bundle: Bundle) -> bytes:
    """Exactly the bytes the signature covers."""
    return canonical_json(bundle.model_dump(mode="json"))


def bundle_sha256(bundle: Bundle) -> str:
    """Hex SHA-256 of the signed bytes; the event's ``contract_sha256``."""
    return hashlib.sha256(signed_bytes(bundle)).hexdigest()


def sign_bundle(bundle: Bundle, signer: Signer) -> bytes:
    """The bundle file, signed by `signer`."""
    signature = signer.sign(signed_bytes(bundle))
    return canonical_json(
        {
            "bundle": bundle.model_dump(mode="json"),
            "signature": {
                "alg": SIGNATURE_ALG,
                "key_id": signer.key_id,
                "value": base64.b64encode(signature).decode("ascii"),
            },
        }
    )


def unsigned_bundle(bundle: Bundle) -> bytes:
    """The bundle file without a signature (for review; every node refuses it)."""
    return canonical_json({"bundle": bundle.model_dump(mode="json")})


def _signature(value: Any) -> tuple[str, bytes]:
    if not isinstance(value, dict) or set(value) != {"alg", "key_id", "value"}:
        raise MalformedBundleError("the signature must hold exactly alg, key_id and value")
    if value["alg"] != SIGNATURE_ALG:
        raise MalformedBundleError(f"signature alg {value['alg']!r} is not {SIGNATURE_ALG!r}")
    encoded = value["value"]
    if not isinstance(encoded, str) or not isinstance(value["key_id"], str):
        raise MalformedBundleError("signature key_id and value must be strings")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as error:
        raise TamperedBundleError(f"the signature is not valid base64: {error}") from error
    # base64 leaves spare bits in the last character; only the canonical spelling is accepted.
    if len(raw) != SIGNATURE_BYTES or base64.b64encode(raw).decode("ascii") != encoded:
        raise TamperedBundleError(
            f"the signature is not the canonical base64 of {SIGNATURE_BYTES} bytes"
        )
    return value["key_id"], raw


def verify_bundle(data: bytes, public_key: Ed25519PublicKey) -> Bundle:
    """The bundle in `data` if `public_key` signed exactly these bytes; else a `BundleError`."""
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise MalformedBundleError(f"not a JSON bundle: {error}") from error
    if not isinstance(document, dict) or "bundle" not in document:
        raise MalformedBundleError("not a bundle: no 'bundle' object")
    if "signature" not in document:
        inner = document["bundle"]
        workload = inner.get("workload_id") if isinstance(inner, dict) else None
        raise UnsignedBundleError(
            f"the bundle of workload {workload!r} is not signed; nodes act only on signed "
            "bundles (compile with --key or --transit-key)"
        )
    if set(document) != {"bundle", "signature"}:
        extra = sorted(set(document) - {"bundle", "signature"})
        raise MalformedBundleError(f"unexpected top-level fields {extra}")
    try:
        canonical = canonical_json(document)
    except ValueError as error:
        raise MalformedBundleError(f"not canonical JSON: {error}") from error
    if canonical != data:
        raise MalformedBundleError(
            "the file is not the canonical JSON it was signed as (altered or re-formatted)"
        )
    key_id, signature = _signature(document["signature"])
    expected = key_id_of(public_key)
    if key_id != expected:
        raise WrongKeyError(f"the bundle is signed by key {key_id!r}, not by {expected!r}")
    try:
        public_key.verify(signature, canonical_json(document["bundle"]))
    except InvalidSignature as error:
        raise TamperedBundleError(
            "the signature does not match the bundle: it was changed after signing"
        ) from error
    try:
        return Bundle.model_validate(document["bundle"])
    except ValidationError as error:
        raise MalformedBundleError(f"signed, but not a {BUNDLE_FORMAT} bundle: {error}") from error
