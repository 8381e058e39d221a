"""`spotcap run actuator` under a capacity authority (ADR-29), as the command runs: the
actuator's provider credentials are the project's short-lived ones, read through OpenBao with a
token that may read that one path, renewed before they expire; the provider file's own
credentials are useless here (a wrong secret), so every call that works went out with
OpenBao's. An actuator told a project OpenBao holds nothing for refuses every order as an
event. Against a real OpenBao and the simulated region served as a cloud."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import hvac
import pytest
import yaml
from cryptography import x509

from agent.config import BundleConfig
from agent.identity import FetchError, NodeIdentityClient
from contracts.bundles import sign_bundle
from contracts.output import bundle_file_name
from infra import servers
from provider.authority import CredentialIssuer, credential_path, setup_authority_store
from provider.nodes import NodeIdentity, identity_of_certificate
from schemas.events import ActuationRefused, InstanceDeleted, InstanceLaunched, RateCard
from sim.cloud import ServedCloud
from sim.cloud.serve import write_client_files
from tests.actuator_support import WORKLOAD, Decisions
from tests.cloud_support import CATALOGUE, OWNER, POOL, REGION, clock_of, connect, served_clouds
from tests.identity_support import SIGNER, Setup, bundle_service
from tests.test_contracts import BASE, compile_one

SPOTCAP = str(Path(sys.executable).with_name("spotcap"))
PROJECT = "spotcap"
PATIENCE_S = 300.0
P = TypeVar("P", InstanceLaunched, InstanceDeleted, ActuationRefused, RateCard)


@pytest.fixture
def clouds() -> Iterator[Callable[..., ServedCloud]]:
    yield from served_clouds(speed=1.0)  # sim time at wall speed: no order grows stale


class Authority:
    """A KV mount of its own on the suite's OpenBao, the issuer, and a reader's token."""

    def __init__(self, openbao: servers.Server, cloud: ServedCloud, project: str) -> None:
        self.address = openbao.address
        self.client = hvac.Client(url=openbao.address, token=servers.openbao_token(openbao))
        self.mount = f"authority-{uuid.uuid4().hex[:8]}"
        setup_authority_store(self.client, self.mount)
        self.cloud = cloud
        path = f"{self.mount}/{credential_path(cloud.access.region, project)}"
        policy = f"reader-{self.mount}"
        self.client.sys.create_or_update_policy(
            name=policy, policy=f'path "{path}" {{ capabilities = ["read"] }}'
        )
        token = self.client.auth.token.create(policies=[policy], ttl="1h")
        self.reader_token: str = token["auth"]["client_token"]

    def issue(self, ttl_s: int) -> str:
        access = self.cloud.access
        conn = connect(access, application_credential=False)
        issuer = CredentialIssuer(
            self.client, conn, access.region, PROJECT,
            auth_url=access.auth_url, mount=self.mount, ttl_s=ttl_s,
        )  # fmt: skip
        return issuer.issue()

    def env(self, project: str) -> dict[str, str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTCAP_", "BAO_"))}
        return {
            **clean,
            "SPOTCAP_AUTHORITY_PROJECT": project,
            "SPOTCAP_AUTHORITY_MOUNT": self.mount,
            "BAO_ADDR": self.address,
            "BAO_TOKEN": self.reader_token,
        }


class Actuator:
    """`spotcap run actuator` on the region's home, until SIGTERM."""

    def __init__(self, root: Path, provider_file: Path, env: dict[str, str]) -> None:
        self.out = root / "actuator.out"
        self.err = root / "actuator.err"
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                [SPOTCAP, "--home", str(root / "home"), "--region", REGION, "run", "actuator",
                 "--provider", str(provider_file), "--orchestrator-id", OWNER],
                stdout=out, stderr=err, env=env,
            )  # fmt: skip

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        said = self.out.read_text() + self.err.read_text()
        assert rc == 0, f"the actuator exited {rc}: {said[-3000:]}"
        return said


def wait_for(decisions: Decisions, actuator: Actuator, kind: type[P], count: int) -> list[P]:
    """The first `count` payloads of `kind` on the log (bounded: the actuator must live)."""
    deadline = time.monotonic() + PATIENCE_S
    while True:
        found = [e.payload for e in decisions.events() if isinstance(e.payload, kind)]
        if len(found) >= count:
            return found
        assert actuator.proc.poll() is None, actuator.err.read_text()[-3000:]
        assert time.monotonic() < deadline, f"{len(found)} of {count} {kind.__name__}"
        time.sleep(0.3)


