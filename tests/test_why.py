"""`why` on hand-made stories: a lost instance's chain names the notice, the drain and the
replacement with their event ids; an escalation names the cap and the approver."""

from __future__ import annotations

from projections.postgres.connection import Connection
from projections.postgres.writer import FleetWriter
from projections.read.why import why
from schemas.events import (
    DrainCompleted,
    DrainStarted,
    FallbackDecided,
    InstanceLaunched,
    InstanceLost,
    NoticeReceived,
    ReplacementRequested,
)
from tests.projection_support import T0_US, event, positioned

W, P = "wl-train", "pool-a"


def test_a_lost_instance_names_notice_drain_and_replacement(fleet: Connection) -> None:
    launch = event(InstanceLaunched("i-1", P, W, 16, "reclaimable", {}), 0, name="w-launch")
    notice = event(NoticeReceived("i-1", P, W, T0_US + 1120 * 10**6, "nats"), 1000,
                   name="w-notice", correlation_id="wave-7")  # fmt: skip
    replace = event(ReplacementRequested(W, "i-1", 16, "reclaimable", ("pool-x",)), 1001,
                    name="w-rep", causation_id=notice.event_id)  # fmt: skip
    drain = event(DrainStarted("i-1", W, "slurm", 90, "notice"), 1001, name="w-drain",
                  causation_id=notice.event_id)  # fmt: skip
    drained = event(DrainCompleted("i-1", W, "slurm", 41.5, True, False, False, 77.0), 1043,
                    name="w-drained", causation_id=drain.event_id)  # fmt: skip
    lost = event(InstanceLost("i-1", P, W, 16, "reclaimable", True, "reclaimed", notice.event_id),
                 1120, name="w-lost", correlation_id="wave-7")  # fmt: skip
    successor = event(InstanceLaunched("i-2", "pool-b", W, 16, "reclaimable", {}), 1090,
                      name="w-launch2", causation_id=replace.event_id)  # fmt: skip
    FleetWriter(fleet).write(
        positioned([launch, notice, replace, drain, drained, lost, successor]), {}
    )

    answer = why(fleet, "i-1")
    assert answer.kind == "instance"
    by_type = {s.event_type: s for s in answer.steps}
    assert by_type["notice_received"].event_id == notice.event_id
    assert "part of wave-7" in by_type["notice_received"].sentence
    assert by_type["drain_started"].event_id == drain.event_id
    assert "through slurm" in by_type["drain_completed"].sentence
    assert "verified" in by_type["drain_completed"].sentence
    assert by_type["replacement_requested"].event_id == replace.event_id
    assert "avoiding 1 excluded pools" in by_type["replacement_requested"].sentence
    # What the replacement became: the instance launched for it, and where.
    launches = [s for s in answer.steps if s.event_type == "instance_launched"]
    assert any("i-2 was launched in pool-b" in s.sentence for s in launches)
    assert [s.at for s in answer.steps] == sorted(s.at for s in answer.steps)

    # From the replacement's successor, the chain goes back through the replacement to the notice.
    back = why(fleet, "i-2")
    assert [s.event_id for s in back.steps][:2] == [notice.event_id, replace.event_id]


def test_an_escalation_names_the_cap_and_the_approver(fleet: Connection) -> None:
    escalation = event(
        FallbackDecided(W, "escalated", 64, 12_500_000, 10_000_000, "carol@example.org", 1,
                        "floor broken for 20 min by a hall-wide reclaim"),
        50, name="esc",
    )  # fmt: skip
    FleetWriter(fleet).write(positioned([escalation]), {})
    (step,) = why(fleet, escalation.event_id).steps
    assert step.event_id == escalation.event_id
    assert "€10.00" in step.sentence and "€12.50" in step.sentence
    assert "carol@example.org was paged" in step.sentence
    workload = why(fleet, W)
    assert workload.kind == "workload" and workload.steps[0].event_id == escalation.event_id
