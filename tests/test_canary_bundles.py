"""The bundle service serves each node the bundle its pool is on (ADR-32), over the real mutual
TLS path (a real OpenBao PKI engine, the agent's own client): while a canary runs, a canary
pool's node gets the new bundle and the others the bundle in force; after a rollback the canary
node gets the bundle in force again; after a promotion every node gets the new one. The bundles
come from the compiler's copies by SHA-256, which `write_rendered` keeps."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.identity import FetchError, NodeIdentityClient
from contracts.bundles import bundle_sha256, sign_bundle, verify_bundle
from contracts.output import bundle_by_sha, bundle_file_name, write_rendered
from infra import servers
from provider.nodes import Releases
from schemas.events import (
    BundleCanaried,
    BundlePromoted,
    BundleRolledBack,
    Envelope,
    InstanceLaunched,
    Payload,
)
from tests.identity_support import REGION, SIGNER, Setup, bundle_service, enrol
from tests.test_canary import W, contract
from tests.test_contracts import BASE, compile_one

CANARY_POOL, STABLE_POOL = "c3.8.hall-a.reclaimable", "c3.8.hall-b.reclaimable"
BASE_BUNDLE = compile_one(BASE).accepted[0].bundle
VERSIONS = {n: BASE_BUNDLE.model_copy(update={"workload_id": W, "contract_version": n})
            for n in (1, 2, 3)}  # fmt: skip
SHA = {n: bundle_sha256(b) for n, b in VERSIONS.items()}


def fact(payload: Payload) -> Envelope:
    key = str(getattr(payload, payload.KEY))
    return Envelope(str(uuid.uuid4()), payload.EVENT_TYPE, 1, 1, REGION, key, None, None,
                    "test", payload)  # fmt: skip


@pytest.fixture
def releases() -> Releases:
    return Releases()


@pytest.fixture
def setup(openbao: servers.Server, tmp_path: Path, releases: Releases) -> Iterator[Setup]:
    yield from bundle_service(openbao, tmp_path, releases=releases)


def compile_version(setup: Setup, n: int) -> None:
    """What `spotcap contracts compile` writes for version `n` of the workload."""
    write_rendered(setup.bundles, {bundle_file_name(W): sign_bundle(VERSIONS[n], SIGNER)})


def version_of(client: NodeIdentityClient, dest: Path) -> int:
    client.fetch_bundle(dest)
    return verify_bundle(dest.read_bytes(), SIGNER.public_key()).contract_version


def canaried(n: int, previous: int) -> BundleCanaried:
    return BundleCanaried(W, n, SHA[n], SHA[previous], (CANARY_POOL,), 0.1, 21600, 5000, 0, 0,
                          10, 1)  # fmt: skip


def test_each_node_gets_the_bundle_its_pool_is_on_through_mutual_tls(
    setup: Setup, releases: Releases
) -> None:
    compile_version(setup, 1)
    releases.observe(contract(1, SHA[1], 0))
    nodes = {}
    for instance, pool in (("i-canary", CANARY_POOL), ("i-stable", STABLE_POOL)):
        releases.observe(fact(InstanceLaunched(instance, pool, W, 8, "reclaimable", {})))
        _, config = enrol(setup, instance, W)
        nodes[instance] = (NodeIdentityClient(config, REGION, instance), config.path)
    assert {i: version_of(*n) for i, n in nodes.items()} == {"i-canary": 1, "i-stable": 1}

    # Version 2 compiled and published: until the deciders canary it, every node keeps 1.
    compile_version(setup, 2)
    releases.observe(contract(2, SHA[2], 10))
    assert {i: version_of(*n) for i, n in nodes.items()} == {"i-canary": 1, "i-stable": 1}
    releases.observe(fact(canaried(2, 1)))
    assert {i: version_of(*n) for i, n in nodes.items()} == {"i-canary": 2, "i-stable": 1}
    back = BundleRolledBack(W, 2, SHA[2], SHA[1], "notice_to_drain_p99", "slow", 1, 8000, ())
    releases.observe(fact(back))
    assert {i: version_of(*n) for i, n in nodes.items()} == {"i-canary": 1, "i-stable": 1}

    # Version 3: canaried, then promoted: every node gets it.
    compile_version(setup, 3)
    releases.observe(contract(3, SHA[3], 20))
    releases.observe(fact(canaried(3, 1)))
    assert {i: version_of(*n) for i, n in nodes.items()} == {"i-canary": 3, "i-stable": 1}
    promoted = BundlePromoted(W, 3, SHA[3], 21600, 1, 1000, 0, 0, 0, "held")
    releases.observe(fact(promoted))
    assert {i: version_of(*n) for i, n in nodes.items()} == {"i-canary": 3, "i-stable": 3}
    assert bundle_by_sha(setup.bundles, SHA[1]).exists()  # every version kept by its SHA


def test_a_workload_the_events_say_nothing_of_gets_the_current_file_and_a_lost_copy_is_named(
    setup: Setup, releases: Releases
) -> None:
    _, config_b = enrol(setup, "i-bbbb", "wl-b")
    client_b = NodeIdentityClient(config_b, REGION, "i-bbbb")
    assert client_b.fetch_bundle(config_b.path)
    assert config_b.path.read_bytes() == (setup.bundles / "wl-b.bundle.json").read_bytes()

    # A release whose bundle the folder does not hold (compiled before copies were kept).
    compile_version(setup, 1)
    releases.observe(contract(1, SHA[1], 0))
    releases.observe(fact(InstanceLaunched("i-canary", CANARY_POOL, W, 8, "reclaimable", {})))
    releases.observe(contract(2, SHA[2], 10))
    releases.observe(fact(canaried(2, 1)))
    _, config = enrol(setup, "i-canary", W)
    with pytest.raises(FetchError, match=r"404.*not in .*sha256.*compile its contract version"):
        NodeIdentityClient(config, REGION, "i-canary").fetch_bundle(config.path)
