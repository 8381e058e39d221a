"""`spotcap drill run` and `spotcap drill report` as an operator runs them, against the simulated
region served as a cloud (the real openstacksdk adapter over HTTP, the provider's reclaim API)
and an embedded log. The test stands in for the actuator (it writes the feeds' facts to the log)
and for the node agents (simulated drains); no deciders run, so no replacement is launched and
the drill fails, saying so."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from provider.base import LaunchRequest, owned_tags
from schemas.codec import Codec
from schemas.events import Envelope, NoticeReceived
from sim.clock import SECOND_US
from sim.cloud import ServedCloud
from sim.cloud.serve import write_client_files
from sim.live.tap import SimulatedAgents
from streams.embedded import EmbeddedLog
from streams.writer import publish
from tests.cli_support import assert_one_sentence, spotcap
from tests.cloud_support import GUARANTEED_POOL, OWNER, POOL, REGION, adapter, served_clouds, settle

PATIENCE_S = 120.0


@pytest.fixture
def clouds() -> Iterator[Callable[..., ServedCloud]]:
    yield from served_clouds(speed=10.0)  # the 120 s notice passes in 12 s of wall time


def to_log(home: Path, events: list[Envelope]) -> None:
    log = EmbeddedLog(home / "log", share_writes_s=PATIENCE_S)
    try:
        publish(log, Codec(), REGION, events)
    finally:
        log.close()


def test_drill_run_and_report_on_a_served_cloud(
    clouds: Callable[..., ServedCloud], tmp_path: Path
) -> None:
    cloud = clouds()
    provider_file = write_client_files(cloud, tmp_path / "client")
    home = tmp_path / "home"
    ours = adapter(cloud)
    for _ in range(10):
        ours.launch(LaunchRequest(POOL, "wl-1", owned_tags(OWNER, "wl-1")))
    to_log(home, ours.poll_events())
    where = ["--home", str(home), "--region", REGION]
    drill = [*where, "drill", "run", "--provider", str(provider_file), "--orchestrator-id", OWNER]

    done = spotcap(*drill, "--pool", POOL, "--share", "0.2")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "started: 2 of 10 instances" in done.stdout, done.stdout
    again = spotcap(*drill, "--pool", POOL)
    assert again.returncode == 0 and "refused (drill_running)" in again.stdout, again.stdout

    # The actuator's part: the notices the provider's feeds give, to the log; the agents drain.
    agents = SimulatedAgents(REGION, drain_s=20)
    noticed: list[Envelope] = []
    start_us = cloud.region.now_us()
    settle(cloud, start_us + 2 * SECOND_US)
    for event in ours.poll_events():
        noticed.append(event)
        if isinstance(event.payload, NoticeReceived):
            agents.noticed(event)
    notices = [e for e in noticed if e.event_type == "notice_received"]
    # The notices come through the feeds without the reclaim's correlation id (the gate knows
    # them as the drill's by their instances).
    assert len(notices) == 2 and {e.correlation_id for e in notices} == {None}
    settle(cloud, start_us + 300 * SECOND_US)
    to_log(home, [*noticed, *ours.poll_events(), *agents.due(cloud.region.now_us())])

    finished = spotcap(*drill)  # no --pool, no <home>/drills.yaml: only finish what is due
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert "finished (2 reclaimed, notice to drain p99 1,000 ms" in finished.stdout
    assert "no replacement launched before its deadline" in finished.stdout

    report = spotcap(*where, "drill", "report", "--json")
    assert report.returncode == 0, report.stderr[-2000:]
    rows = json.loads(report.stdout)
    assert [r["result"] for r in rows] == ["failed", "refused"]
    failed = rows[0]
    assert (failed["reclaimed"], failed["drained"], failed["verified"]) == (2, 2, 2)
    assert failed["notice_to_drain_p99_ms"] == 1000 and failed["replaced_in_time"] == 0
    text = spotcap(*where, "drill", "report", env={"COLUMNS": "80"})
    assert text.returncode == 0 and POOL in text.stdout, text.stderr[-2000:]
    assert max(len(line) for line in text.stdout.splitlines()) <= 80, text.stdout

    refused = spotcap(*drill, "--pool", GUARANTEED_POOL)
    assert refused.returncode == 0 and "refused (no_instances)" in refused.stdout
    share = spotcap(*drill, "--pool", POOL, "--share", "0")
    assert_one_sentence(share, "(0, 0.25]")


def test_drill_run_wait_finishes_the_drill_on_the_providers_clock(
    clouds: Callable[..., ServedCloud], tmp_path: Path
) -> None:
    cloud = clouds(speed=20.0)
    provider_file = write_client_files(cloud, tmp_path / "client")
    home = tmp_path / "home"
    ours = adapter(cloud)
    ours.launch(LaunchRequest(POOL, "wl-1", owned_tags(OWNER, "wl-1")))
    to_log(home, ours.poll_events())
    start_us = cloud.region.now_us()
    where = ["--home", str(home), "--region", REGION]
    done = spotcap(*where, "drill", "run", "--provider", str(provider_file),
                   "--orchestrator-id", OWNER, "--pool", POOL, "--wait")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    # It waited out the notice and the grace (240 s of the cloud's time), then measured: with
    # nobody writing the provider's notices to the log, the drill fails and says why.
    assert cloud.region.now_us() >= start_us + 240 * SECOND_US
    lines = done.stdout.splitlines()
    assert "started: 1 of 1 instances" in lines[0], done.stdout
    assert "finished (1 reclaimed" in lines[1] and "no notice reached the log" in lines[1]
