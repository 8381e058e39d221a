"""The served cloud's notices and its clock: a reclaim reaches the node agent's real intake over
NATS and the metadata endpoint, and the adapter's notice feed, under one event id, and the
server is gone at the deadline; the region's own waves take the servers spotcap launched; and
the same seed and speed give the same events as the simulation run without a wall clock.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest
import requests

from agent.intake import NoticeIntake
from infra.servers import Server
from provider.base import OWNER_TAG, LaunchRequest, ReclaimRequest, owned_tags
from provider.openstack import InstanceNotFoundError
from schemas.events import NoticeReceived
from schemas.notices import Delivery, Notice, ReclaimAdvisory
from sim import ReclaimSettings
from sim.clock import HOUR_US, SECOND_US
from sim.cloud import ClockAnchor, CloudRegion, ServedCloud, SpeedClock
from tests.cloud_support import (
    OWNER,
    POOL,
    adapter,
    quiet_config,
    served_clouds,
    settle,
)

WAIT_S = 60.0  # a bound for what arrives in milliseconds on an idle machine


@pytest.fixture
def clouds() -> Iterator[Callable[..., ServedCloud]]:
    yield from served_clouds()


# -- the clock ----------------------------------------------------------------------------------


def test_sim_time_runs_at_the_declared_speed_from_its_anchor_and_stops_at_the_end() -> None:
    wall = [5_000_000]
    clock = SpeedClock(ClockAnchor(1_000_000_000, 5_000_000, 60.0, 1_000_000_000 + HOUR_US),
                       lambda: wall[0])  # fmt: skip
    assert clock.now_us() == 1_000_000_000
    wall[0] += 2 * SECOND_US  # two wall seconds: two sim minutes
    assert clock.now_us() == 1_000_000_000 + 120 * SECOND_US
    assert clock.wall_s_until(1_000_000_000 + 180 * SECOND_US) == pytest.approx(1.0)
    wall[0] += 3600 * SECOND_US
    assert clock.now_us() == clock.anchor.end_us and clock.ended
    again = SpeedClock.from_anchor(clock.anchor.to_dict())
    assert again.anchor == clock.anchor


# -- a reclaim, on every channel -------------------------------------------------------------


def test_a_reclaim_reaches_the_agents_intake_and_the_feed_under_one_id_then_the_server_goes(
    clouds: Callable[..., ServedCloud], nats: Server
) -> None:
    # At 60x a live region's pace: the notice stands on the metadata board for 2.5 s of wall
    # time, long enough for a poll every 50 ms on a loaded machine.
    cloud = clouds(nats_url=nats.address, speed=60.0)
    provider = adapter(cloud)
    region = cloud.access.region
    instance = provider.launch(LaunchRequest(POOL, "wl-a", owned_tags(OWNER, "wl-a")))
    board = cloud.access.metadata_url

    async def agents() -> tuple[list[Delivery], list[Delivery]]:
        by_nats = NoticeIntake(region, instance.instance_id, nats_servers=[nats.address])
        by_poll = NoticeIntake(region, instance.instance_id, metadata_url=board,
                               poll_interval_s=0.05)  # fmt: skip
        async with by_nats, by_poll:
            assert await by_nats.wait_subscribed(WAIT_S)
            reclaim = ReclaimRequest(instance.instance_id, 150, 60, "ex-1")
            scheduled = await asyncio.to_thread(provider.reclaim, reclaim)
            assert scheduled.deadline_at - scheduled.notice_at == 150 * SECOND_US
            heard = [await by_nats.get(WAIT_S), await by_nats.get(WAIT_S)]
            polled = [await by_poll.get(WAIT_S)]
        return heard, polled

    heard, polled = asyncio.run(agents())
    advisory, notice = (d.message for d in heard)
    assert isinstance(advisory, ReclaimAdvisory) and isinstance(notice, Notice)
    assert [d.source for d in heard] == ["nats", "nats"]
    (by_poll,) = polled
    assert by_poll.source == "metadata" and by_poll.message == notice
    assert (notice.workload_id, notice.pool_id) == ("wl-a", POOL)

    settle(cloud, notice.deadline_at_us + SECOND_US)
    events = provider.poll_events()
    (fed,) = [e for e in events if e.event_type == "notice_received"]
    assert fed.event_id == notice.event_id and fed.occurred_at == notice.issued_at_us
    assert isinstance(fed.payload, NoticeReceived)
    assert fed.payload.deadline_at == notice.deadline_at_us
    with pytest.raises(InstanceNotFoundError):
        provider.get(instance.instance_id)  # lost at the deadline
    assert provider.list_by_tag(OWNER_TAG, OWNER) == []
    gone = requests.get(f"{board}/v1/instances/{instance.instance_id}/notice", timeout=30)
    assert gone.status_code == 404  # the board forgets a notice once the instance is lost
    assert cloud.summary()["relay_failures"] == 0


def test_the_regions_own_wave_reclaims_what_spotcap_launched_through_the_api(
    clouds: Callable[..., ServedCloud],
) -> None:
    waves = ReclaimSettings(background=False, waves_per_day=6.0, wave_share=(0.5, 0.5),
                            no_notice_share=0.0, advisory_share=0.0)  # fmt: skip
    cloud = clouds(sim=quiet_config(reclaims=waves), speed=2400.0)
    # The seed's first wave in hall-a comes 5.3 sim hours in (8 s of wall time here): the
    # launches below are long done by then. The waves before it are in hall-b.
    wave = next(w for w in cloud.region.sim.reclaimer.waves if w.hall == "hall-a")
    provider = adapter(cloud)
    pool = POOL  # in hall-a
    launched = {
        provider.launch(LaunchRequest(pool, "wl-a", owned_tags(OWNER, "wl-a"))).instance_id
        for _ in range(2)
    }
    assert provider.now_us() < wave.start_us
    end_us = wave.start_us + (wave.spread_s + wave.path_s + 60) * SECOND_US
    settle(cloud, end_us)

    notices = [e for e in provider.poll_events() if e.event_type == "notice_received"]
    assert len(notices) == 1 and notices[0].key in launched  # half of the hall's two
    survivor = {i.instance_id for i in provider.list_by_tag(OWNER_TAG, OWNER)}
    assert survivor == launched - {notices[0].key}
    assert wave.start_us <= notices[0].occurred_at <= end_us


# -- determinism --------------------------------------------------------------------------------


def test_the_same_seed_and_speed_give_the_same_events_as_the_simulation_without_a_wall_clock(
    clouds: Callable[..., ServedCloud],
) -> None:
    busy = ReclaimSettings(waves_per_day=4.0)
    config = replace(quiet_config(reclaims=busy, workloads=12), rate_card_interval_s=300)
    marks = [config.start_us + h * HOUR_US for h in (1, 2)]
    one, two = clouds(sim=config, speed=7200.0), clouds(sim=config, speed=7200.0)
    other = clouds(sim=replace(config, seed=3), speed=7200.0)
    for cloud in (one, two, other):
        settle(cloud, marks[-1])

    wall = [0]  # the same region on a clock moved by hand: no wall time in it
    plain = CloudRegion(config, 1.0, wall=lambda: wall[0])
    plain.open()
    wall[0] = marks[-1] - config.start_us
    plain.advance()
    for at_us in marks:
        served = [
            requests.get(f"{c.access.base_url}/sim/v1/marks/{at_us}", timeout=30).json()
            for c in (one, two, other)
        ]
        expected = plain.digest_at(at_us)
        assert expected is not None and expected.events > 0
        assert served[0] == served[1] == {
            "at_us": at_us, "events": expected.events, "digest": expected.digest}  # fmt: skip
        assert served[2]["digest"] != expected.digest  # another seed, another history


def test_a_nats_that_does_not_answer_leaves_the_metadata_endpoint_carrying_the_notices(
    clouds: Callable[..., ServedCloud],
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        nowhere = f"nats://127.0.0.1:{probe.getsockname()[1]}"
    cloud = clouds(nats_url=nowhere, speed=60.0)
    assert not cloud.outlet.relay_connected
    provider = adapter(cloud)
    instance = provider.launch(LaunchRequest(POOL, "wl-a", owned_tags(OWNER, "wl-a")))

    async def agent() -> Delivery:
        board = cloud.access.metadata_url
        async with NoticeIntake(cloud.access.region, instance.instance_id, metadata_url=board,
                                poll_interval_s=0.05) as intake:  # fmt: skip
            await asyncio.to_thread(provider.reclaim, ReclaimRequest(instance.instance_id, 150))
            return await intake.get(WAIT_S)

    delivery = asyncio.run(agent())
    assert delivery.source == "metadata" and isinstance(delivery.message, Notice)
    assert cloud.summary()["relay_failures"] == 1  # the notice NATS could not carry
