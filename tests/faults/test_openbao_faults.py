"""OpenBao killed (SIGKILL, then started again from its folder) and paused (SIGSTOP, 10 s and
more) under the services that use it, each on a real OpenBao of the test's own:

- the actuator's capacity authority (ADR-29, `provider.authority`): with a live credential
  held, a renewal that cannot reach OpenBao is no refusal: the orders go out with the credential
  held, and the renewal is made once OpenBao answers; with no live credential held, the orders
  wait (nothing sent, nothing refused) and go out, each once, when OpenBao answers again.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import hvac
import pytest

from infra import servers
from infra.servers.process import alive
from provider.actuator import ActuatorOptions, ActuatorService
from provider.authority import (
    TIMEOUT_S,
    ProjectAuthority,
    credential_path,
    setup_authority_store,
)
from provider.base import CALL_TAG
from schemas.events import ActuationRefused, InstanceLaunched
from tests.actuator_support import CODEC
from tests.test_actuator import ME, Region

pytestmark = pytest.mark.slow

PROJECT = "spotcap"
PAUSE_S = 12.0
"""How long OpenBao stays paused or down at least (the issue's 10-40 s)."""
PATIENCE_S = 180.0


class Bao:
    """An OpenBao of the test's own (Raft storage in its folder), its root client, and the
    faults: `kill` (SIGKILL) and `start` again from the folder, `pause` / `resume`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.server = servers.start_openbao(folder)
        self.address = self.server.address
        self.client = hvac.Client(url=self.address, token=servers.openbao_token(folder))

    def kill(self) -> None:
        os.kill(self.server.pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while alive(self.server.pid):
            assert time.monotonic() < deadline
            time.sleep(0.1)

    def start(self) -> None:
        self.server = servers.start_openbao(self.folder)
        assert self.server.address == self.address  # clients reconnect to what they knew

    def pause(self) -> None:
        os.kill(self.server.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.server.pid, signal.SIGCONT)


@pytest.fixture
def bao(tmp_path: Path) -> Iterator[Bao]:
    found = Bao(tmp_path / "openbao")
    try:
        yield found
    finally:
        if alive(found.server.pid):
            found.resume()
        servers.stop(found.folder)


def publish(bao: Bao, mount: str, region: str, *, lease_s: int, life_s: float) -> str:
    """What the issuer publishes (`provider.authority.CredentialIssuer`): a credential that
    expires `life_s` from now, under an OpenBao lease of `lease_s`; its id."""
    credential_id = uuid.uuid4().hex
    bao.client.secrets.kv.v1.create_or_update_secret(
        path=credential_path(region, PROJECT), mount_point=mount,
        secret={"auth_url": "http://keystone.invalid/v3", "application_credential_id":
                credential_id, "application_credential_secret": uuid.uuid4().hex,
                "expires_at_s": str(int(time.time() + life_s)), "ttl": f"{lease_s}s"},
    )  # fmt: skip
    return credential_id


class Acting:
    """The actuator service (in this process) on a quiet simulated region, under a
    capacity authority read from `bao` through hvac with the service's own timeout."""

    def __init__(self, bao: Bao, root: Path) -> None:
        self.region = Region(root)
        self.mount = f"authority-{uuid.uuid4().hex[:8]}"
        setup_authority_store(bao.client, self.mount)
        client = hvac.Client(url=bao.address, token=bao.client.token, timeout=TIMEOUT_S)
        self.authority = ProjectAuthority(
            client, self.region.provider.region, PROJECT, mount=self.mount
        )
        options = ActuatorOptions(snapshot_every_s=0.0, poll_s=0.05, authority=self.authority)
        self.service = ActuatorService(self.region.log, CODEC, self.region.provider,
                                       self.region.state_dir, orchestrator_id=ME,
                                       options=options)  # fmt: skip

    def step_until(self, done: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + PATIENCE_S
        while not done():
            assert time.monotonic() < deadline, f"not {what} within {PATIENCE_S:.0f} s"
            self.service.step()

    def step_for(self, seconds: float) -> None:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            self.service.step()

    def launched_by_order(self) -> Counter[str]:
        return Counter(
            e.payload.tags[CALL_TAG] for e in self.region.events()
            if isinstance(e.payload, InstanceLaunched) and CALL_TAG in e.payload.tags
        )  # fmt: skip

    def refused(self) -> list[ActuationRefused]:
        return [e.payload for e in self.region.events() if isinstance(e.payload, ActuationRefused)]


def test_a_paused_openbao_does_not_stop_an_actuator_holding_a_live_credential(
    bao: Bao, tmp_path: Path
) -> None:
    acting = Acting(bao, tmp_path)
    region = acting.region.provider.region
    first = publish(bao, acting.mount, region, lease_s=2, life_s=3600)
    with acting.service as service:
        acting.step_until(lambda: service.caught_up and acting.authority.reads >= 1, "read")
        assert acting.authority.credential().application_credential_id == first
        bao.pause()
        paused_at = time.monotonic()
        try:
            time.sleep(1.5)  # past half the 2 s lease: the next call renews first
            acting.region.placement()  # four launch orders
            acting.step_until(lambda: service.counts.launched == 4, "carried out under the pause")
            assert acting.authority.failures >= 1  # it did try to renew, and could not
            acting.step_for(max(0.0, PAUSE_S - (time.monotonic() - paused_at)))
        finally:
            bao.resume()
        second = publish(bao, acting.mount, region, lease_s=3600, life_s=3600)
        acting.step_until(  # renewed once OpenBao answers (after its backoff)
            lambda: acting.authority.credential().application_credential_id == second,
            "renewed after the pause",
        )
        assert service.counts.launched == 4
    assert acting.refused() == []
    launched = acting.launched_by_order()
    assert len(launched) == 4 and set(launched.values()) == {1}


@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_orders_wait_for_openbao_when_no_live_credential_is_held_and_go_out_once(
    bao: Bao, tmp_path: Path, fault: str
) -> None:
    acting = Acting(bao, tmp_path)
    region = acting.region.provider.region
    publish(bao, acting.mount, region, lease_s=2, life_s=4)  # expires while OpenBao is out
    with acting.service as service:
        acting.step_until(lambda: service.caught_up and acting.authority.reads >= 1, "read")
        expires_at = acting.authority.credential().expires_at_s
        if fault == "kill":
            bao.kill()
        else:
            bao.pause()
        out_at = time.monotonic()
        try:
            while time.time() < expires_at + 0.5:  # bounded: the credential's own 4 s
                service.step()
            acting.region.placement()  # four launch orders, and no live credential
            acting.step_for(max(2.0, PAUSE_S - (time.monotonic() - out_at)))
            assert service.counts.launched == 0  # nothing acted without a live credential
            assert acting.refused() == []  # and nothing refused for an outage
            assert service.book.open_orders == 4 and service.actuator.waiting is not None
            assert "OpenBao" in service.actuator.waiting
        finally:
            if fault == "kill":
                bao.start()
            else:
                bao.resume()
        publish(bao, acting.mount, region, lease_s=3600, life_s=3600)  # the issuer's next
        acting.step_until(lambda: service.counts.launched == 4, "carried out after OpenBao")
        assert service.counts.launched == 4
    assert acting.refused() == []
    launched = acting.launched_by_order()
    assert len(launched) == 4 and set(launched.values()) == {1}
