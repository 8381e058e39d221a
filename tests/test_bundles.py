"""Signed bundles: what a node verifies before acting, and the two signers (file, transit)."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import hvac
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.contracts import (
    Bundle,
    BundleError,
    FileSigner,
    MalformedBundleError,
    SigningError,
    TamperedBundleError,
    TransitSigner,
    UnsignedBundleError,
    WrongKeyError,
    bundle_sha256,
    key_id_of,
    load_private_key,
    load_public_key,
    sign_bundle,
    verify_bundle,
)
from schemas.contracts.bundles import canonical_json, signed_bytes, unsigned_bundle
from tests.test_contracts import BASE, compile_one

SEED = bytes(range(32))
OTHER_SEED = bytes(range(1, 33))


def a_bundle() -> Bundle:
    return compile_one(BASE).accepted[0].bundle


SIGNER = FileSigner(Ed25519PrivateKey.from_private_bytes(SEED))
SIGNED = sign_bundle(a_bundle(), SIGNER)
PUBLIC = SIGNER.public_key()


def test_a_signed_bundle_verifies_and_returns_its_fields() -> None:
    bundle = verify_bundle(SIGNED, PUBLIC)
    assert bundle == a_bundle()
    assert bundle.workload_id == "etl"
    assert bundle.drain_budget_s == 90
    assert bundle.checkpoint_method == "spark"
    assert bundle.checkpoint_size_bytes == 2**30


def test_the_bundle_holds_only_drain_fields_and_never_expires() -> None:
    fields = set(json.loads(SIGNED)["bundle"])
    assert fields == {
        "format",
        "workload_id",
        "contract_version",
        "source_sha256",
        "scheduler",
        "drain_budget_s",
        "checkpoint_method",
        "checkpoint_size_bytes",
        "restart_semantics",
        "proactive_drain_on_advisory",
    }
    assert not any("expir" in f or "eur" in f or "not_after" in f for f in fields)


def test_the_event_sha_is_the_sha_of_the_signed_bytes() -> None:
    compiled = compile_one(BASE).accepted[0]
    import hashlib

    assert compiled.bundle_sha256 == hashlib.sha256(signed_bytes(compiled.bundle)).hexdigest()
    assert compiled.bundle_sha256 == bundle_sha256(compiled.bundle)


def test_signing_is_deterministic() -> None:
    assert sign_bundle(a_bundle(), SIGNER) == SIGNED  # Ed25519 signatures are deterministic


def test_an_unsigned_bundle_is_refused() -> None:
    with pytest.raises(UnsignedBundleError, match="not signed"):
        verify_bundle(unsigned_bundle(a_bundle()), PUBLIC)


def test_a_bundle_signed_by_another_key_is_refused() -> None:
    other = FileSigner(Ed25519PrivateKey.from_private_bytes(OTHER_SEED))
    with pytest.raises(WrongKeyError, match=key_id_of(other.public_key())):
        verify_bundle(sign_bundle(a_bundle(), other), PUBLIC)


def test_a_forged_key_id_does_not_help() -> None:
    other = FileSigner(Ed25519PrivateKey.from_private_bytes(OTHER_SEED))
    forged = json.loads(sign_bundle(a_bundle(), other))
    forged["signature"]["key_id"] = SIGNER.key_id
    with pytest.raises(TamperedBundleError):
        verify_bundle(canonical_json(forged), PUBLIC)


def test_a_reformatted_bundle_is_refused() -> None:
    pretty = json.dumps(json.loads(SIGNED), indent=2).encode()
    with pytest.raises(MalformedBundleError, match="canonical"):
        verify_bundle(pretty, PUBLIC)


def test_an_extra_field_is_refused_even_if_canonical() -> None:
    document = json.loads(SIGNED)
    document["bundle"]["expires_at"] = 0
    with pytest.raises(BundleError):
        verify_bundle(canonical_json(document), PUBLIC)


def test_every_single_byte_flip_is_refused() -> None:
    for position in range(len(SIGNED)):
        for mask in (0x01, 0x20, 0x80):
            altered = bytearray(SIGNED)
            altered[position] ^= mask
            with pytest.raises(BundleError):
                verify_bundle(bytes(altered), PUBLIC)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_any_changed_byte_anywhere_is_refused(data: st.DataObject) -> None:
    position = data.draw(st.integers(0, len(SIGNED) - 1), label="position")
    byte = data.draw(st.integers(0, 255).filter(lambda b: b != SIGNED[position]), label="byte")
    altered = bytearray(SIGNED)
    altered[position] = byte
    with pytest.raises(BundleError):
        verify_bundle(bytes(altered), PUBLIC)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=600))
def test_arbitrary_bytes_are_refused_with_a_bundle_error(data: bytes) -> None:
    with pytest.raises(BundleError):
        verify_bundle(data, PUBLIC)


# -- keys -------------------------------------------------------------------------------------


def test_key_files_are_pem_or_a_raw_seed() -> None:
    private = Ed25519PrivateKey.from_private_bytes(SEED)
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    assert key_id_of(load_private_key(pem).public_key()) == SIGNER.key_id
    assert key_id_of(load_private_key(SEED).public_key()) == SIGNER.key_id
    with pytest.raises(SigningError, match="32 raw bytes"):
        load_private_key(b"short")


def test_public_keys_are_pem_raw_or_base64() -> None:
    raw = PUBLIC.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    pem = PUBLIC.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    for form in (raw, pem, base64.b64encode(raw)):
        assert key_id_of(load_public_key(form)) == SIGNER.key_id


# -- the transit signer against Vault's documented API ----------------------------------------

TOKEN = "s.test-token"
KEY_NAME = "spotcap-bundles"


def _raw_public(seed: bytes) -> str:
    public = Ed25519PrivateKey.from_private_bytes(seed).public_key()
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def recorded_keys_response(key_type: str = "ed25519") -> dict[str, Any]:
    """``GET /v1/transit/keys/spotcap-bundles`` as Vault answers it for an ed25519 key
    rotated once: each version with its base64 raw public key, and ``latest_version``."""
    return {
        "request_id": "2f8d1f4c-0000-4000-8000-000000000001",
        "lease_id": "",
        "renewable": False,
        "lease_duration": 0,
        "data": {
            "allow_plaintext_backup": False,
            "auto_rotate_period": 0,
            "deletion_allowed": False,
            "derived": False,
            "exportable": False,
            "imported_key": False,
            "keys": {
                "1": {
                    "certificate_chain": "",
                    "creation_time": "2026-01-05T10:00:00.000000000Z",
                    "name": "ed25519",
                    "public_key": _raw_public(OTHER_SEED),
                },
                "2": {
                    "certificate_chain": "",
                    "creation_time": "2026-06-05T10:00:00.000000000Z",
                    "name": "ed25519",
                    "public_key": _raw_public(SEED),
                },
            },
            "latest_version": 2,
            "min_available_version": 0,
            "min_decryption_version": 1,
            "min_encryption_version": 0,
            "name": KEY_NAME,
            "supports_decryption": False,
            "supports_derivation": True,
            "supports_encryption": False,
            "supports_signing": True,
            "type": key_type,
        },
        "wrap_info": None,
        "warnings": None,
        "auth": None,
    }


class FakeTransit:
    """Answers the transit keys and sign endpoints the way Vault's API documents them."""

    def __init__(self, key_type: str = "ed25519", sign_with: bytes | None = None) -> None:
        self.key_type = key_type
        self.versions = {1: OTHER_SEED, 2: SEED}
        self.sign_with = sign_with  # a wrong key, to test the signer's own check
        self.requests: list[tuple[str, str, dict[str, Any]]] = []

    def answer(self, method: str, path: str, token: str, body: dict[str, Any]) -> tuple[int, Any]:
        self.requests.append((method, path, body))
        if token != TOKEN:
            return 403, {"errors": ["permission denied"]}
        if method == "GET" and path == f"/v1/transit/keys/{KEY_NAME}":
            return 200, recorded_keys_response(self.key_type)
        if method in ("POST", "PUT") and path == f"/v1/transit/sign/{KEY_NAME}":
            version = int(body.get("key_version") or 2)
            seed = self.sign_with or self.versions[version]
            signature = Ed25519PrivateKey.from_private_bytes(seed).sign(
                base64.b64decode(body["input"])
            )
            encoded = base64.b64encode(signature).decode()
            return 200, {
                "request_id": "2f8d1f4c-0000-4000-8000-000000000002",
                "lease_id": "",
                "renewable": False,
                "lease_duration": 0,
                "data": {"key_version": version, "signature": f"vault:v{version}:{encoded}"},
                "wrap_info": None,
                "warnings": None,
                "auth": None,
            }
        return 404, {"errors": []}


