"""Agents have an identity (ADR-31): the bundle service over mutual TLS against a real OpenBao
PKI engine. No certificate, another node's certificate, a certificate of another CA and a
revoked one are each refused; a node fetches its own bundle only; renewal before expiry gives
a new key and certificate that the service accepts."""

from __future__ import annotations

import asyncio
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import hvac
import pytest
from cryptography import x509

from agent.bundle import BundleStore
from agent.config import AgentConfigError
from agent.identity import FetchError, NodeIdentityClient, identity_round
from agent.service import Agent
from contracts.bundles import verify_bundle
from contracts.signing import generate_key_pem
from infra import servers
from provider.actuator import ActuatorOptions, ActuatorService
from provider.authority import RETRY_FIRST_S, Backoff
from provider.base import DECISION_TAG
from provider.nodes import (
    NodeAuthority,
    NodeAuthorityError,
    NodeIdentity,
    Revoker,
    revoke_on_loss,
    setup_pki,
)
from provider.nodes.identity import identity_of_certificate, serial_text
from schemas.events import Envelope, InstanceDeleted, InstanceLaunched, InstanceLost
from tests.actuator_support import CODEC
from tests.agent_support import config as agent_config
from tests.agent_support import wait_async
from tests.identity_support import REGION, SIGNER, Setup, bundle_service, enrol
from tests.test_actuator import ME, Region


@pytest.fixture
def setup(openbao: servers.Server, tmp_path: Path) -> Iterator[Setup]:
    yield from bundle_service(openbao, tmp_path)


def lost(instance: str) -> Envelope:
    payload = InstanceLost(instance, "pool-1", "wl-a", 8, "reclaimable", True, "reclaimed")
    return Envelope(str(uuid.uuid4()), "instance_lost", 1, 1, REGION, instance, None, None,
                    "test", payload)  # fmt: skip


def test_a_node_fetches_its_own_bundle_and_the_agent_verifies_it(setup: Setup) -> None:
    _identity, config = enrol(setup, "i-aaaa", "wl-a")
    certificate = x509.load_pem_x509_certificate(config.certificate.read_bytes())
    assert identity_of_certificate(certificate).uri == f"spiffe://spotcap/{REGION}/instance/i-aaaa"
    life_s = (certificate.not_valid_after_utc - certificate.not_valid_before_utc).total_seconds()
    assert life_s <= setup.authority.ttl_s + 60  # short-lived (an hour), not the CA's ten years

    client = NodeIdentityClient(config, REGION, "i-aaaa")
    assert client.fetch_bundle(config.path) is True
    assert config.path.read_bytes() == (setup.bundles / "wl-a.bundle.json").read_bytes()
    assert client.fetch_bundle(config.path) is False  # unchanged: not rewritten
    bundle = BundleStore(config, setup.tmp / "i-aaaa" / "state").load()
    assert bundle is not None and bundle.workload_id == "wl-a"


def test_no_client_certificate_is_refused_but_for_the_first_hop(setup: Setup) -> None:
    """TLS lets a client without a certificate through (the first hop has none yet); every
    other request is refused without one."""
    enrol(setup, "i-aaaa", "wl-a")
    context = ssl.create_default_context(cafile=str(setup.ca))
    context.check_hostname = False
    base = f"{setup.service.address}/v1/nodes/{REGION}/instance/i-aaaa"
    for method, path in (("GET", "/bundle"), ("POST", "/certificate")):
        request = urllib.request.Request(base + path, data=b"x" if method == "POST" else None)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, context=context, timeout=10).read()
        assert refused.value.code == 401, path
        assert "no client certificate" in refused.value.read().decode()


def test_another_nodes_certificate_is_refused(setup: Setup) -> None:
    enrol(setup, "i-aaaa", "wl-a")
    _, config_b = enrol(setup, "i-bbbb", "wl-b")
    as_b_for_a = NodeIdentityClient(config_b, REGION, "i-aaaa")
    with pytest.raises(FetchError, match=r"403.*fetches only its own bundle"):
        as_b_for_a.fetch_bundle(setup.tmp / "stolen.json")
    assert not (setup.tmp / "stolen.json").exists()
    with pytest.raises(FetchError, match="403"):
        as_b_for_a.renew()
    # B's own bundle is B's workload's, never A's.
    NodeIdentityClient(config_b, REGION, "i-bbbb").fetch_bundle(config_b.path)
    assert verify_bundle(config_b.path.read_bytes(), SIGNER.public_key()).workload_id == "wl-b"


