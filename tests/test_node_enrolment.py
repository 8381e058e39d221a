"""Enrolment at boot (ADR-31), the follower's own cases against the session's OpenBao: a node
launched and deleted in the same read is never enrolled; a node already delivered (the log read
again after a restart) is not enrolled twice; a node whose record is retired is not brought
back; SPOTCAP_NODES_DIR without the PKI engine is refused with a sentence."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from infra import servers
from provider.nodes import Enroller, NodeAuthorityError, NodeIdentity, nodes_from_env
from schemas.events import Envelope, InstanceDeleted, InstanceLaunched
from tests.decider_events import Events
from tests.identity_support import REGION, Setup, bundle_service


@pytest.fixture
def setup(openbao: servers.Server, tmp_path: Path) -> Iterator[Setup]:
    (tmp_path / "nodes").mkdir()
    yield from bundle_service(openbao, tmp_path / "nodes")


def launched(events: Events, instance: str) -> Envelope:
    return events.env(
        InstanceLaunched(instance, "c7.16.hall-a.reclaimable", "wl-a", 16, "reclaimable", {}), 1
    )


def deleted(events: Events, instance: str) -> Envelope:
    return events.env(InstanceDeleted(instance, "", "wl-a", "orchestrator", "o", "returned"), 2)


def test_the_enroller_enrols_each_live_node_once(setup: Setup, tmp_path: Path) -> None:
    events = Events(REGION)
    boot = tmp_path / "boot"
    enroller = Enroller(setup.authority, boot)
    for event in (launched(events, "i-1"), launched(events, "i-2"), deleted(events, "i-2")):
        enroller.observe(event)
    assert enroller.drain() == 0
    assert sorted(p.name for p in boot.iterdir()) == ["i-1"]  # i-2 went before its boot
    assert len(enroller.enrolled) == 1
    record = setup.authority.record(NodeIdentity(REGION, "i-1"))
    assert record is not None and record.workload_id == "wl-a"
    assert enroller.enrolled == [NodeIdentity(REGION, "i-1")]
    # Delivered: a token and the CA, no key and no certificate (the node makes its own).
    assert sorted(p.name for p in (boot / "i-1").iterdir()) == ["ca.pem", "node.token"]
    assert record.serials == {} and record.nonce
    again = Enroller(setup.authority, boot)  # restarted: the log read again
    again.observe(launched(events, "i-1"))
    assert again.drain() == 0 and again.enrolled == []
    # A node retired (revoked) by the time its enrolment comes is left retired.
    identity = NodeIdentity(REGION, "i-3")
    setup.authority.enrol(identity, "wl-a")
    setup.authority.revoke(identity)
    late = Enroller(setup.authority, boot)
    late.observe(launched(events, "i-3"))
    assert late.drain() == 0 and late.enrolled == []
    retired = setup.authority.record(identity)
    assert retired is not None and retired.retired


def test_a_nodes_folder_without_a_pki_engine_says_what_to_set(tmp_path: Path) -> None:
    with pytest.raises(NodeAuthorityError, match="SPOTCAP_NODES_DIR needs SPOTCAP_NODES_PKI"):
        nodes_from_env({"SPOTCAP_NODES_DIR": str(tmp_path)}, tmp_path)
    assert nodes_from_env({}, tmp_path) is None
