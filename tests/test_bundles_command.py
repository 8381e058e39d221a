"""`spotcap run bundles`, the bundle service as the command runs it (ADR-31): a node fetches
its own signed bundle over mutual TLS with its certificate from OpenBao's PKI engine, and is
refused another node's; without OpenBao configured it says what to set. Against the suite's
OpenBao."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.identity import FetchError, NodeIdentityClient
from infra import servers
from tests.identity_support import REGION, Setup, bundle_service, enrol

SPOTCAP = str(Path(sys.executable).with_name("spotcap"))


@pytest.fixture
def setup(openbao: servers.Server, tmp_path: Path) -> Iterator[Setup]:
    yield from bundle_service(openbao, tmp_path)


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("SPOTCAP_", "BAO_", "VAULT_"))}


def test_a_node_fetches_its_own_bundle_from_the_command_and_not_anothers(
    openbao: servers.Server, setup: Setup
) -> None:
    err = setup.tmp / "bundles.err"
    env = {**clean_env(), "BAO_ADDR": openbao.address, "BAO_TOKEN": servers.openbao_token(openbao)}
    with err.open("wb") as stderr:
        proc = subprocess.Popen(
            [SPOTCAP, "--home", str(setup.tmp / "home"), "run", "bundles",
             "--bundles", str(setup.bundles), "--port", "0", "--pki-mount", setup.mount],
            stdout=subprocess.DEVNULL, stderr=stderr, env=env,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (found := re.search(r"bundle service at (https://\S+)", err.read_text())):
            assert proc.poll() is None, err.read_text()
            assert time.monotonic() < deadline, "the bundle service did not say where it is"
            time.sleep(0.2)
        address = found.group(1)
        _, config_a = enrol(setup, "i-aaaa", "wl-a")
        _, config_b = enrol(setup, "i-bbbb", "wl-b")
        config_a = dataclasses.replace(config_a, service_url=address)
        config_b = dataclasses.replace(config_b, service_url=address)
        assert NodeIdentityClient(config_a, REGION, "i-aaaa").fetch_bundle(config_a.path)
        assert config_a.path.read_bytes() == (setup.bundles / "wl-a.bundle.json").read_bytes()
        stolen = setup.tmp / "stolen.json"
        with pytest.raises(FetchError, match=r"403.*fetches only its own bundle"):
            NodeIdentityClient(config_b, REGION, "i-aaaa").fetch_bundle(stolen)
        assert not stolen.exists()
        before = config_a.certificate.read_bytes()
        assert NodeIdentityClient(config_a, REGION, "i-aaaa").renew().renewed  # through it too
        assert config_a.certificate.read_bytes() != before
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    assert rc == 0, err.read_text()
    assert servers.openbao_token(openbao) not in err.read_text()


def test_the_bundle_command_without_openbao_says_what_to_set(tmp_path: Path) -> None:
    done = subprocess.run(
        [SPOTCAP, "--home", str(tmp_path / "home"), "run", "bundles", "--bundles", str(tmp_path)],
        env=clean_env(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert "set BAO_ADDR (or VAULT_ADDR) and BAO_TOKEN" in done.stderr, done.stderr
