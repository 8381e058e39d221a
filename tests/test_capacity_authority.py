"""Capacity authority (ADR-29): the actuator's provider credentials are one-hour application
credentials of one OpenStack project, made by the issuer in the served Keystone, read through
hvac from a real OpenBao, renewed before their lease runs out, refused once expired; an order
in a project without authority is refused as an event; no credential reaches a node's files."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hvac
import pytest
from keystoneauth1.exceptions import Unauthorized
from openstack.connection import Connection

from agent.identity import NodeIdentityClient
from infra import servers
from provider.actuator import ActuatorOptions, ActuatorService
from provider.authority import (
    CredentialIssuer,
    NoAuthorityError,
    ProjectAuthority,
    setup_authority_store,
)
from schemas.events import ActuationRefused, InstanceLaunched
from sim.cloud import ServedCloud
from tests import cloud_support
from tests.actuator_support import CODEC
from tests.identity_support import Setup, bundle_service, enrol
from tests.test_actuator import ME, Region

PROJECT = "spotcap"


@pytest.fixture
def clouds() -> Iterator[Any]:
    yield from cloud_support.served_clouds()


@dataclass
class Authority:
    client: hvac.Client
    mount: str
    cloud: ServedCloud

    def issuer(self, ttl_s: int = 3600, clock: Any = time.time) -> CredentialIssuer:
        access = self.cloud.access
        conn = cloud_support.connect(access, application_credential=False)
        return CredentialIssuer(
            self.client, conn, access.region, PROJECT,
            auth_url=access.auth_url, mount=self.mount, ttl_s=ttl_s, clock=clock,
        )  # fmt: skip

    def authority(self, project: str = PROJECT, **options: Any) -> ProjectAuthority:
        return ProjectAuthority(
            self.client, self.cloud.access.region, project, mount=self.mount, **options
        )


@pytest.fixture
def bao(openbao: servers.Server, clouds: Any) -> Authority:
    client = hvac.Client(url=openbao.address, token=servers.openbao_token(openbao))
    mount = f"authority-{uuid.uuid4().hex[:8]}"
    setup_authority_store(client, mount)
    return Authority(client, mount, clouds())


def servers_seen(conn: Connection) -> int:
    return len(list(conn.compute.servers()))


def connection_of(bao: Authority, authority: ProjectAuthority) -> Connection:
    credential = authority.credential()
    return Connection(
        **credential.connection_options(bao.cloud.access.region), api_timeout=30, connect_retries=0
    )


def test_the_actuator_reads_a_one_hour_project_credential_through_openbao(bao: Authority) -> None:
    issued = bao.issuer().issue()
    authority = bao.authority()
    credential = authority.credential()
    assert credential.application_credential_id == issued
    assert credential.lease_s == 3600  # OpenBao's lease: read again within the hour
    assert credential.expires_at_s - time.time() <= 3600
    assert credential.application_credential_secret not in repr(credential)
    assert servers_seen(connection_of(bao, authority)) == 0  # the served Keystone takes it
    assert authority.refusal("launch") is None


def test_renewal_reads_the_issuers_new_credential_before_the_lease_runs_out(
    bao: Authority,
) -> None:
    issuer = bao.issuer()
    first = issuer.issue()
    now = [time.time()]
    authority = bao.authority(clock=lambda: now[0])
    assert authority.credential().application_credential_id == first
    second = issuer.issue()  # the issuer rotates at half the hour
    now[0] += 1000  # before half the lease: the held credential stays
    assert authority.credential().application_credential_id == first
    assert authority.reads == 1
    now[0] += 900  # past half the lease (1,900 s of 3,600): read again
    renewed = authority.credential()
    assert renewed.application_credential_id == second and authority.reads == 2
    assert servers_seen(connection_of(bao, authority)) == 0


def test_an_expired_credential_is_refused_by_keystone_and_by_the_authority(
    bao: Authority,
) -> None:
    issuer = bao.issuer(ttl_s=2)
    issuer.issue()
    authority = bao.authority()
    held = authority.credential()
    conn = connection_of(bao, authority)
    deadline = time.monotonic() + 60
    while time.time() < held.expires_at_s + 1:  # bounded: the credential's own two seconds
        assert time.monotonic() < deadline
        time.sleep(0.2)
    stale = Connection(
        **held.connection_options(bao.cloud.access.region), api_timeout=30, connect_retries=0
    )
    with pytest.raises(Unauthorized):
        servers_seen(stale)  # Keystone refuses the expired application credential
    reason = authority.refusal("launch")
    assert reason is not None and "expired" in reason and PROJECT in reason
    assert held.application_credential_secret not in reason
    # The issuer publishes a new one: the authority reads it and the session is re-bound.
    bao.issuer().issue()
    session_authority = bao.authority(session=conn.session)
    assert session_authority.refusal("launch") is None
    assert servers_seen(conn) == 0


def test_a_project_without_a_credential_has_no_authority(bao: Authority) -> None:
    bao.issuer().issue()
    with pytest.raises(NoAuthorityError, match="no credential for project batch"):
        bao.authority("batch").credential()


def test_an_order_in_a_project_without_authority_is_refused_as_an_event(
    bao: Authority, tmp_path: Path
) -> None:
    region = Region(tmp_path)
    region.placement()
    nowhere = bao.authority("batch")
    with ActuatorService(
        region.log, CODEC, region.provider, region.state_dir,
        orchestrator_id=ME, options=ActuatorOptions(snapshot_every_s=0.0, poll_s=0.05,
                                                     authority=nowhere),
    ) as service:  # fmt: skip
        for _ in range(20):
            service.step()
            if service.caught_up and not service.book.open_orders:
                break
        assert service.counts.launched == 0
        assert service.counts.by_rule == {"no_authority": 4}
    refused = [e.payload for e in region.events() if isinstance(e.payload, ActuationRefused)]
    assert len(refused) == 4
    assert {r.rule for r in refused} == {"no_authority"}
    assert all("project batch" in r.reason for r in refused)
    assert not [e for e in region.events() if isinstance(e.payload, InstanceLaunched)]


@pytest.fixture
def setup(openbao: servers.Server, tmp_path: Path) -> Iterator[Setup]:
    yield from bundle_service(openbao, tmp_path)


def test_no_provider_credential_reaches_a_nodes_files(bao: Authority, setup: Setup) -> None:
    bao.issuer().issue()
    credential = bao.authority().credential()
    _, config = enrol(setup, "i-eeee", "wl-a")
    NodeIdentityClient(config, "eu-west-1", "i-eeee").fetch_bundle(config.path)
    secrets = {
        credential.application_credential_secret,
        credential.application_credential_id,
        bao.cloud.access.credentials.password,
        bao.cloud.access.credentials.application_credential_secret,
        bao.client.token,
    }
    node_files = [p for p in (setup.tmp / "i-eeee").rglob("*") if p.is_file()]
    assert {p.name for p in node_files} >= {"node.pem", "node.key", "bundle.json", "bundle.pub"}
    for path in [*node_files, setup.ca]:
        data = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, f"{path.name} holds a provider secret"
