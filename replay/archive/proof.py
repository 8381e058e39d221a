"""Inclusion proofs: one archived event, checked against the month's signed tree head without
the rest of the month (RFC 9162 audit paths).

A proof carries the event's id and bytes, its index in the month's tree, the audit path, and
the month's manifest with its signature, so that `check_proof` needs nothing but the proof and
the public key.
"""

from __future__ import annotations

import base64
import binascii
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from contracts.signing import key_id_of
from projections.eventtime import iso
from replay.archive import layout
from replay.archive.merkle import inclusion_proof, leaf_hash, verify_inclusion
from replay.archive.storage import ArchiveError, ArchiveStorage
from schemas.codec import Codec
from schemas.errors import CodecError


def prove(storage: ArchiveStorage, region: str, month: str, event_id: str) -> dict[str, Any]:
    """The inclusion proof of `event_id` in `month` of `region`."""
    with tempfile.TemporaryDirectory(prefix="spotcap-prove-") as tmp:
        path = storage.fetch(layout.key(region, month, layout.EVENTS), Path(tmp) / layout.EVENTS)
        table = pq.read_table(path, columns=["event_id", "avro"])
    manifest = storage.read(layout.key(region, month, layout.MANIFEST))
    signature = storage.read(layout.key(region, month, layout.SIGNATURE))
    matches = pc.indices_nonzero(pc.equal(table.column("event_id"), event_id)).to_pylist()
    if not matches:
        raise ArchiveError(
            f"event {event_id} is not in the archive of {month} (region {region}); events are "
            "archived by the month they occurred in"
        )
    index = int(matches[0])
    ids = table.column("event_id").to_pylist()
    blobs = table.column("avro").to_pylist()
    leaves = [leaf_hash(layout.leaf_data(i, b)) for i, b in zip(ids, blobs, strict=True)]
    return {
        "format": layout.PROOF_FORMAT,
        "region": region,
        "month": month,
        "event_id": event_id,
        "event_bytes": base64.b64encode(blobs[index]).decode(),
        "leaf_index": index,
        "tree_size": len(leaves),
        "audit_path": [h.hex() for h in inclusion_proof(index, leaves)],
        "manifest": manifest.decode(),
        "manifest_signature": base64.b64encode(signature).decode(),
    }


@dataclass(frozen=True, slots=True)
class ProofCheck:
    ok: bool
    message: str
    event: dict[str, Any]


def check_proof(proof: dict[str, Any], public_key: Ed25519PublicKey) -> ProofCheck:
    """Does the proof show its event in a tree head signed by `public_key`?"""
    try:
        manifest_bytes = str(proof["manifest"]).encode()
        signature = base64.b64decode(proof["manifest_signature"], validate=True)
        event_bytes = base64.b64decode(proof["event_bytes"], validate=True)
        event_id = str(proof["event_id"])
        index, size = int(proof["leaf_index"]), int(proof["tree_size"])
        path = [bytes.fromhex(h) for h in proof["audit_path"]]
        manifest = json.loads(manifest_bytes)
        root = bytes.fromhex(manifest["merkle"]["root"])
        signed_size = int(manifest["merkle"]["size"])
        leaf = leaf_hash(layout.leaf_data(event_id, event_bytes))
    except (KeyError, TypeError, ValueError, binascii.Error) as error:
        return ProofCheck(
            False, f"the proof is not a complete {layout.PROOF_FORMAT} ({error!r})", {}
        )
    event = _describe(event_bytes, event_id)
    given = key_id_of(public_key)
    try:
        public_key.verify(signature, manifest_bytes)
    except InvalidSignature:
        named = manifest.get("signing", {}).get("key_id")
        return ProofCheck(
            False,
            f"the month's manifest is not signed by the public key given "
            f"({given}; it names {named})",
            event,
        )
    if size != signed_size:
        return ProofCheck(
            False,
            f"the proof is for a tree of {size:,} events, the signed tree head has {signed_size:,}",
            event,
        )
    if not verify_inclusion(leaf, index, size, path, root):
        return ProofCheck(
            False,
            f"event {event_id} with these bytes is not entry {index:,} of "
            f"the signed tree of {manifest.get('month')}: the event or the path "
            "was changed",
            event,
        )
    return ProofCheck(
        True,
        f"event {event_id} is entry {index:,} of {size:,} in the archive of "
        f"{manifest.get('month')} (region {manifest.get('region')}), whose tree head "
        f"{root.hex()[:16]}... is signed by {given}",
        event,
    )


def _describe(event_bytes: bytes, event_id: str) -> dict[str, Any]:
    """What the bytes say, decoded with the schemas this build knows (for people)."""
    try:
        e = Codec().decode(event_bytes)
    except CodecError as error:
        return {"decoded": False, "reason": str(error)}
    return {
        "decoded": True,
        "event_type": e.event_type,
        "occurred_at": iso(e.occurred_at),
        "key": e.key,
        "matches_id": e.event_id == event_id,
    }
