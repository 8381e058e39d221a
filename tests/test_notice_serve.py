"""The simulator serves the notice path the node agent uses (ADR-17): each notice on the
instance's NATS subject and on the metadata endpoint, against a real nats-server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats as nats_client
from nats.aio.msg import Msg

from agent.intake import NoticeIntake
from agent.metadata import fetch_notice
from infra import servers
from infra.servers import Server
from provider.notices import MetadataServer, NoticeBoard, NoticeRelay
from provider.notices.serve import NoticeDispatcher, serve_events
from schemas.events import Envelope, InstanceLost, NoticeReceived
from sim.region import SimConfig, simulate

CONFIG = SimConfig(seed=3, days=0.5, workloads=30, region="serve")


def sim_events() -> list[Envelope]:
    events = list(simulate(CONFIG))
    assert any(isinstance(e.payload, NoticeReceived) for e in events), "pick a seed with notices"
    return events


def test_every_notice_reaches_nats_and_the_metadata_board(nats: Server) -> None:
    events = sim_events()
    notices = {e.event_id: e for e in events if isinstance(e.payload, NoticeReceived)}

    async def run() -> tuple[dict[str, dict[str, object]], list[int]]:
        received: dict[str, dict[str, object]] = {}
        listener = await nats_client.connect(nats.address)

        async def store(msg: Msg) -> None:
            message = json.loads(msg.data)
            received[message["event_id"]] = message

        await listener.subscribe(f"spotcap.{CONFIG.region}.notice.>", cb=store)
        await listener.flush()
        board = NoticeBoard()
        pending_seen: list[int] = []
        async with await NoticeRelay.connect(nats.address) as relay:
            dispatcher = NoticeDispatcher(relay, board)
            for envelope in events:
                await dispatcher.dispatch(envelope)
                if isinstance(envelope.payload, NoticeReceived):
                    pending = board.pending(envelope.payload.instance_id)
                    assert pending is not None and pending.event_id == envelope.event_id
                    pending_seen.append(1)
                if isinstance(envelope.payload, InstanceLost):
                    assert board.pending(envelope.payload.instance_id) is None
        await listener.flush()
        for _ in range(50):
            if len(received) >= len(notices):
                break
            await asyncio.sleep(0.05)
        await listener.close()
        return received, pending_seen

    received, pending_seen = asyncio.run(run())
    assert set(received) == set(notices)
    for event_id, message in received.items():
        payload = notices[event_id].payload
        assert isinstance(payload, NoticeReceived)
        assert message["instance_id"] == payload.instance_id
        assert message["deadline_at"] == payload.deadline_at
    assert len(pending_seen) == len(notices)


def test_an_agent_gets_its_notice_from_the_metadata_poll_when_nats_is_down(
    tmp_path: Path,
) -> None:
    events = sim_events()
    first = next(e for e in events if isinstance(e.payload, NoticeReceived))
    assert isinstance(first.payload, NoticeReceived)
    instance_id = first.payload.instance_id
    relay_server = servers.start_nats(tmp_path / "nats")

    async def run() -> tuple[str, str, int]:
        board = NoticeBoard()
        async with MetadataServer(board) as metadata:
            relay = await NoticeRelay.connect(relay_server.address)
            subscriber = NoticeIntake(
                CONFIG.region,
                instance_id,
                nats_servers=[relay_server.address],
                metadata_url=metadata.url,
                poll_interval_s=0.05,
            )
            async with subscriber:
                await subscriber.wait_subscribed(5.0)
                servers.stop(relay_server)  # the relay goes away before the notice comes
                dispatcher = NoticeDispatcher(relay, board)
                upto = events.index(first) + 1
                await serve_events([events[:upto]], dispatcher)
                delivery = await subscriber.get(timeout_s=10.0)
                before_loss = await fetch_notice(metadata.url, instance_id)
            await relay.close()
        assert before_loss is not None
        return delivery.message.event_id, delivery.source, dispatcher.counts.relay_failures

    event_id, source, failures = asyncio.run(run())
    assert event_id == first.event_id
    assert source == "metadata"
    assert failures >= 1


def test_serve_paces_events_at_the_requested_speed() -> None:
    events = sim_events()[:200]
    now = [0.0]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    dispatcher = NoticeDispatcher(None, NoticeBoard())
    asyncio.run(
        serve_events([events], dispatcher, speed=3600.0, clock_s=lambda: now[0], sleep=sleep)
    )
    span_s = (events[-1].occurred_at - events[0].occurred_at) / 1e6
    assert abs(now[0] - span_s / 3600.0) < 1e-6


def test_the_serve_command_publishes_on_nats(nats: Server, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from spotcap.cli import main

    sim = ["--days", "0.5", "--workloads", "30", "--seed", "3", "--speed", "1000000", "--json"]
    result = CliRunner().invoke(
        main,
        [
            "--home",
            str(tmp_path),
            "--region",
            "serve",
            "notices",
            "serve",
            "--nats",
            nats.address,
            *sim,
        ],
    )
    assert result.exit_code == 0, result.output
    notices = sum(1 for e in sim_events() if isinstance(e.payload, NoticeReceived))
    counts = json.loads(result.stdout)
    assert counts["notices"] == notices
    assert counts["withdrawn"] == notices  # every noticed instance was lost by the end
    assert counts["relay_failures"] == 0


def test_the_counts_are_one_table_row_with_thousands_separators() -> None:
    from provider.notices.serve import DispatchCounts

    counts = DispatchCounts(notices=12_345, advisories=7, withdrawn=0, relay_failures=1_000)
    assert len(counts.row()) == len(DispatchCounts.COLUMNS)
    assert counts.row() == ("12,345", "7", "0", "1,000")
