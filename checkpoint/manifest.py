"""The manifest: what one generation holds, written after all its parts (ADR-18).

A generation is visible only through its manifest, and the manifest is written last, so a
reader never sees half a generation: parts without a manifest are an interrupted save, which
nobody restores and pruning removes. The manifest names the workload, the unit, the
generation and the step, when it was written, and each part's name, key, plaintext and stored
sizes and the SHA-256 of its stored bytes; it carries the wrapped data key and an HMAC-SHA256
over all of it under a key derived from the data key, so a manifest altered by anyone who
cannot unwrap that key (the platform included) is refused.

Format ``spotcap.checkpoint/v1``: canonical JSON (sorted keys, no whitespace).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "FORMAT",
    "Manifest",
    "ManifestError",
    "PartEntry",
    "check_name",
    "manifest_mac",
    "sign_manifest",
]

FORMAT = "spotcap.checkpoint/v1"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class ManifestError(ValueError):
    """A manifest that cannot be trusted or read; says why."""


def check_name(what: str, value: str) -> str:
    """Workload, unit and part names become object keys: 1-128 of ``A-Za-z0-9._-``."""
    if not _NAME.match(value):
        raise ValueError(
            f"{what} {value!r}: use 1-128 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit"
        )
    return value


@dataclass(frozen=True, slots=True)
class PartEntry:
    name: str
    key: str
    """The part's object key in the bucket."""
    plain_bytes: int
    stored_bytes: int
    sha256: str


@dataclass(frozen=True, slots=True)
class Manifest:
    workload_id: str
    unit_id: str
    generation: int
    step: int
    created_at_us: int
    final: bool
    parts: tuple[PartEntry, ...]
    key_ref: str
    wrapped_key: str
    mac: str = ""
    format: str = FORMAT

    @property
    def plain_bytes(self) -> int:
        return sum(p.plain_bytes for p in self.parts)

    @property
    def stored_bytes(self) -> int:
        return sum(p.stored_bytes for p in self.parts)

    def body(self) -> bytes:
        """The canonical bytes the MAC covers (everything but the MAC)."""
        data = asdict(self)
        data.pop("mac")
        return _canonical(data)

    def to_json(self) -> bytes:
        return _canonical(asdict(self))

    @classmethod
    def from_json(cls, raw: bytes) -> Manifest:
        try:
            data: Any = json.loads(raw)
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                raise ManifestError(f"not a {FORMAT} manifest")
            parts = tuple(PartEntry(**p) for p in data.pop("parts"))
            manifest = cls(parts=parts, **data)
        except ManifestError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            raise ManifestError(f"not a readable manifest: {type(error).__name__}") from None
        if not all(isinstance(p.sha256, str) and len(p.sha256) == 64 for p in manifest.parts):
            raise ManifestError("a part without a SHA-256")
        return manifest


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _mac_key(data_key: bytes) -> bytes:
    return hmac.new(data_key, b"spotcap.checkpoint manifest", hashlib.sha256).digest()


def manifest_mac(manifest: Manifest, data_key: bytes) -> str:
    return hmac.new(_mac_key(data_key), manifest.body(), hashlib.sha256).hexdigest()


def sign_manifest(manifest: Manifest, data_key: bytes) -> Manifest:
    from dataclasses import replace

    return replace(manifest, mac=manifest_mac(manifest, data_key))
