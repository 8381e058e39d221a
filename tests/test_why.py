"""`why` on hand-made stories: a lost instance's chain names the notice, the drain and the
replacement with their event ids; an escalation names the cap and the approver; a contract
without an approver reads as plain sentences (no empty name, no raw micro-euros)."""

from __future__ import annotations

import projections.ledger.writer as ledger_writer
from projections.ledger.pricing import LedgerLine
from projections.ledger.store import ChdbStore
from projections.ledger.writer import LedgerWriter
from projections.postgres.connection import Connection
from projections.postgres.writer import FleetWriter
from projections.read.why import why
from schemas.events import (
    Allocation,
    ContractPublished,
    DrainCompleted,
    DrainStarted,
    FallbackDecided,
    FallbackWithheld,
    InstanceLaunched,
    InstanceLost,
    NoticeReceived,
    PlacementDecided,
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
                        "floor broken for 20 min by a hall-wide reclaim", awaiting_approval=True),
        50, name="esc",
    )  # fmt: skip
    approved = event(
        FallbackDecided(W, "escalated", 64, 12_500_000, 10_000_000, "carol@example.org", 1,
                        "approved by carol@example.org up to 1418611440 micro-EUR"),
        60, name="approved",
    )  # fmt: skip
    FleetWriter(fleet).write(positioned([escalation, approved]), {})
    (step,) = why(fleet, escalation.event_id).steps
    assert step.event_id == escalation.event_id
    assert "€10.00" in step.sentence
    assert "carol@example.org was paged" in step.sentence
    (done,) = why(fleet, approved.event_id).steps
    assert "as carol@example.org approved" in done.sentence
    assert "€1,418.61" in done.sentence and "micro" not in done.sentence  # an older reason
    workload = why(fleet, W)
    assert workload.kind == "workload" and workload.steps[0].event_id == escalation.event_id


def test_a_contract_without_an_approver_reads_as_plain_sentences(fleet: Connection) -> None:
    """No empty name, no raw micro-euros: the contract says nobody may approve, the arbiter
    says the work waits, and a placement of nothing says so."""
    contract = event(
        ContractPublished(W, 1, "0" * 64, "team-thumbs", "t4", 60, "restart", False, False,
                          0.05, 192, 0, 0, "", 3),
        1, name="contract",
    )  # fmt: skip
    nothing = event(
        PlacementDecided(W, 192, 0, (), 0, 0, 0, (), unplaced_vcpu=192), 10, name="placed"
    )
    waits = event(
        FallbackWithheld(W, 192, 0, 0, 1_418_611_440, "team-thumbs",
                         "192 vCPU could not be placed; the contract names no approver"),
        11, name="withheld", causation_id=nothing.event_id,
    )  # fmt: skip
    FleetWriter(fleet).write(positioned([contract, nothing, waits]), {})
    sentences = [s.sentence for s in why(fleet, W).steps]
    assert len(sentences) == 3
    assert "no approver, so nothing beyond the cap is spent" in sentences[0]
    assert "none could be placed" in sentences[1] and "over 0 pools" not in sentences[1]
    assert "€1,418.61" in sentences[2] and "team-thumbs is told" in sentences[2]
    for s in sentences:
        assert "  " not in s and "micro" not in s
    # No guaranteed capacity of its kind to price: the sentence says so, not "would cost €0.00".
    unpriced = event(
        FallbackWithheld(W, 8, 0, 0, 0, "team-thumbs", "8 vCPU could not be placed"),
        20, name="withheld-unpriced",
    )  # fmt: skip
    FleetWriter(fleet).write(positioned([unpriced]), {})
    [last] = [s.sentence for s in why(fleet, W).steps if s.event_id == unpriced.event_id]
    assert "no guaranteed capacity it can run on has room" in last and "€0.00 beyond" not in last


def test_a_workloads_why_names_the_decision_that_ran_capacity_nobody_asked_for(
    fleet: Connection, ledger_store: ChdbStore
) -> None:
    placed = event(
        PlacementDecided(W, 64, 0, (Allocation(P, 96, "reclaimable"),), 0, 0, 0, ()),
        10, name="placed-surplus",
    )  # fmt: skip
    FleetWriter(fleet).write(positioned([placed]), {})
    LedgerWriter(ledger_store)  # the ledger's tables
    line = LedgerLine(W, T0_US // 86_400_000_000, "surplus", placed.event_id, 1_230_000, 32.5,
                      "vcpu_h", P, "reclaimable", "i-9", "usage_interval", T0_US, "recorded",
                      placed.event_id)  # fmt: skip
    ledger_store.insert("ledger_lines", ledger_writer._lines_table([line], 1))
    steps = why(fleet, W, ledger_store).steps
    [surplus] = [s for s in steps if s.event_type == "surplus"]
    assert surplus.event_id == placed.event_id
    assert surplus.sentence == (
        f"this placement launched capacity that ran 32.5 vCPU-hours beyond what {W}'s open "
        "claims asked for: €1.23 of surplus"
    )