def useless_clouds_yaml(client: Path) -> None:
    """The provider file's clouds.yaml with wrong secrets: nothing works with them."""
    path = client / "clouds.yaml"
    data = yaml.safe_load(path.read_text())
    for entry in data["clouds"].values():
        auth = entry["auth"]
        for key in ("application_credential_secret", "password"):
            if key in auth:
                auth[key] = "not-the-secret"
    path.write_text(yaml.safe_dump(data))


def test_the_actuator_command_acts_with_openbaos_credential_and_renews_it(
    openbao: servers.Server, clouds: Callable[..., ServedCloud], tmp_path: Path
) -> None:
    cloud = clouds()
    bao = Authority(openbao, cloud, PROJECT)
    provider_file = write_client_files(cloud, tmp_path / "client")
    useless_clouds_yaml(tmp_path / "client")
    first = bao.issue(ttl_s=30)  # OpenBao's lease 30 s: the actuator reads again after 15 s
    decisions = Decisions(tmp_path / "home" / "log", REGION, OWNER, clock_of(cloud.access).now_us)
    decisions.pools(CATALOGUE)
    placed = decisions.placement((POOL,), vcpu_each=16)  # two instances
    actuator = Actuator(tmp_path, provider_file, bao.env(PROJECT))
    try:
        launched = wait_for(decisions, actuator, InstanceLaunched, 2)
        # The issuer rotates; the first credential expires (Keystone refuses it from then on).
        second = bao.issue(ttl_s=3600)
        expires = time.time() + 31
        while time.time() < expires:  # bounded: the first credential's own 30 s
            time.sleep(0.5)
        ids = tuple(sorted(e.instance_id for e in launched))
        decisions.returned(placed, ids)
        deleted = wait_for(decisions, actuator, InstanceDeleted, 2)
    finally:
        said = actuator.stop()
    assert f"project {PROJECT} from OpenBao" in said
    principals = {e.principal for e in deleted}
    assert principals == {f"appcred/{second}"}, f"first was {first}"
    assert not [e for e in decisions.events() if e.event_type in ("launch_failed",)]
    assert bao.reader_token not in said and "not-the-secret" not in said
    # The reader's token reads that one path and nothing else.
    reader = hvac.Client(url=bao.address, token=bao.reader_token)
    with pytest.raises(hvac.exceptions.Forbidden):
        reader.secrets.kv.v1.read_secret(
            path=credential_path(REGION, "batch"), mount_point=bao.mount
        )


def test_reads_go_out_with_openbaos_credential_and_never_with_the_files(
    openbao: servers.Server, clouds: Callable[..., ServedCloud], tmp_path: Path
) -> None:
    """The actuator starts before the issuer has published anything: its reads of the
    provider's feeds fail (saying so) and none goes out with the provider file's (wrong)
    secret; once OpenBao holds the project's credential, the reads go out with it and the
    feeds' rate cards reach the log."""
    cloud = clouds()
    bao = Authority(openbao, cloud, PROJECT)
    provider_file = write_client_files(cloud, tmp_path / "client")
    useless_clouds_yaml(tmp_path / "client")
    decisions = Decisions(tmp_path / "home" / "log", REGION, OWNER, clock_of(cloud.access).now_us)
    decisions.pools(CATALOGUE)
    actuator = Actuator(tmp_path, provider_file, bao.env(PROJECT))
    try:
        deadline = time.monotonic() + PATIENCE_S
        # Until the feeds' read fails: saying why, or (with the file's secret) refused by Keystone.
        while (
            f"no credential of project {PROJECT}" not in actuator.err.read_text()
            and cloud.identity.refused == 0
        ):
            assert actuator.proc.poll() is None, actuator.err.read_text()[-3000:]
            assert time.monotonic() < deadline, "the actuator never read the feeds"
            time.sleep(0.3)
        assert not [e for e in decisions.events() if isinstance(e.payload, RateCard)]
        assert cloud.identity.refused == 0  # nothing was sent with the file's credentials
        before = cloud.identity.issued
        bao.issue(ttl_s=3600)
        cards = wait_for(decisions, actuator, RateCard, 1)
    finally:
        said = actuator.stop()
    assert cards and cloud.identity.refused == 0
    assert cloud.identity.issued > before  # a token for OpenBao's credential, not the file's
    assert "not-the-secret" not in said and bao.reader_token not in said


