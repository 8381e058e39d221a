"""The actuator killed with SIGKILL at every step of a launch and of a delete, against the
simulated region served as a cloud (the real openstacksdk adapter over HTTP): restarted, it
launches no instance twice, loses no decision, and deletes no instance of another owner; the
log holds one answer per call."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from provider.base import DECISION_TAG, OWNER_TAG, UnknownInstanceError
from schemas.events import Envelope, InstanceDeleted, InstanceLaunched
from sim.cloud import ServedCloud
from sim.cloud.serve import write_client_files
from tests.actuator_support import Decisions
from tests.cloud_support import (
    CATALOGUE,
    OWNER,
    POOL,
    REGION,
    adapter,
    clock_of,
    connect,
    create_server,
    served_clouds,
)

REPO = Path(__file__).resolve().parent.parent
STEPS = ("started", "called", "answered", "done")
SMALL = "c3.4.hall-b.reclaimable"
PATIENCE_S = 300.0


@pytest.fixture
def clouds() -> Iterator[Callable[..., ServedCloud]]:
    yield from served_clouds(speed=1.0)  # sim time at wall speed: no order grows stale


class Run:
    """A served cloud, the decisions on an embedded log, and the actuator's processes."""

    def __init__(self, root: Path, cloud: ServedCloud) -> None:
        self.root = root
        self.cloud = cloud
        self.provider_file = write_client_files(cloud, root / "client")
        self.provider = adapter(cloud)  # the test's own view of the cloud
        self.decisions = Decisions(root / "log", REGION, OWNER, clock_of(cloud.access).now_us)
        self.decisions.pools(CATALOGUE)

    def actuator(self, kill: str | None = None) -> subprocess.CompletedProcess[str]:
        command = [
            sys.executable, "-m", "tests.actuator_worker",
            "--provider", str(self.provider_file),
            "--log", str(self.root / "log"),
            "--state", str(self.root / "actuator"),
            "--owner", OWNER,
            "--patience-s", str(PATIENCE_S),
        ]  # fmt: skip
        if kill:
            command += ["--kill", kill]
        return subprocess.run(
            command,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=PATIENCE_S + 120,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            check=False,
        )

    def killed(self, kill: str) -> None:
        done = self.actuator(kill)
        assert done.returncode == -signal.SIGKILL, (
            f"the actuator was to die at {kill}: rc {done.returncode}\n{done.stderr[-3000:]}"
        )

    def settled(self) -> None:
        done = self.actuator()
        assert done.returncode == 0, f"the restarted actuator: {done.stderr[-3000:]}"

    def answers(self, kind: type[InstanceLaunched | InstanceDeleted]) -> list[Envelope]:
        return [e for e in self.decisions.events() if isinstance(e.payload, kind)]

    def live(self, placed: Envelope) -> list[str]:
        return sorted(
            i.instance_id for i in self.provider.list_by_tag(DECISION_TAG, placed.event_id)
        )


def _once_each(events: list[Envelope]) -> list[str]:
    """The instances of `events`, asserting one event per instance and one per id."""
    instances = [
        e.payload.instance_id
        for e in events
        if isinstance(e.payload, InstanceLaunched | InstanceDeleted)
    ]
    assert len(set(instances)) == len(instances), f"an instance answered twice: {instances}"
    assert len({e.event_id for e in events}) == len(events)
    return sorted(instances)


@pytest.mark.parametrize("kill_at", STEPS)
def test_a_launch_killed_at_any_step_happens_once(
    tmp_path: Path, clouds: Callable[..., ServedCloud], kill_at: str
) -> None:
    run = Run(tmp_path, clouds())
    placed = run.decisions.placement((POOL, SMALL), vcpu_each=16)  # 2 + 4 instances
    orders = [e for e in run.decisions.events() if e.event_type == "actuation_ordered"]
    assert len(orders) == 6
    run.killed(f"{kill_at}:2")  # in the middle of the second launch
    run.settled()
    live = run.live(placed)
    assert len(live) == 6, f"killed at {kill_at}: {len(live)} instances for 6 orders"
    assert _once_each(run.answers(InstanceLaunched)) == live


@pytest.mark.parametrize("kill_at", STEPS)
def test_a_delete_killed_at_any_step_happens_once(
    tmp_path: Path, clouds: Callable[..., ServedCloud], kill_at: str
) -> None:
    run = Run(tmp_path, clouds())
    placed = run.decisions.placement((POOL,), vcpu_each=32)  # 4 instances
    run.settled()
    mine = run.live(placed)
    assert len(mine) == 4
    foreign = create_server(run.cloud, connect(run.cloud.access), POOL, {"team": "someone-else"})
    refused = [
        e
        for e in run.decisions.returned(placed, (mine[0], mine[1], foreign))
        if e.event_type == "actuation_refused"
    ]
    assert [e.payload.instance_id for e in refused] == [foreign]  # type: ignore[union-attr]
    run.killed(f"{kill_at}:1")
    run.settled()
    assert run.live(placed) == mine[2:], f"killed at {kill_at}"
    assert _once_each(run.answers(InstanceDeleted)) == mine[:2]
    try:
        still = run.provider.get(foreign)
    except UnknownInstanceError:
        pytest.fail("the instance of another owner was deleted")
    assert still.tags.get(OWNER_TAG) is None