@pytest.fixture
def transit() -> Iterator[tuple[FakeTransit, str]]:
    fake = FakeTransit()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            token = self.headers.get("X-Vault-Token", "")
            status, answer = fake.answer(self.command, self.path, token, body)
            payload = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = _serve  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_transit_signer_signs_with_the_latest_version_and_verifies(
    transit: tuple[FakeTransit, str],
) -> None:
    fake, url = transit
    signer = TransitSigner(hvac.Client(url=url, token=TOKEN), KEY_NAME)
    assert signer.version == 2
    # the public key the keys endpoint returns verifies what transit signed
    public = load_public_key(recorded_keys_response()["data"]["keys"]["2"]["public_key"].encode())
    data = sign_bundle(a_bundle(), signer)
    assert verify_bundle(data, public) == a_bundle()
    assert data == SIGNED  # the same key signs the same bytes, in transit or from a file
    method, path, body = fake.requests[-1]
    assert (method, path) == ("POST", f"/v1/transit/sign/{KEY_NAME}")
    assert body["key_version"] == 2
    assert base64.b64decode(body["input"]) == signed_bytes(a_bundle())


def test_transit_signer_refuses_a_key_that_is_not_ed25519(
    transit: tuple[FakeTransit, str],
) -> None:
    fake, url = transit
    fake.key_type = "rsa-2048"
    with pytest.raises(SigningError, match="rsa-2048"):
        TransitSigner(hvac.Client(url=url, token=TOKEN), KEY_NAME)


def test_transit_signer_checks_the_signature_it_gets(transit: tuple[FakeTransit, str]) -> None:
    fake, url = transit
    fake.sign_with = bytes(32)
    signer = TransitSigner(hvac.Client(url=url, token=TOKEN), KEY_NAME)
    with pytest.raises(SigningError, match="does not verify"):
        sign_bundle(a_bundle(), signer)


def test_transit_signer_reports_a_refused_token(transit: tuple[FakeTransit, str]) -> None:
    _, url = transit
    with pytest.raises(SigningError, match="cannot read transit key"):
        TransitSigner(hvac.Client(url=url, token="wrong"), KEY_NAME)
