"""The node's first hop (ADR-31) against the session's OpenBao: the boot folder holds a
single-use response-wrapping token, never a key; the node makes its first key itself and
enrols with the token through the bundle service. The token used twice, another node's token,
an expired token: each refused in one sentence and logged as a possible theft, and no token is
in any log line or answer."""

from __future__ import annotations

import http.client
import json
import logging
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from agent.identity import FetchError, NodeIdentityClient, _csr_pem, _key_pem
from infra import servers
from provider.nodes import Enroller, NodeAuthorityError, NodeIdentity
from provider.nodes.authority import EnrolmentTokenError, NodeRecord
from provider.nodes.identity import identity_of_certificate, serial_text
from schemas.events import InstanceLaunched
from tests.decider_events import Events
from tests.identity_support import REGION, Setup, bundle_service, config_of, delivered

THEFT = "POSSIBLE THEFT"


@pytest.fixture
def setup(openbao: servers.Server, tmp_path: Path) -> Iterator[Setup]:
    yield from bundle_service(openbao, tmp_path)


def public_pem(key_or_cert: bytes, *, certificate: bool) -> bytes:
    pem, spki = serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    if certificate:
        return x509.load_pem_x509_certificate(key_or_cert).public_key().public_bytes(pem, spki)
    key = serialization.load_pem_private_key(key_or_cert, None)
    return key.public_key().public_bytes(pem, spki)


def post_enrol(setup: Setup, instance: str, token: str) -> tuple[int, str]:
    """A first-hop request as anyone holding `token` would make it (a fresh key's CSR)."""
    # The agent's own request (`_csr_pem`), made by a thief too.
    parts = urlsplit(setup.service.address)
    context = ssl.create_default_context(cafile=str(setup.ca))
    conn = http.client.HTTPSConnection(
        parts.hostname or "", parts.port, context=context, timeout=30
    )
    body = json.dumps({"token": token, "csr": _csr_pem(ec.generate_private_key(ec.SECP256R1()))})
    try:
        conn.request("POST", f"/v1/nodes/{REGION}/instance/{instance}/enrol", body=body)
        answer = conn.getresponse()
        return answer.status, answer.read().decode()
    finally:
        conn.close()


