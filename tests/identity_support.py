"""The bundle service on a fresh PKI mount of the session's OpenBao, and nodes enrolled on it
as the launch path would: for tests/test_node_identity.py and tests/test_capacity_authority.py."""

from __future__ import annotations

import uuid
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path

import hvac
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agent.config import BundleConfig
from agent.identity import NodeIdentityClient
from contracts.bundles import sign_bundle
from contracts.output import bundle_file_name
from contracts.signing import FileSigner
from infra import servers
from provider.nodes import (
    BundleService,
    NodeAuthority,
    NodeIdentity,
    setup_pki,
    start_bundle_service,
)
from provider.nodes.releases import Releases
from provider.nodes.service import RunningService
from tests.test_contracts import BASE, compile_one

REGION = "eu-west-1"
SIGNER = FileSigner(Ed25519PrivateKey.from_private_bytes(bytes(range(32))))


@dataclass
class Setup:
    client: hvac.Client
    authority: NodeAuthority
    service: RunningService
    bundles: Path
    ca: Path
    tmp: Path
    mount: str
    """The nodes' PKI mount."""


def bundle_service(
    openbao: servers.Server,
    tmp_path: Path,
    client: hvac.Client | None = None,
    releases: Releases | None = None,
) -> Generator[Setup]:
    """Body of a fixture: the service, its authority (through `client`, default a root client
    of `openbao`) and two workloads' signed bundles; with `releases`, serving each node the
    bundle its pool is on (ADR-32)."""
    if client is None:
        client = hvac.Client(url=openbao.address, token=servers.openbao_token(openbao))
    mount = f"pki-{uuid.uuid4().hex[:8]}"
    ca_pem = setup_pki(client, mount=mount)
    authority = NodeAuthority(client, mount=mount)
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    base = compile_one(BASE).accepted[0].bundle
    for workload in ("wl-a", "wl-b"):
        signed = sign_bundle(base.model_copy(update={"workload_id": workload}), SIGNER)
        (bundles / bundle_file_name(workload)).write_bytes(signed)
    ca = tmp_path / "ca.pem"
    ca.write_text(ca_pem)
    service = start_bundle_service(
        BundleService(authority, bundles, releases), state_dir=tmp_path / "service"
    )
    try:
        yield Setup(client, authority, service, bundles, ca, tmp_path, mount)
    finally:
        service.stop()


def delivered(setup: Setup, instance: str, workload: str) -> tuple[NodeIdentity, BundleConfig]:
    """What the launch path puts on a node: its single-use enrolment token (no key, no
    certificate) and its bundle's key; the config its agent boots with."""
    identity = NodeIdentity(REGION, instance)
    token = setup.authority.enrolment_token(identity, workload)
    node = setup.tmp / instance
    node.mkdir()
    (node / "node.token").write_text(token + "\n")
    (node / "bundle.pub").write_bytes(_public_pem())
    return identity, config_of(setup, node)


def config_of(setup: Setup, node: Path) -> BundleConfig:
    """The agent's ``[bundle]`` section for a node whose boot folder is `node`."""
    return BundleConfig(
        path=node / "bundle.json",
        public_key=node / "bundle.pub",
        service_url=setup.service.address,
        ca=setup.ca,
        certificate=node / "node.pem",
        key=node / "node.key",
        token=node / "node.token",
    )


def enrol(setup: Setup, instance: str, workload: str) -> tuple[NodeIdentity, BundleConfig]:
    """A node delivered its token and booted: its agent made its key and enrolled with it."""
    identity, config = delivered(setup, instance, workload)
    assert NodeIdentityClient(config, REGION, instance).enrol_if_needed()
    return identity, config


def _public_pem() -> bytes:
    return SIGNER.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
