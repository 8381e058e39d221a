"""Signed bundles: what a node verifies before acting, and the two signers (file, and transit
on a real OpenBao)."""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass

import hvac
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts import (
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
from contracts.bundles import canonical_json, signed_bytes, unsigned_bundle
from contracts.signing import transit_signer_from_env
from infra import servers
from infra.servers.process import free_ports
from tests.test_contracts import BASE, compile_one

__all__ = ["TransitKey", "transit_key"]  # tests/test_contracts_cli.py signs with them too

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


# -- the transit signer against a real OpenBao ------------------------------------------------

MOUNT = "transit"


@dataclass(frozen=True)
class TransitKey:
    """An ed25519 key on the real OpenBao's transit engine, rotated once (versions 1 and 2)."""

    address: str
    token: str
    name: str

    def client(self, token: str | None = None) -> hvac.Client:
        return hvac.Client(url=self.address, token=token or self.token, timeout=10)

    def exported_public_key(self, version: int) -> Ed25519PublicKey:
        """The public key OpenBao exports for that version (``transit/export/public-key``)."""
        answer = self.client().read(f"{MOUNT}/export/public-key/{self.name}")
        return load_public_key(str(answer["data"]["keys"][str(version)]).encode())


@pytest.fixture
def transit_key(openbao: servers.Server) -> TransitKey:
    """A new ed25519 transit key on the session's OpenBao, created and rotated through hvac."""
    key = TransitKey(openbao.address, servers.openbao_token(openbao), f"bundles-{uuid.uuid4().hex}")
    client = key.client()
    if f"{MOUNT}/" not in client.sys.list_mounted_secrets_engines()["data"]:
        client.sys.enable_secrets_engine("transit", path=MOUNT)
    client.secrets.transit.create_key(name=key.name, key_type="ed25519", mount_point=MOUNT)
    client.secrets.transit.rotate_key(name=key.name, mount_point=MOUNT)
    return key


def test_transit_signer_signs_with_the_latest_version_and_verifies(
    transit_key: TransitKey,
) -> None:
    signer = TransitSigner(transit_key.client(), transit_key.name)
    assert signer.version == 2
    public = transit_key.exported_public_key(2)
    assert signer.key_id == key_id_of(public)
    data = sign_bundle(a_bundle(), signer)
    assert verify_bundle(data, public) == a_bundle()
    assert sign_bundle(a_bundle(), signer) == data  # Ed25519 is deterministic, in transit too
    with pytest.raises(WrongKeyError):  # pinned to the latest version, not the first
        verify_bundle(data, transit_key.exported_public_key(1))
    # OpenBao itself agrees: version 2 signed exactly the bundle's signed bytes
    signature = json.loads(data)["signature"]["value"]
    answer = transit_key.client().secrets.transit.verify_signed_data(
        name=transit_key.name,
        hash_input=base64.b64encode(signed_bytes(a_bundle())).decode(),
        signature=f"vault:v2:{signature}",
        mount_point=MOUNT,
    )
    assert answer["data"]["valid"] is True


def test_a_transit_signed_bundle_refuses_every_byte_flip(transit_key: TransitKey) -> None:
    public = transit_key.exported_public_key(2)
    data = sign_bundle(a_bundle(), TransitSigner(transit_key.client(), transit_key.name))
    for position in range(len(data)):
        altered = bytearray(data)
        altered[position] ^= 0x01
        with pytest.raises(BundleError):
            verify_bundle(bytes(altered), public)


def test_transit_signer_refuses_a_key_that_is_not_ed25519(transit_key: TransitKey) -> None:
    client = transit_key.client()
    name = f"{transit_key.name}-rsa"
    client.secrets.transit.create_key(name=name, key_type="rsa-2048", mount_point=MOUNT)
    with pytest.raises(SigningError, match="rsa-2048"):
        TransitSigner(client, name)


def test_transit_signer_checks_the_signature_it_gets(transit_key: TransitKey) -> None:
    signer = TransitSigner(transit_key.client(), transit_key.name)
    # the key is deleted and created anew under the same name: transit now signs "vault:v2:..."
    # with other key material than the public key the signer read
    transit = transit_key.client().secrets.transit
    transit.update_key_configuration(
        name=transit_key.name, deletion_allowed=True, mount_point=MOUNT
    )
    transit.delete_key(name=transit_key.name, mount_point=MOUNT)
    transit.create_key(name=transit_key.name, key_type="ed25519", mount_point=MOUNT)
    transit.rotate_key(name=transit_key.name, mount_point=MOUNT)
    with pytest.raises(SigningError, match="does not verify"):
        sign_bundle(a_bundle(), signer)


def test_transit_signer_reports_a_key_deleted_after_it_was_read(transit_key: TransitKey) -> None:
    signer = TransitSigner(transit_key.client(), transit_key.name)
    transit = transit_key.client().secrets.transit
    transit.update_key_configuration(
        name=transit_key.name, deletion_allowed=True, mount_point=MOUNT
    )
    transit.delete_key(name=transit_key.name, mount_point=MOUNT)
    with pytest.raises(SigningError, match=f"transit sign with key {transit_key.name} failed"):
        sign_bundle(a_bundle(), signer)


def test_transit_signer_reports_a_refused_token(transit_key: TransitKey) -> None:
    with pytest.raises(SigningError, match=r"cannot read transit key.*permission denied"):
        TransitSigner(transit_key.client(token="wrong"), transit_key.name)


def test_transit_signer_names_a_missing_key(transit_key: TransitKey) -> None:
    with pytest.raises(
        SigningError, match=f"cannot read transit key {MOUNT}/keys/no-such-key: no such key"
    ):
        TransitSigner(transit_key.client(), "no-such-key")


def test_transit_signer_reports_an_unreachable_openbao() -> None:
    (port,) = free_ports(1)  # nothing listens there
    client = hvac.Client(url=f"http://127.0.0.1:{port}", token="any", timeout=5)
    with pytest.raises(
        SigningError, match=r"cannot read transit key.*unreachable.*Connection refused"
    ):
        TransitSigner(client, "spotcap-bundles")


def test_the_transit_signer_is_found_from_bao_or_vault_variables() -> None:
    with pytest.raises(SigningError, match=r"needs BAO_ADDR \(or VAULT_ADDR\) and BAO_TOKEN"):
        transit_signer_from_env("k", "transit", {"BAO_ADDR": "http://127.0.0.1:9"})
    with pytest.raises(SigningError, match="needs BAO_ADDR"):
        transit_signer_from_env("k", "transit", {"VAULT_TOKEN": "t"})
    (bao, vault) = free_ports(2)  # nothing listens on either: the error names the one asked
    env = {"BAO_ADDR": f"http://127.0.0.1:{bao}", "VAULT_ADDR": f"http://127.0.0.1:{vault}"}
    with pytest.raises(SigningError, match=f"unreachable.*port={bao}"):
        transit_signer_from_env("k", "transit", {**env, "VAULT_TOKEN": "t"})
    with pytest.raises(SigningError, match=f"unreachable.*port={vault}"):
        transit_signer_from_env("k", "transit", {"VAULT_ADDR": env["VAULT_ADDR"], "BAO_TOKEN": "t"})


def test_a_refusal_as_json_names_its_kind_and_reason() -> None:
    error = WrongKeyError("signed by key abc, not def")
    assert error.as_json() == {"ok": False, "error": "WrongKeyError",
                               "reason": "signed by key abc, not def"}  # fmt: skip