def test_a_certificate_from_another_ca_is_refused_by_tls(setup: Setup) -> None:
    _, config = enrol(setup, "i-aaaa", "wl-a")
    rogue = NodeAuthority(setup.client, mount=f"pki-{uuid.uuid4().hex[:8]}")
    setup_pki(setup.client, mount=rogue._mount)
    forged = rogue.enrol(NodeIdentity(REGION, "i-aaaa"), "wl-a")
    config.certificate.write_text(forged.certificate_pem + "\n" + forged.ca_pem + "\n")
    config.key.write_text(forged.private_key_pem or "")
    with pytest.raises(FetchError, match="refused the connection"):
        NodeIdentityClient(config, REGION, "i-aaaa").fetch_bundle(config.path)


def test_a_lost_instance_is_revoked_and_its_agent_refused(setup: Setup) -> None:
    identity, config = enrol(setup, "i-aaaa", "wl-a")
    _, config_b = enrol(setup, "i-bbbb", "wl-b")
    client = NodeIdentityClient(config, REGION, "i-aaaa")
    client.fetch_bundle(config.path)
    serial = serial_text(x509.load_pem_x509_certificate(config.certificate.read_bytes()))

    launched = InstanceLaunched("i-aaaa", "pool-1", "wl-a", 8, "reclaimable", {})
    other = Envelope(str(uuid.uuid4()), "instance_launched", 1, 1, REGION, "i-aaaa", None, None,
                     "test", launched)  # fmt: skip
    assert revoke_on_loss(other, setup.authority) == []
    assert revoke_on_loss(lost("i-aaaa"), setup.authority) == [serial]
    assert setup.authority.is_revoked(serial)
    with pytest.raises(FetchError, match=rf"403.*{serial}.*revoked"):
        client.fetch_bundle(config.path)
    with pytest.raises(FetchError, match="403"):
        client.renew()
    with pytest.raises(NodeAuthorityError, match="retired"):
        setup.authority.renew(identity, "not even a CSR")
    assert revoke_on_loss(lost("i-aaaa"), setup.authority) == []  # idempotent
    # The other node is untouched.
    NodeIdentityClient(config_b, REGION, "i-bbbb").fetch_bundle(config_b.path)


def test_a_deleted_instance_is_revoked_too(setup: Setup) -> None:
    _, config = enrol(setup, "i-cccc", "wl-a")
    deleted = InstanceDeleted("i-cccc", "pool-1", "wl-a", "orchestrator", "actuator", "drained")
    envelope = Envelope(str(uuid.uuid4()), "instance_deleted", 1, 1, REGION, "i-cccc", None,
                        None, "test", deleted)  # fmt: skip
    assert len(revoke_on_loss(envelope, setup.authority)) == 1
    with pytest.raises(FetchError, match="revoked"):
        NodeIdentityClient(config, REGION, "i-cccc").fetch_bundle(config.path)


def test_renewal_before_expiry_gives_a_new_key_and_certificate(setup: Setup) -> None:
    identity, config = enrol(setup, "i-aaaa", "wl-a")
    client = NodeIdentityClient(config, REGION, "i-aaaa")
    start, end = client.expires_at_s()
    assert client.renew_if_due().renewed is False  # at the start of its life: not yet

    old_key, old_cert = config.key.read_bytes(), config.certificate.read_bytes()
    later = NodeIdentityClient(config, REGION, "i-aaaa", clock=lambda: start + (end - start) * 0.6)
    renewal = later.renew_if_due()
    assert renewal.renewed is True
    assert config.key.read_bytes() != old_key and config.certificate.read_bytes() != old_cert
    assert config.key.stat().st_mode & 0o077 == 0  # the node's key is its own
    new = x509.load_pem_x509_certificate(config.certificate.read_bytes())
    assert identity_of_certificate(new) == identity
    assert new.not_valid_after_utc.timestamp() >= end
    client.fetch_bundle(config.path)  # the new pair works over mutual TLS
    record = setup.authority.record(identity)
    assert record is not None and serial_text(new) in record.serials
    assert len(record.serials) == 2  # both unexpired certificates revoke on loss
    assert len(revoke_on_loss(lost("i-aaaa"), setup.authority)) == 2


def test_a_signing_request_cannot_choose_its_identity(setup: Setup) -> None:
    identity, _ = enrol(setup, "i-aaaa", "wl-a")
    _, other_key = generate_key_pem()  # any PEM but a CSR: refused by OpenBao, said plainly
    with pytest.raises(NodeAuthorityError, match="cannot sign the renewal"):
        setup.authority.renew(identity, other_key.decode())


