"""The node revoker's pending revocations survive a kill -9 (ADR-31): a deletion folded and not
yet revoked when the process dies is revoked by the next one, from the journal in the
actuator's state folder, and a node is revoked once however often its deletion is read
again. The revoker runs in processes of its own against the suite's OpenBao."""

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

from agent.identity import FetchError, NodeIdentityClient
from infra import servers
from provider.nodes import NodeIdentity
from tests.identity_support import REGION, Setup, bundle_service, enrol

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def setup(openbao: servers.Server, tmp_path: Path) -> Iterator[Setup]:
    yield from bundle_service(openbao, tmp_path)


def revoker(
    openbao: servers.Server, setup: Setup, journal: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTCAP_", "BAO_"))}
    env |= {
        "SPOTCAP_NODES_PKI_MOUNT": setup.mount,
        "BAO_ADDR": openbao.address,
        "BAO_TOKEN": servers.openbao_token(openbao),
        "PYTHONPATH": str(REPO),
    }
    return subprocess.run(
        [sys.executable, "-m", "tests.revoker_worker", "--journal", str(journal),
         "--region", REGION, *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


def answer(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_a_revocation_pending_at_a_kill_is_done_once_after_the_restart(
    openbao: servers.Server, setup: Setup, tmp_path: Path
) -> None:
    journal = tmp_path / "actuator" / "revocations"
    a = setup.authority.enrol(NodeIdentity(REGION, "i-aaaa"), "wl-a").serial
    b = setup.authority.enrol(NodeIdentity(REGION, "i-bbbb"), "wl-b").serial
    keep = setup.authority.enrol(NodeIdentity(REGION, "i-cccc"), "wl-a").serial

    killed = revoker(
        openbao, setup, journal, "--deleted", "i-aaaa", "--deleted", "i-bbbb", "--kill"
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert not setup.authority.is_revoked(a) and not setup.authority.is_revoked(b)

    restarted = answer(revoker(openbao, setup, journal))  # nothing folded: the journal's own
    assert sorted(restarted["revoked"]) == sorted([a, b]) and restarted["pending"] == 0
    assert setup.authority.is_revoked(a) and setup.authority.is_revoked(b)
    assert not setup.authority.is_revoked(keep)

    # The log read again from an older position: the same deletions, revoked already.
    again = answer(revoker(openbao, setup, journal, "--deleted", "i-aaaa", "--deleted", "i-bbbb"))
    assert again == {"revoked": [], "pending": 0}
    lines = journal.read_text().splitlines()
    assert sorted(lines) == [f"revoked {REGION} i-aaaa", f"revoked {REGION} i-bbbb"]


def test_a_node_enrolled_and_deleted_is_refused_after_the_restart(
    openbao: servers.Server, setup: Setup, tmp_path: Path
) -> None:
    journal = tmp_path / "revocations"
    _, config = enrol(setup, "i-dddd", "wl-a")
    client = NodeIdentityClient(config, REGION, "i-dddd")
    assert client.fetch_bundle(config.path)
    killed = revoker(openbao, setup, journal, "--deleted", "i-dddd", "--kill")
    assert killed.returncode == -signal.SIGKILL
    assert client.fetch_bundle(tmp_path / "still.json")  # not revoked yet: the kill came first
    assert answer(revoker(openbao, setup, journal))["pending"] == 0
    with pytest.raises(FetchError, match="revoked"):
        client.fetch_bundle(tmp_path / "after.json")
