"""The simulator's loop forgets what was settled (`sim.loop.FORGET_AFTER_US`) and runs exactly
as a loop that remembers everything: its memory stays flat in the run's length (issue 26)."""

from __future__ import annotations

from typing import Any

from schemas.codec import Codec
from sim import RegionSim, SimConfig
from sim.clock import HOUR_US
from sim.loop import DecidersOrchestrator, owned_by

CONFIG = SimConfig(seed=1, days=0.5, region="bench")


def _run(forget_after_us: int | None) -> tuple[list[bytes], dict[str, Any]]:
    orchestrator_id = CONFIG.orchestrator.orchestrator_id
    driver = DecidersOrchestrator(
        orchestrator_id, owned_by(orchestrator_id), forget_after_us=forget_after_us
    )
    codec = Codec()
    sim = RegionSim(CONFIG, orchestrator=driver)
    written = [codec.encode(e) for batch in sim.run(HOUR_US) for e in batch]
    return written, driver.book.snapshot()


def test_the_loop_forgets_what_was_settled_and_writes_the_same_events() -> None:
    forgetting, kept = _run(HOUR_US)
    remembering, everything = _run(None)
    assert forgetting == remembering  # the same events, byte for byte, in the same order
    assert len(remembering) > 20_000
    # An hour's worth held instead of the run's: each kind of entry well under half.
    for key in ("causes", "gone", "finished"):
        assert len(everything[key]) > 500, key
        assert len(kept[key]) < len(everything[key]) / 2, key
    assert len(kept["claims"]) < len(everything["claims"])