def test_the_enroller_delivers_a_token_and_the_node_makes_its_own_key(
    setup: Setup, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    boot = tmp_path / "boot"
    enroller = Enroller(setup.authority, boot)
    events = Events(REGION)
    enroller.observe(
        events.env(
            InstanceLaunched("i-first", "c7.16.hall-a.reclaimable", "wl-a", 16, "reclaimable", {}),
            1,
        )
    )
    assert enroller.drain() == 0
    assert enroller.enrolled == [NodeIdentity(REGION, "i-first")]
    node = boot / "i-first"
    # Only a token and the CA: no key, no certificate in the boot folder.
    assert sorted(p.name for p in node.iterdir()) == ["ca.pem", "node.token"]
    assert (node / "node.token").stat().st_mode & 0o777 == 0o600
    token = (node / "node.token").read_text().strip()
    assert token and "PRIVATE KEY" not in token
    record = setup.authority.record(NodeIdentity(REGION, "i-first"))
    assert record is not None and record.serials == {} and record.nonce

    (node / "bundle.pub").write_bytes((setup.tmp / "ca.pem").read_bytes())  # unused here
    config = config_of(setup, node)
    client = NodeIdentityClient(config, REGION, "i-first")
    assert client.enrol_if_needed() is True
    assert not (node / "node.token").exists()  # spent, and deleted
    assert (node / "node.key").stat().st_mode & 0o777 == 0o600
    certificate = (node / "node.pem").read_bytes()
    assert identity_of_certificate(x509.load_pem_x509_certificate(certificate)) == NodeIdentity(
        REGION, "i-first"
    )
    # The certificate is for the key the node made: it never left the node.
    assert public_pem(certificate, certificate=True) == public_pem(
        (node / "node.key").read_bytes(), certificate=False
    )
    after = setup.authority.record(NodeIdentity(REGION, "i-first"))
    assert after is not None and len(after.serials) == 1 and after.nonce == ""
    assert client.enrol_if_needed() is False  # enrolled: nothing more to do
    client.fetch_bundle(config.path)  # and it is a node now, over mutual TLS
    assert config.path.read_bytes() == (setup.bundles / "wl-a.bundle.json").read_bytes()
    assert token not in caplog.text


def test_a_token_used_twice_is_refused_and_said_a_possible_theft(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    _, config = delivered(setup, "i-twice", "wl-a")
    token = config.token.read_text().strip()
    # A thief reads the boot folder and enrols first.
    status, _ = post_enrol(setup, "i-twice", token)
    assert status == 200
    # The node's own enrolment then fails: the theft is seen, not silent.
    with pytest.raises(FetchError, match=r"403.*not valid: already used \(a possible theft"):
        NodeIdentityClient(config, REGION, "i-twice").enrol_if_needed()
    assert not config.certificate.exists() and not config.token.exists()
    status, sentence = post_enrol(setup, "i-twice", token)  # a third time
    assert status == 403 and "already used" in sentence and token not in sentence
    assert THEFT in caplog.text and token not in caplog.text


def test_a_node_whose_answer_was_lost_asks_again_with_its_key_and_is_signed(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    """The service spent the token and signed, but the answer never reached the node (its
    connection dropped): the node's next try, the same key and token, is signed again; the
    spent token with any other key is still refused as a possible theft."""
    caplog.set_level(logging.DEBUG)
    identity, config = delivered(setup, "i-lost", "wl-a")
    token = config.token.read_text().strip()
    key = ec.generate_private_key(ec.SECP256R1())
    # The agent keeps its key before it sends the request; the answer is then lost.
    config.key.write_bytes(_key_pem(key))
    lost_answer = setup.authority.enrol_with_token(identity, token, _csr_pem(key))
    client = NodeIdentityClient(config, REGION, "i-lost")
    assert client.enrol_if_needed() is True
    certificate = config.certificate.read_bytes()
    assert public_pem(certificate, certificate=True) == public_pem(
        config.key.read_bytes(), certificate=False
    )
    assert serial_text(x509.load_pem_x509_certificate(certificate)) != lost_answer.serial
    record = setup.authority.record(identity)
    assert record is not None and len(record.serials) == 2 and record.nonce == ""
    status, sentence = post_enrol(setup, "i-lost", token)  # a thief, with a key of its own
    assert status == 403 and "already used" in sentence and token not in sentence
    assert THEFT in caplog.text and token not in caplog.text


def test_a_new_token_ends_the_retry_of_the_spent_one(setup: Setup) -> None:
    identity, config = delivered(setup, "i-renewed-token", "wl-a")
    token = config.token.read_text().strip()
    key = ec.generate_private_key(ec.SECP256R1())
    setup.authority.enrol_with_token(identity, token, _csr_pem(key))
    setup.authority.enrolment_token(identity, "wl-a")  # a relaunch's token
    with pytest.raises(EnrolmentTokenError, match="already used"):
        setup.authority.enrol_with_token(identity, token, _csr_pem(key))


def test_another_nodes_token_is_refused(setup: Setup, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    _, config_a = delivered(setup, "i-tok-a", "wl-a")
    delivered(setup, "i-tok-b", "wl-b")
    token_a = config_a.token.read_text().strip()
    status, sentence = post_enrol(setup, "i-tok-b", token_a)
    assert status == 403 and "only with its own token" in sentence
    assert token_a not in sentence
    record_b = setup.authority.record(NodeIdentity(REGION, "i-tok-b"))
    assert record_b is not None and record_b.serials == {}  # nothing signed for B
    assert THEFT in caplog.text and token_a not in caplog.text


def test_an_expired_token_is_refused(setup: Setup, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    identity = NodeIdentity(REGION, "i-late")
    token = setup.authority.enrolment_token(identity, "wl-a", ttl_s=1)
    deadline = time.monotonic() + 60
    status, sentence = 200, ""
    time.sleep(2)
    while time.monotonic() < deadline:  # OpenBao expires it within seconds of its TTL
        status, sentence = post_enrol(setup, "i-late", token)
        if status == 403:
            break
        time.sleep(1)
    assert status == 403 and "not valid" in sentence and "expired" in sentence
    record = setup.authority.record(identity)
    assert record is not None and record.serials == {}
    assert token not in caplog.text and token not in sentence


def test_a_newer_token_voids_the_older_one(setup: Setup) -> None:
    identity = NodeIdentity(REGION, "i-again")
    older = setup.authority.enrolment_token(identity, "wl-a")
    newer = setup.authority.enrolment_token(identity, "wl-a")
    status, sentence = post_enrol(setup, "i-again", older)
    assert status == 403 and "not its latest" in sentence
    assert post_enrol(setup, "i-again", newer)[0] == 200


def test_a_late_write_of_an_earlier_try_cannot_replace_the_nonce(setup: Setup) -> None:
    """A try whose record write OpenBao served late (paused, then resumed) wrote on the
    version it read: check-and-set refuses it once a newer try wrote, so the token delivered
    stays the node's latest."""
    identity = NodeIdentity(REGION, "i-late-write")
    _, read_version = setup.authority._read(identity)
    token = setup.authority.enrolment_token(identity, "wl-a")
    with pytest.raises(NodeAuthorityError, match="check-and-set"):
        setup.authority._save(NodeRecord(identity, "wl-a", {}, nonce="late"), cas=read_version)
    assert post_enrol(setup, "i-late-write", token)[0] == 200


def test_a_retired_nodes_token_is_refused(setup: Setup) -> None:
    identity = NodeIdentity(REGION, "i-gone")
    token = setup.authority.enrolment_token(identity, "wl-a")
    setup.authority.revoke(identity)
    status, sentence = post_enrol(setup, "i-gone", token)
    assert status == 403 and "retired" in sentence
