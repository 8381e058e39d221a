"""Ed25519 signers for contract bundles (ADR-03): a key file, or OpenBao/Vault transit.

A `Signer` signs bytes and names its key by `key_id` (``ed25519:`` + the first 16 hex digits
of the SHA-256 of the raw public key), which the bundle carries so a node holding the wrong
key says so instead of "bad signature".

Key files (`FileSigner.from_file`, `load_private_key`): a PEM PKCS#8 Ed25519 private key (what
``spotcap contracts keygen`` writes), or exactly 32 raw bytes, the Ed25519 seed. Public keys
(`load_public_key`): PEM SubjectPublicKeyInfo, 32 raw bytes, or their base64 (what the transit
keys endpoint returns).

`TransitSigner` signs with a transit key of type ``ed25519`` through `hvac`: it reads
``GET /v1/<mount>/keys/<name>`` once for the latest version and its public key, then signs with
``POST /v1/<mount>/sign/<name>`` pinned to that version, and checks every signature against
the public key before using it. The private key never leaves OpenBao.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

SEED_BYTES = 32
_TRANSIT_SIGNATURE = re.compile(r"^vault:v(\d+):([A-Za-z0-9+/=]+)$")


class SigningError(RuntimeError):
    """A key could not be loaded or a signature could not be made; says which and why."""


class Signer(Protocol):
    """Signs bundle bytes with an Ed25519 key."""

    @property
    def key_id(self) -> str: ...

    def public_key(self) -> Ed25519PublicKey: ...

    def sign(self, message: bytes) -> bytes:
        """The 64-byte Ed25519 signature of `message`."""
        ...


def raw_public_bytes(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id_of(public_key: Ed25519PublicKey) -> str:
    """``ed25519:<16 hex>``: names a key without revealing anything secret."""
    return "ed25519:" + hashlib.sha256(raw_public_bytes(public_key)).hexdigest()[:16]


def load_private_key(data: bytes) -> Ed25519PrivateKey:
    """A PEM PKCS#8 Ed25519 private key, or a raw 32-byte seed."""
    if data.lstrip().startswith(b"-----BEGIN"):
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError, UnsupportedAlgorithm) as error:
            raise SigningError(f"not a readable unencrypted PEM private key: {error}") from error
        if not isinstance(key, Ed25519PrivateKey):
            raise SigningError(f"the PEM key is {type(key).__name__}, not an Ed25519 key")
        return key
    if len(data) == SEED_BYTES:
        return Ed25519PrivateKey.from_private_bytes(data)
    raise SigningError(
        f"a key file is a PEM Ed25519 private key or exactly {SEED_BYTES} raw bytes (the "
        f"seed); this one is {len(data)} bytes of something else"
    )


def load_public_key(data: bytes) -> Ed25519PublicKey:
    """A PEM Ed25519 public key, 32 raw bytes, or the base64 of 32 raw bytes."""
    if data.lstrip().startswith(b"-----BEGIN"):
        try:
            key = serialization.load_pem_public_key(data)
        except (ValueError, UnsupportedAlgorithm) as error:
            raise SigningError(f"not a readable PEM public key: {error}") from error
        if not isinstance(key, Ed25519PublicKey):
            raise SigningError(f"the PEM key is {type(key).__name__}, not an Ed25519 key")
        return key
    if len(data) == SEED_BYTES:
        return Ed25519PublicKey.from_public_bytes(data)
    try:
        raw = base64.b64decode(data.strip(), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) == SEED_BYTES:
        return Ed25519PublicKey.from_public_bytes(raw)
    raise SigningError(
        "a public key is a PEM Ed25519 public key, 32 raw bytes, or their base64 (as the "
        "transit keys endpoint returns it)"
    )


def generate_key_pem() -> tuple[bytes, bytes]:
    """A new key pair as (PEM PKCS#8 private key, PEM public key)."""
    private = Ed25519PrivateKey.generate()
    private_pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private_pem, public_pem


def write_key_pair(key_file: Path) -> tuple[Path, Ed25519PublicKey]:
    """Write a new private key to `key_file` (PEM, mode 0600) and its public key to
    <key_file>.pub, never over an existing file; return that file and the public key."""
    public_file = key_file.with_name(key_file.name + ".pub")
    for existing in (key_file, public_file):
        if existing.exists():
            raise SigningError(f"{existing} exists; refusing to overwrite a key")
    private_pem, public_pem = generate_key_pem()
    descriptor = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(private_pem)
    public_file.write_bytes(public_pem)
    return public_file, load_private_key(private_pem).public_key()


def key_pair_json(
    key_file: Path, public_file: Path, public_key: Ed25519PublicKey
) -> dict[str, str]:
    """`spotcap contracts keygen --json`: both files, the public key (base64 of its 32 raw
    bytes) and its key id; never the private key."""
    return {
        "private_key_file": key_file.as_posix(),
        "public_key_file": public_file.as_posix(),
        "public_key": base64.b64encode(raw_public_bytes(public_key)).decode("ascii"),
        "key_id": key_id_of(public_key),
    }


