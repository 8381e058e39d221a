"""The workload's key: a data key per generation from OpenBao's transit engine (ADR-19).

Each generation is sealed under a fresh 256-bit data key that transit generates under the
workload's own transit key (``transit/datakey/plaintext/<key>``); the manifest keeps only the
wrapped copy (``vault:vN:...``), and a restore asks transit to unwrap it
(``transit/decrypt/<key>``). Only a token whose policy grants those two paths on that key can
do either: the workload's own. The control plane's token has no such grant, so it can neither
make nor open a workload's checkpoint even with the bucket's bytes in hand.

Plain HTTP with the standard library (no client library on the workload's side); the token is
sent as a header and never appears in an error, a log line or a manifest.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["DataKey", "KeyAccessError", "KeyService", "TransitKeys"]


class KeyAccessError(Exception):
    """The key service refused or could not be reached; says which operation and the status."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        """The HTTP status (403: this token may not; 400: the wrapped key is not valid)."""


@dataclass(frozen=True, slots=True)
class DataKey:
    plaintext: bytes
    """32 bytes; only ever in memory."""
    wrapped: str
    """The same key wrapped by the workload's key, as stored in the manifest."""


class KeyService(Protocol):
    """Where a workload's data keys come from."""

    @property
    def key_ref(self) -> str:
        """Names the wrapping key in manifests (``openbao-transit:<mount>/<name>``)."""
        ...

    def new_data_key(self) -> DataKey: ...

    def unwrap(self, wrapped: str) -> bytes: ...


class TransitKeys:
    """Data keys from an OpenBao (or Vault) transit key."""

    def __init__(
        self,
        address: str,
        token: str,
        key_name: str,
        *,
        mount: str = "transit",
        timeout_s: float = 10.0,
    ) -> None:
        self._address = address.rstrip("/")
        self._token = token
        self._key_name = key_name
        self._mount = mount.strip("/")
        self._timeout_s = timeout_s

    def __repr__(self) -> str:  # never the token
        return f"TransitKeys({self._address!r}, key={self._mount}/{self._key_name})"

    @property
    def key_ref(self) -> str:
        return f"openbao-transit:{self._mount}/{self._key_name}"

    def new_data_key(self) -> DataKey:
        data = self._post(f"datakey/plaintext/{self._key_name}", {"bits": 256}, "new data key")
        return DataKey(base64.b64decode(data["plaintext"]), str(data["ciphertext"]))

    def unwrap(self, wrapped: str) -> bytes:
        data = self._post(f"decrypt/{self._key_name}", {"ciphertext": wrapped}, "unwrap")
        return base64.b64decode(data["plaintext"])

    def _post(self, path: str, body: dict[str, Any], what: str) -> dict[str, Any]:
        url = f"{self._address}/v1/{self._mount}/{path}"
        request = urllib.request.Request(
            url,
            data=json.dumps(body).encode(),
            headers={"X-Vault-Token": self._token, "Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as answer:
                payload = json.loads(answer.read())
        except urllib.error.HTTPError as error:
            reason = _errors(error)
            detail = f"{error.code}: {reason}" if reason else str(error.code)
            raise KeyAccessError(
                f"{what} with {self.key_ref}: refused ({detail})", error.code
            ) from None
        except (OSError, ValueError) as error:
            raise KeyAccessError(f"{what} with {self.key_ref}: {type(error).__name__}") from None
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, dict) or "plaintext" not in data:
            raise KeyAccessError(f"{what} with {self.key_ref}: an answer without the key")
        return data


def _errors(error: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(error.read() or b"{}")
    except ValueError:
        return ""
    found = body.get("errors") if isinstance(body, dict) else None
    if not isinstance(found, list):
        return ""
    return " ".join(" ".join(str(e).split()) for e in found)[:200]