def test_the_actuator_command_refuses_orders_in_a_project_without_authority(
    openbao: servers.Server, clouds: Callable[..., ServedCloud], tmp_path: Path
) -> None:
    cloud = clouds()
    bao = Authority(openbao, cloud, "batch")
    bao.issue(ttl_s=3600)  # a credential of project spotcap: none of batch
    provider_file = write_client_files(cloud, tmp_path / "client")  # valid, and not enough
    decisions = Decisions(tmp_path / "home" / "log", REGION, OWNER, clock_of(cloud.access).now_us)
    decisions.pools(CATALOGUE)
    decisions.placement((POOL,), vcpu_each=16)
    actuator = Actuator(tmp_path, provider_file, bao.env("batch"))
    try:
        refused = wait_for(decisions, actuator, ActuationRefused, 2)
    finally:
        actuator.stop()
    assert {e.rule for e in refused} == {"no_authority"}
    assert all("project batch" in e.reason for e in refused)
    assert not [e for e in decisions.events() if isinstance(e.payload, InstanceLaunched)]
    assert not list(connect(cloud.access).compute.servers())


def test_an_authority_without_openbao_says_what_to_set(
    clouds: Callable[..., ServedCloud], tmp_path: Path
) -> None:
    cloud = clouds()
    provider_file = write_client_files(cloud, tmp_path / "client")
    Decisions(tmp_path / "home" / "log", REGION, OWNER, clock_of(cloud.access).now_us)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTCAP_", "BAO_", "VAULT_"))}
    done = subprocess.run(
        [SPOTCAP, "--home", str(tmp_path / "home"), "--region", REGION, "run", "actuator",
         "--provider", str(provider_file), "--orchestrator-id", OWNER],
        env={**env, "SPOTCAP_AUTHORITY_PROJECT": PROJECT}, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "set BAO_ADDR (or VAULT_ADDR) and BAO_TOKEN" in done.stderr, done.stderr


@pytest.fixture
def setup(openbao: servers.Server, tmp_path: Path) -> Iterator[Setup]:
    (tmp_path / "nodes").mkdir()
    yield from bundle_service(openbao, tmp_path / "nodes")


def test_the_actuator_command_revokes_the_nodes_it_deletes(
    openbao: servers.Server, clouds: Callable[..., ServedCloud], setup: Setup, tmp_path: Path
) -> None:
    cloud = clouds()
    provider_file = write_client_files(cloud, tmp_path / "client")
    decisions = Decisions(tmp_path / "home" / "log", REGION, OWNER, clock_of(cloud.access).now_us)
    decisions.pools(CATALOGUE)
    placed = decisions.placement((POOL,), vcpu_each=16)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTCAP_", "BAO_"))}
    env |= {"SPOTCAP_NODES_PKI_MOUNT": setup.mount, "BAO_ADDR": openbao.address,
            "BAO_TOKEN": servers.openbao_token(openbao)}  # fmt: skip
    actuator = Actuator(tmp_path, provider_file, env)
    try:
        launched = wait_for(decisions, actuator, InstanceLaunched, 2)
        ids = sorted(e.instance_id for e in launched)
        serials = [setup.authority.enrol(NodeIdentity(REGION, i), "wl-a").serial for i in ids]
        decisions.returned(placed, (ids[0],))
        wait_for(decisions, actuator, InstanceDeleted, 1)
        deadline = time.monotonic() + PATIENCE_S
        while not setup.authority.is_revoked(serials[0]):  # once the actuator reads it back
            assert time.monotonic() < deadline and actuator.proc.poll() is None
            time.sleep(0.3)
    finally:
        actuator.stop()
    assert not setup.authority.is_revoked(serials[1])
    journal = tmp_path / "home" / "actuator" / REGION / "revocations"
    assert f"revoked {REGION} {ids[0]}" in journal.read_text().splitlines()


def test_every_node_the_actuator_launches_is_enrolled_and_revoked_at_termination(
    openbao: servers.Server, clouds: Callable[..., ServedCloud], setup: Setup, tmp_path: Path
) -> None:
    """With SPOTCAP_NODES_DIR the actuator enrols each instance it launched: its single-use
    enrolment token (0600) and the CA in the node's boot folder, with which the node makes its
    own key and enrols, then fetches its own bundle over mutual TLS and renews its
    certificate; the instance's deletion revokes it."""
    cloud = clouds()
    provider_file = write_client_files(cloud, tmp_path / "client")
    decisions = Decisions(tmp_path / "home" / "log", REGION, OWNER, clock_of(cloud.access).now_us)
    decisions.pools(CATALOGUE)
    placed = decisions.placement((POOL,), vcpu_each=16)
    base = compile_one(BASE).accepted[0].bundle
    signed = sign_bundle(base.model_copy(update={"workload_id": WORKLOAD}), SIGNER)
    (setup.bundles / bundle_file_name(WORKLOAD)).write_bytes(signed)
    boot = tmp_path / "boot"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTCAP_", "BAO_"))}
    env |= {"SPOTCAP_NODES_PKI_MOUNT": setup.mount, "SPOTCAP_NODES_DIR": str(boot),
            "BAO_ADDR": openbao.address, "BAO_TOKEN": servers.openbao_token(openbao)}  # fmt: skip
    actuator = Actuator(tmp_path, provider_file, env)
    try:
        launched = wait_for(decisions, actuator, InstanceLaunched, 2)
        ids = sorted(e.instance_id for e in launched)
        deadline = time.monotonic() + PATIENCE_S
        while not all((boot / i / "node.token").exists() for i in ids):
            assert actuator.proc.poll() is None, actuator.err.read_text()[-3000:]
            assert time.monotonic() < deadline, sorted(p.name for p in boot.glob("*"))
            time.sleep(0.3)
        clients = {i: booted_node(boot / i, setup, i) for i in ids}
        first_key = (boot / ids[1] / "node.key").read_bytes()
        assert clients[ids[1]].renew().renewed  # the agent renews what the boot folder holds
        assert (boot / ids[1] / "node.key").read_bytes() != first_key
        decisions.returned(placed, (ids[0],))
        wait_for(decisions, actuator, InstanceDeleted, 1)
        refused = refusal_once_revoked(clients[ids[0]], boot / ids[0], actuator)
        clients[ids[1]].fetch_bundle(boot / ids[1] / "again.json")  # the other still serves
    finally:
        said = actuator.stop()
    assert "403" in refused and "revoked" in refused, refused
    assert servers.openbao_token(openbao) not in said
    for node_file in boot.rglob("*"):  # a node's files hold no token of the control plane
        if node_file.is_file():
            assert servers.openbao_token(openbao).encode() not in node_file.read_bytes()


def booted_node(node: Path, setup: Setup, instance: str) -> NodeIdentityClient:
    """The agent of a node booted with what the actuator delivered to `node` (its token and
    the CA, no key): it makes its key, enrols with the token, its certificate names it, and
    it fetches its own bundle over mutual TLS."""
    assert sorted(p.name for p in node.iterdir()) == ["ca.pem", "node.token"]
    assert (node / "node.token").stat().st_mode & 0o777 == 0o600
    config = BundleConfig(
        path=node / "bundle.json", service_url=setup.service.address, ca=node / "ca.pem",
        certificate=node / "node.pem", key=node / "node.key", token=node / "node.token",
    )  # fmt: skip
    client = NodeIdentityClient(config, REGION, instance)
    assert client.enrol_if_needed()
    assert (node / "node.key").stat().st_mode & 0o777 == 0o600
    certificate = x509.load_pem_x509_certificate((node / "node.pem").read_bytes())
    assert identity_of_certificate(certificate) == NodeIdentity(REGION, instance)
    assert client.fetch_bundle(config.path)
    return client


def refusal_once_revoked(client: NodeIdentityClient, node: Path, actuator: Actuator) -> str:
    """What the bundle service says to `client` once its node is revoked (bounded wait)."""
    deadline = time.monotonic() + PATIENCE_S
    while True:
        try:
            client.fetch_bundle(node / "again.json")
        except FetchError as error:
            return str(error)
        assert time.monotonic() < deadline and actuator.proc.poll() is None
        time.sleep(0.3)