class FileSigner:
    """Signs with a private key held in memory (loaded from a key file)."""

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._private_key = private_key
        self._key_id = key_id_of(private_key.public_key())

    @classmethod
    def from_bytes(cls, data: bytes) -> FileSigner:
        return cls(load_private_key(data))

    @property
    def key_id(self) -> str:
        return self._key_id

    def public_key(self) -> Ed25519PublicKey:
        return self._private_key.public_key()

    def sign(self, message: bytes) -> bytes:
        return self._private_key.sign(message)


def transit_signer(
    key_name: str, mount_point: str, address: str | None, token: str | None
) -> TransitSigner:
    """A `TransitSigner` for the OpenBao/Vault at `address` (BAO_ADDR) with `token`
    (BAO_TOKEN); SigningError when either is missing or the key cannot be used."""
    if not address or not token:
        raise SigningError(
            "--transit-key needs BAO_ADDR (or VAULT_ADDR) and BAO_TOKEN (or VAULT_TOKEN)"
        )
    import hvac  # loads requests; only a transit signer needs it

    return TransitSigner(hvac.Client(url=address, token=token), key_name, mount_point)


def transit_signer_from_env(
    key_name: str, mount_point: str, environ: Mapping[str, str]
) -> TransitSigner:
    """`transit_signer` at the address and with the token `environ` names: BAO_ADDR (else
    VAULT_ADDR) and BAO_TOKEN (else VAULT_TOKEN)."""
    return transit_signer(
        key_name,
        mount_point,
        environ.get("BAO_ADDR") or environ.get("VAULT_ADDR"),
        environ.get("BAO_TOKEN") or environ.get("VAULT_TOKEN"),
    )


def signer_for(
    key_file: Path | None, transit_key: str | None, transit_mount: str, environ: Mapping[str, str]
) -> Signer | None:
    """The signer of a key file, else of a transit key (`transit_signer_from_env`); None for
    neither. SigningError when it cannot sign (a key file's names the file)."""
    if key_file is not None:
        try:
            return FileSigner.from_bytes(key_file.read_bytes())
        except SigningError as error:
            raise SigningError(f"{key_file}: {error}") from error
    if transit_key is not None:
        return transit_signer_from_env(transit_key, transit_mount, environ)
    return None


def _why(error: Exception) -> str:
    """hvac's error in plain words (a 404 reads "None, on get <url>")."""
    from hvac.exceptions import InvalidPath

    if isinstance(error, InvalidPath):
        return f"no such key, or no transit engine mounted there ({error})"
    if isinstance(error, OSError):  # requests' connection errors and time-outs
        return f"OpenBao/Vault is unreachable: {error}"
    return str(error)


class TransitSigner:
    """Signs through an OpenBao/Vault transit key of type ed25519, via an `hvac.Client`."""

    def __init__(self, client: Any, key_name: str, mount_point: str = "transit") -> None:
        # `client` is an hvac.Client (hvac ships no type information).
        self._client = client
        self._key_name = key_name
        self._mount_point = mount_point
        try:
            answer = client.secrets.transit.read_key(name=key_name, mount_point=mount_point)
        except Exception as error:  # hvac raises its own hierarchy and requests' errors
            raise SigningError(
                f"cannot read transit key {mount_point}/keys/{key_name}: {_why(error)}"
            ) from error
        data = answer.get("data", {}) if isinstance(answer, dict) else {}
        if data.get("type") != "ed25519":
            raise SigningError(
                f"transit key {mount_point}/keys/{key_name} is of type {data.get('type')!r}; "
                "bundles are signed with an ed25519 key (create it with type=ed25519)"
            )
        self.version = int(data["latest_version"])
        entry = data.get("keys", {}).get(str(self.version), {})
        public_b64 = entry.get("public_key") if isinstance(entry, dict) else None
        if not public_b64:
            raise SigningError(
                f"transit key {key_name} version {self.version} returned no public key"
            )
        self._public_key = load_public_key(str(public_b64).encode())
        self._key_id = key_id_of(self._public_key)

    @property
    def key_id(self) -> str:
        return self._key_id

    def public_key(self) -> Ed25519PublicKey:
        return self._public_key

    def sign(self, message: bytes) -> bytes:
        try:
            answer = self._client.secrets.transit.sign_data(
                name=self._key_name,
                hash_input=base64.b64encode(message).decode("ascii"),
                key_version=self.version,
                mount_point=self._mount_point,
            )
        except Exception as error:
            raise SigningError(
                f"transit sign with key {self._key_name} failed: {_why(error)}"
            ) from error
        text = str(answer.get("data", {}).get("signature", ""))
        match = _TRANSIT_SIGNATURE.match(text)
        if not match or int(match.group(1)) != self.version:
            raise SigningError(
                f"transit answered {text[:40]!r}, not a version {self.version} signature"
            )
        signature = base64.b64decode(match.group(2))
        try:
            self._public_key.verify(signature, message)
        except InvalidSignature as error:
            raise SigningError(
                "the transit signature does not verify with the key's public key (is the key "
                "derived, or the input prehashed?)"
            ) from error
        return signature
