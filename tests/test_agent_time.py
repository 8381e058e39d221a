"""Time on a node whose clock disagrees with the provider's (issue 27 point 2): the agent's
deadline comes from the notice (its deadline and its issue time), not from a clock that
disagrees; a notice that arrives after its deadline by the node's clock is still drained, at
once, and reported so. Real workload processes, the real local drain path and drainer; only
the clock is skewed (a clock that reads the machine's time plus an offset).

Late and early facts within and beyond the ledger's allowed lateness are tests/test_late_facts.py.
"""

from __future__ import annotations

import time
from pathlib import Path

from agent.drain.base import Deadline
from agent.drain.local import LocalDrain
from agent.drainer import Drainer
from agent.records import Recorder
from schemas.events import DrainCompleted, DrainStarted, Envelope
from tests.agent_support import bundle, config, notice, reap, workload

TERM_S = 120.0


class SkewedClock:
    """This machine's clock, `skew_s` ahead (negative: behind)."""

    speed = 1.0

    def __init__(self, skew_s: float) -> None:
        self.skew_us = int(skew_s * 1e6)

    def now_us(self) -> int:
        return time.time_ns() // 1000 + self.skew_us


def _drainer(tmp_path: Path, clock: SkewedClock, marker: str) -> tuple[Drainer, LocalDrain,
                                                                       list[Envelope]]:  # fmt: skip
    cfg = config(tmp_path, local={"match_cmdline": [marker], "term_grace_s": 2.0},
                 drain={"safety_margin_s": 1.0})  # fmt: skip
    events: list[Envelope] = []
    local = LocalDrain(cfg.local)
    drainer = Drainer(cfg, {"local": local}, Recorder(cfg.region, cfg.producer, clock,
                                                      events.append), clock)  # fmt: skip
    return drainer, local, events


def test_a_clock_behind_the_providers_gives_no_more_time_than_the_notice(tmp_path: Path) -> None:
    clock = SkewedClock(-600.0)  # ten minutes behind: by it the 2-minute notice has 12 left
    drainer, _, _ = _drainer(tmp_path, clock, "unused")
    note = notice(deadline_s=TERM_S)  # issued now by the provider's (the machine's) clock
    request = drainer.request_for(bundle(), workload_id="etl", trigger="notice",
                                  cause_event_id=note.event_id, deadline_at_us=note.deadline_at_us,
                                  issued_at_us=note.issued_at_us)  # fmt: skip
    left_s = Deadline(clock, request.deadline_at_us, 0.0).left_s()
    assert 0 < left_s <= TERM_S
    # Without the notice's issue time, the skewed clock alone would have given 12 minutes.
    naive = drainer.request_for(bundle(), workload_id="etl", trigger="notice",
                                cause_event_id=note.event_id,
                                deadline_at_us=note.deadline_at_us)  # fmt: skip
    assert Deadline(clock, naive.deadline_at_us, 0.0).left_s() > TERM_S + 500


def test_a_late_delivery_on_an_agreeing_clock_keeps_the_notices_deadline(tmp_path: Path) -> None:
    clock = SkewedClock(0.0)
    drainer, _, _ = _drainer(tmp_path, clock, "unused")
    note = notice(deadline_s=TERM_S)
    late = 30_000_000  # delivered 30 s after it was issued (a NATS outage, the metadata poll)
    issued_us, deadline_us = note.issued_at_us - late, note.deadline_at_us - late
    request = drainer.request_for(bundle(), workload_id="etl", trigger="notice",
                                  cause_event_id=note.event_id, deadline_at_us=deadline_us,
                                  issued_at_us=issued_us)  # fmt: skip
    assert request.deadline_at_us == deadline_us  # 90 s left, not the notice's whole 120
    assert Deadline(clock, request.deadline_at_us, 0.0).left_s() <= TERM_S - 29


def test_a_notice_after_its_deadline_is_drained_at_once_and_reported(tmp_path: Path) -> None:
    """By a clock five minutes ahead the 2-minute notice's deadline has passed on arrival: the
    workload is still signalled at once, and the drain's events say it ended past the
    deadline (a negative margin) instead of nothing happening."""
    marker = f"spotcap-late-notice-{tmp_path.name}"
    proc = workload(marker)
    try:
        clock = SkewedClock(300.0)
        drainer, local, events = _drainer(tmp_path, clock, marker)
        note = notice(deadline_s=TERM_S)
        request = drainer.request_for(bundle(checkpoint_method="none"),
                                      workload_id="etl", trigger="notice",
                                      cause_event_id=note.event_id,
                                      deadline_at_us=note.deadline_at_us,
                                      issued_at_us=note.issued_at_us)  # fmt: skip
        assert Deadline(clock, request.deadline_at_us, 0.0).expired()
        drainer.run(request, local, time.monotonic())
        assert proc.wait(timeout=30) != 0  # signalled, not left running
    finally:
        reap([proc])
    started = [e for e in events if isinstance(e.payload, DrainStarted)]
    done = [e.payload for e in events if isinstance(e.payload, DrainCompleted)]
    assert len(started) == 1 and len(done) == 1
    margin_s = done[0].deadline_margin_s
    assert margin_s is not None and margin_s < 0