def test_the_agent_fetches_its_bundle_over_mutual_tls_at_start(setup: Setup) -> None:
    _, bundle_config = enrol(setup, "i-dddd", "wl-b")
    cfg = agent_config(
        setup.tmp / "i-dddd",
        "i-dddd",
        bundle={
            "service_url": setup.service.address,
            "ca": str(setup.ca),
            "certificate": str(bundle_config.certificate),
            "key": str(bundle_config.key),
        },
    )
    assert not cfg.bundle.path.exists()  # nothing written at launch but the identity

    async def scenario() -> str | None:
        async with Agent(cfg, serve_metrics=False) as node:
            await wait_async(
                lambda: node.bundles.current is not None, 30.0, "the bundle from the service"
            )
            return node.bundles.current.workload_id if node.bundles.current else None

    assert asyncio.run(scenario()) == "wl-b"


def test_an_agent_config_refuses_a_plain_http_bundle_service(tmp_path: Path) -> None:
    with pytest.raises(AgentConfigError, match="https://"):
        agent_config(tmp_path, bundle={"service_url": "http://127.0.0.1:1"})


def test_the_actuator_revokes_the_nodes_it_deletes(setup: Setup, tmp_path: Path) -> None:
    region = Region(tmp_path / "region")
    placed = region.placement()
    revoker = Revoker(setup.authority)
    options = ActuatorOptions(snapshot_every_s=0.0, poll_s=0.05, follower=revoker)

    def settle() -> None:
        with ActuatorService(region.log, CODEC, region.provider, region.state_dir,
                             orchestrator_id=ME, options=options) as service:  # fmt: skip
            for _ in range(20):
                service.step()
                if service.caught_up and not service.book.open_orders:
                    return
        raise AssertionError("orders still open")

    settle()
    mine = sorted(i.instance_id for i in region.provider.list_by_tag(DECISION_TAG, placed.event_id))
    where = region.provider.region
    serials = {i: setup.authority.enrol(NodeIdentity(where, i), "wl-a").serial for i in mine}
    region.returned(placed, (mine[0], mine[1]))
    settle()  # the deletes go out, and their instance_deleted into the log ...
    settle()  # ... which the actuator reads back, as it follows the log
    assert revoker.pending == {}
    assert sorted(revoker.revoked) == sorted([serials[mine[0]], serials[mine[1]]])
    assert all(setup.authority.is_revoked(serials[i]) for i in mine[:2])
    assert not any(setup.authority.is_revoked(serials[i]) for i in mine[2:])


def test_a_revocation_openbao_refused_is_tried_again(setup: Setup, openbao: servers.Server) -> None:
    identity, _ = enrol(setup, "i-ffff", "wl-a")
    unreachable = NodeAuthority(hvac.Client(url="http://127.0.0.1:9", timeout=2),
                                mount=setup.authority._mount)  # fmt: skip
    now = [1000.0]
    backoff = Backoff(clock=lambda: now[0])
    revoker = Revoker(unreachable, backoff=backoff)
    revoker.observe(lost("i-ffff"))
    assert revoker.drain() == 1 and revoker.revoked == []  # OpenBao unreachable: still pending
    assert backoff.failures == 1 and backoff.wait_s == RETRY_FIRST_S
    revoker._authority = setup.authority  # OpenBao is back
    assert revoker.drain() == 1 and revoker.revoked == []  # inside the backoff: not asked
    now[0] += RETRY_FIRST_S
    assert revoker.drain() == 0 and len(revoker.revoked) == 1
    assert backoff.failures == 1 and backoff.failures_in_a_row == 0
    record = setup.authority.record(identity)
    assert record is not None and record.retired


def test_the_agent_refuses_a_service_whose_certificate_names_another_host(setup: Setup) -> None:
    _, config = enrol(setup, "i-gggg", "wl-a")
    port = setup.service.address.rsplit(":", 1)[1]
    elsewhere = replace(config, service_url=f"https://localhost:{port}")  # the cert names the IP
    with pytest.raises(FetchError, match="refused the connection"):
        NodeIdentityClient(elsewhere, REGION, "i-gggg").fetch_bundle(config.path)
    assert not config.path.exists()


def test_the_agents_round_renews_when_due_and_says_a_failure_without_raising(
    setup: Setup,
) -> None:
    identity, config = enrol(setup, "i-hhhh", "wl-b")
    start, end = NodeIdentityClient(config, REGION, "i-hhhh").expires_at_s()
    now = [end - 60]  # a minute before the first certificate ends: long past half its life
    due = NodeIdentityClient(config, REGION, "i-hhhh", clock=lambda: now[0])
    assert identity_round(due, config.path) == "certificate renewed, bundle fetched"
    now[0] = start + 1  # at the start of the new certificate's life: not due
    assert identity_round(due, config.path) == "bundle unchanged"
    setup.authority.revoke(identity)
    said = identity_round(due, config.path)
    assert said.startswith("failed: the bundle service answered 403") and "revoked" in said
    assert verify_bundle(config.path.read_bytes(), SIGNER.public_key()).workload_id == "wl-b"
