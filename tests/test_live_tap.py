"""The live region's tap (`sim.live.tap`): the served region's own facts go to the log, what
the actuator writes from the adapter does not, and the simulated agents drain each notice of
spotcap's instances under the ids a real agent derives from it (`agent.drainer`)."""

from __future__ import annotations

import time
from pathlib import Path

from schemas.codec import Codec
from schemas.events import DrainCompleted, DrainStarted, Envelope, NoticeReceived
from schemas.ids import derived_event_id
from sim.clock import SECOND_US
from sim.cloud import CloudRegion
from sim.live import RegionTap, Scenario, SimulatedAgents
from sim.live.tap import WRITTEN_BY_THE_ACTUATOR
from streams.embedded import EmbeddedLog
from streams.merged import MergedHistory
from streams.topics import EVENT_TOPICS, region_topics

NOW_US = 1_800_000_000_000_000


def _notice(instance_id: str, deadline_s: int = 120) -> Envelope:
    payload = NoticeReceived(instance_id, "c3.8.hall-a.reclaimable", "wl-1",
                             NOW_US + deadline_s * SECOND_US, "metadata")  # fmt: skip
    return Envelope(
        event_id=derived_event_id("tests/tap", instance_id),
        event_type=payload.EVENT_TYPE,
        occurred_at=NOW_US,
        recorded_at=NOW_US,
        region="tap",
        key=instance_id,
        causation_id=None,
        correlation_id="wave-0001",
        producer="provider/openstack",
        payload=payload,
    )


def test_a_simulated_agent_drains_a_notice_in_time_under_the_agents_ids() -> None:
    agents = SimulatedAgents("tap", drain_s=30)
    notice = _notice("i-1")
    agents.noticed(notice)
    agents.real.add("i-2")
    agents.noticed(_notice("i-2"))  # a real agent's node: nothing simulated
    assert agents.due(NOW_US) == []  # the agent acts a second after the notice
    started, done = agents.due(NOW_US + 60 * SECOND_US)
    assert isinstance(started.payload, DrainStarted) and isinstance(done.payload, DrainCompleted)
    assert started.event_id == derived_event_id(notice.event_id, "drain_started")
    assert started.causation_id == notice.event_id and done.causation_id == started.event_id
    assert started.occurred_at == NOW_US + SECOND_US
    assert done.occurred_at == started.occurred_at + 30 * SECOND_US
    assert done.payload.verified and not done.payload.overrun
    assert agents.due(NOW_US + 600 * SECOND_US) == []  # each once


def test_the_tap_writes_the_regions_own_facts_and_leaves_the_actuators(tmp_path: Path) -> None:
    config = Scenario(region="tap", span_s=3 * 3600, workloads=4).sim_config()
    region = CloudRegion(config, speed=1e6)  # three sim hours in about 11 ms of wall time
    log = EmbeddedLog(tmp_path / "log")
    log.apply_topics(region_topics("tap"))
    codec = Codec()
    published: list[Envelope] = []
    region.on_every(published.append)
    tap = RegionTap(region, log, codec, flush_s=0.05)
    tap.start()
    region.open()
    deadline = time.monotonic() + 120
    while region.advance() < config.end_us:
        assert time.monotonic() < deadline, "the region did not reach its end"
        time.sleep(0.01)
    expected = [e for e in published if e.event_type not in WRITTEN_BY_THE_ACTUATOR]
    claims = [e for e in expected if e.event_type.startswith("capacity_")]
    assert claims
    # The claims wait for the release (the market on the log); everything else is written.
    while tap.written < len(expected) - len(claims):
        assert time.monotonic() < deadline, "the tap did not write the region's facts"
        time.sleep(0.05)
    time.sleep(0.2)  # a few more of the tap's rounds: still no claim
    assert tap.written == len(expected) - len(claims)
    tap.release_demand()
    tap.close()
    written = [d.envelope for d in MergedHistory(log, codec, "tap", EVENT_TOPICS)]
    assert expected and tap.written == len(written)
    assert sorted(e.event_id for e in written) == sorted(e.event_id for e in expected)
    kinds = {e.event_type for e in written}
    assert {"pool_registered", "contract_published", "capacity_claim_opened"} <= kinds
    assert not kinds & WRITTEN_BY_THE_ACTUATOR
