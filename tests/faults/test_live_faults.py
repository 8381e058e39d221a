"""The live region under faults (`sim.live.faults`, `tests/faults/harness.py`): one run of
`spotcap demo --live` on servers of its own, during which every server of the region (the
Kafka broker, PostgreSQL, NATS) and every one of spotcap's processes in it (the deciders:
sequencer and Faust worker; the projections; the actuator with its intakes; a real node agent)
is killed with SIGKILL and paused with SIGSTOP once, at seeded random moments around the
hall-wide wave. Nobody restarts anything by hand: a killed server is started again on its
ports (as an operator's service manager would), a killed service by the live region's
supervisor.

Checked afterwards, from what the log, the fleet state and the ledger hold (the harness's
checks, one test each): every fault injected and every killed service restarted; no event
lost; no decision lost, changed or made twice; none carried out twice; the projections and the
ledger equal a clean run over the same log; every noticed node drained.

Waits are bounded and generous; nothing asserts a wall time. One run of the region (the CI
form; `bench/faults.py` runs more faults and more seeds).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sim.live.faults import HOWS, SERVERS, SERVICES, plan
from tests.faults import harness
from tests.faults.harness import FaultedRun

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

SEED = 27
FAULTS = plan(SEED, window_s=(600, 3300))
"""Every server and service, killed and paused, from sim minute 10 to 55 (the wave starts at
minute 20; its notices run for two minutes each). A fault begins once the one before it ended,
so the last ones may come after the span, while the region winds down."""


@pytest.fixture(scope="module")
def faulted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultedRun]:
    with harness.faulted_run(tmp_path_factory.mktemp("faults"), FAULTS, speed=15.0) as run:
        yield run


def test_the_schedule_faults_every_server_and_service_both_ways() -> None:
    assert {(f.target, f.how) for f in FAULTS} == {
        (t, h) for t in (*SERVERS, *SERVICES) for h in HOWS
    }
    assert all(600 <= f.at_s <= 3300 for f in FAULTS)
    (broker_pause,) = [f for f in FAULTS if f.target == "kafka" and f.how == "stop"]
    assert broker_pause.for_s == 40.0  # beyond the clients' 30 s deadlines
    assert plan(SEED, window_s=(600, 3300)) == FAULTS  # seeded: the same moments every run


def test_every_fault_was_injected_and_every_killed_service_came_back(
    faulted: FaultedRun,
) -> None:
    assert harness.injected(faulted) == ""
    assert harness.restarted(faulted) == ""
    report = faulted.report
    assert report["notices"] > 0 and report["waves"][0]["instances_lost"] > 0


def test_no_event_lost(faulted: FaultedRun) -> None:
    assert harness.no_event_lost(faulted) == ""


def test_no_decision_lost_changed_made_or_carried_out_twice(faulted: FaultedRun) -> None:
    assert harness.decisions(faulted) == ""
    assert harness.carried_out_once(faulted) == ""


def test_projections_and_ledger_equal_a_clean_run(faulted: FaultedRun, tmp_path: Path) -> None:
    assert harness.projections_and_ledger(faulted, tmp_path) == {"projections": "", "ledger": ""}


def test_every_noticed_node_was_drained(faulted: FaultedRun) -> None:
    assert harness.drained(faulted) == ""
