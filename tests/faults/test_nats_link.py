"""The agent's link to NATS faulted (Toxiproxy): a notice published while the link is a black
hole never reaches the agent over NATS (core NATS is at most once: the relay needs no
acknowledgement, ADR-17); what the platform promises is the metadata poll behind it, which
finds the same notice, and the agent drains from its signed bundle and the notice's own
deadline. When the link comes back the agent reconnects by itself and is subscribed again: the
same notice published once more arrives over NATS and is dropped as a duplicate, and the
workload was drained once."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from pathlib import Path

import pytest

from agent.config import AgentConfig
from agent.service import Agent
from infra import servers
from provider.notices import MetadataServer, NoticeBoard, NoticeRelay
from schemas.events import NoticeSource
from tests.agent_support import (
    bundle,
    config,
    notice,
    of_type,
    reap,
    spool_events,
    wait_async,
    workload,
    write_bundle,
)

pytestmark = pytest.mark.slow

POLL_S = 5.0  # the agent's default poll of the metadata endpoint


def with_metadata(cfg: AgentConfig, url: str) -> AgentConfig:
    return dataclasses.replace(cfg, notices=dataclasses.replace(cfg.notices, metadata_url=url))


def test_a_notice_published_during_a_partition_is_drained_from_the_poll(
    tmp_path: Path, nats: servers.Server, toxiproxy: servers.Server
) -> None:
    proxy = servers.Toxiproxy(toxiproxy.address).proxy(
        f"nats-{uuid.uuid4().hex[:8]}", nats.address.removeprefix("nats://")
    )
    marker = f"spotcap-wl-{tmp_path.name}"
    write_bundle(tmp_path, bundle(scheduler="slurm"))  # no Slurm on this node: local path
    procs = [workload(marker, trap_term=True)]
    cfg = config(
        tmp_path,
        local={"match_cmdline": [marker], "term_grace_s": 5.0},
        drain={"safety_margin_s": 1.0},
        notices={"nats": [f"nats://{proxy.listen}"], "poll_interval_s": POLL_S},
    )
    note = notice(cfg.instance_id, deadline_s=120)

    async def scenario() -> dict[NoticeSource, int]:
        board = NoticeBoard()
        relay = await NoticeRelay.connect(nats.address)
        metadata = MetadataServer(board)
        async with relay, metadata, Agent(with_metadata(cfg, metadata.url)) as node:
            assert await node.intake.wait_subscribed(10.0)
            proxy.partition()
            await relay.publish(note)  # the cloud's relay: into the black hole
            board.post(note)  # and on the instance's metadata endpoint
            await wait_async(lambda: bool(node.drainer.outcomes), 60.0, "the drain")
            assert node.deliveries == 1
            proxy.heal()  # the agent's connection is cut: it reconnects by itself
            deadline = asyncio.get_running_loop().time() + 60
            while not node.intake.duplicates.get("nats"):  # subscribed again: a duplicate
                assert asyncio.get_running_loop().time() < deadline, "the agent never reconnected"
                await relay.publish(note)
                await asyncio.sleep(0.5)
            assert node.deliveries == 1
            return dict(node.intake.duplicates)

    duplicates = asyncio.run(scenario())
    try:
        assert procs[0].wait(timeout=5) == 0  # it exited on its SIGTERM: drained
    finally:
        reap(procs)
    assert duplicates.get("nats", 0) >= 1
    lines = spool_events(cfg.spool_dir)
    (received,) = of_type(lines, "notice_received")
    assert received["source"] == "metadata"
    (started,) = of_type(lines, "drain_started")
    assert started["trigger"] == "notice"
    (done,) = of_type(lines, "drain_completed")
    assert done["verified"] and not done["overrun"]
