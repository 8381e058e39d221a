"""A node's enrolment pending at a kill -9 is made once after the restart (ADR-31, issue 24):
the launch is journalled in the actuator's state folder when it is folded, so a restarted
follower enrols the node although the log is no longer read from before its launch; and an
enrolment that died after OpenBao made the node's token and before it reached the node is made
again with a new nonce (the lost token is void), and the node ends with one live certificate. The
follower runs in processes of its own (`tests/enroller_worker.py`, built as `spotcap run
actuator` builds it) against the suite's OpenBao."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from agent.identity import NodeIdentityClient
from infra import servers
from provider.nodes import NodeIdentity
from provider.nodes.identity import serial_text
from tests.identity_support import REGION, Setup, bundle_service, config_of

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def setup(openbao: servers.Server, tmp_path: Path) -> Iterator[Setup]:
    yield from bundle_service(openbao, tmp_path)


def enroller(openbao: servers.Server, setup: Setup, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTCAP_", "BAO_"))}
    env |= {
        "SPOTCAP_NODES_PKI_MOUNT": setup.mount,
        "SPOTCAP_NODES_DIR": str(setup.tmp / "boot"),
        "BAO_ADDR": openbao.address,
        "BAO_TOKEN": servers.openbao_token(openbao),
        "PYTHONPATH": str(REPO),
    }
    return subprocess.run(
        [sys.executable, "-m", "tests.enroller_worker", "--state", str(setup.tmp / "actuator"),
         "--region", REGION, *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


def answer(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def delivered_serial(setup: Setup, instance: str) -> str:
    pem = (setup.tmp / "boot" / instance / "node.pem").read_bytes()
    return serial_text(x509.load_pem_x509_certificate(pem))


def boots(setup: Setup, instance: str) -> bool:
    """The node boots with what was delivered to it (its token only): it makes its key,
    enrols, and fetches its own bundle over mutual TLS."""
    node = setup.tmp / "boot" / instance
    assert sorted(p.name for p in node.iterdir()) == ["ca.pem", "node.token"]
    client = NodeIdentityClient(config_of(setup, node), REGION, instance)
    assert client.enrol_if_needed()
    return bool(client.fetch_bundle(setup.tmp / f"{instance}.bundle.json"))


def test_an_enrolment_pending_at_a_kill_is_made_once_after_the_restart(
    openbao: servers.Server, setup: Setup
) -> None:
    killed = enroller(openbao, setup, "--launched", "i-aaaa", "--launched", "i-bbbb",
                      "--kill", "observed")  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    a, b = NodeIdentity(REGION, "i-aaaa"), NodeIdentity(REGION, "i-bbbb")
    assert setup.authority.live_serials(a, b) == {a: [], b: []}

    # Restarted after its actuator's snapshot: the launches are not read again.
    restarted = answer(enroller(openbao, setup))
    assert sorted(restarted["enrolled"]) == ["i-aaaa", "i-bbbb"] and restarted["pending"] == 0
    assert restarted["cleaned"] == []
    for identity in (a, b):
        assert boots(setup, identity.instance_id)
    live = setup.authority.live_serials(a, b)
    for identity in (a, b):  # exactly one live certificate, the one the node holds
        assert live[identity] == [delivered_serial(setup, identity.instance_id)]

    # The log read again from an older position: delivered already, nothing issued.
    again = answer(enroller(openbao, setup, "--launched", "i-aaaa", "--launched", "i-bbbb"))
    assert again == {"enrolled": [], "cleaned": [], "pending": 0}
    assert len(setup.authority.live_serials(a)[a]) == 1


def test_a_kill_between_the_token_and_its_delivery_voids_it_and_leaves_one_certificate(
    openbao: servers.Server, setup: Setup
) -> None:
    identity = NodeIdentity(REGION, "i-cccc")
    killed = enroller(openbao, setup, "--launched", "i-cccc", "--kill", "issued")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    lost = setup.authority.record(identity)  # its token made, never delivered
    assert lost is not None and lost.nonce and lost.serials == {}
    assert not (setup.tmp / "boot" / "i-cccc").exists()

    restarted = answer(enroller(openbao, setup))
    assert restarted == {"enrolled": ["i-cccc"], "cleaned": [], "pending": 0}
    again = setup.authority.record(identity)
    assert again is not None and again.nonce and again.nonce != lost.nonce  # the lost one void
    assert boots(setup, "i-cccc")
    [live] = setup.authority.live_serials(identity)[identity]
    assert live == delivered_serial(setup, "i-cccc")
    record = setup.authority.record(identity)
    assert record is not None and list(record.serials) == [live]


def test_a_node_gone_before_the_restart_is_never_enrolled_and_is_retired(
    openbao: servers.Server, setup: Setup
) -> None:
    identity = NodeIdentity(REGION, "i-dddd")
    killed = enroller(openbao, setup, "--launched", "i-dddd", "--kill", "issued")
    assert killed.returncode == -signal.SIGKILL
    restarted = answer(enroller(openbao, setup, "--deleted", "i-dddd"))
    assert restarted == {"enrolled": [], "cleaned": [], "pending": 0}
    assert setup.authority.live_serials(identity) == {identity: []}
    assert not (setup.tmp / "boot" / "i-dddd").exists()
    record = setup.authority.record(identity)  # a lost token of it could enrol nothing now
    assert record is not None and record.retired
