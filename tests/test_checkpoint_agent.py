"""The agent and the checkpoint client on one node: a unit connects to the agent's channel and
its periodic generations are recorded with the client's own figures; on a notice the agent
tells it, waits for its final checkpoint before draining, and reports whether it was made; and
``checkpoint_written`` from the real client reaches the ledger (spool, log, catch-up)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from agent.service import Agent
from agent.ship import SpoolShipper
from infra import servers
from projections.catchup import Writer, catch_up
from projections.ledger.store import ChdbStore
from schemas.checkpoints import Hello, Welcome, decode, encode
from schemas.codec import Codec
from schemas.notices import Delivery
from streams.embedded import EmbeddedLog
from streams.topics import region_topics
from tests.agent_support import (
    REGION,
    bundle,
    config,
    notice,
    of_type,
    reap,
    spool_events,
    wait_async,
    write_bundle,
)
from tests.checkpoint_support import make_workload

REPO = Path(__file__).resolve().parent.parent


def test_a_units_checkpoints_are_recorded_its_final_one_waited_for_and_priced(
    tmp_path: Path, versitygw: servers.Server, openbao: servers.Server, ledger_store: ChdbStore
) -> None:
    wl = make_workload(versitygw, openbao)
    marker = f"spotcap-unit-{tmp_path.name}"
    write_bundle(tmp_path, bundle(workload_id=wl.workload_id, checkpoint_method="application"))
    sock = tmp_path / "checkpoint.sock"
    cfg = config(
        tmp_path,
        checkpoint={"socket": str(sock), "timeout_s": 60.0},
        local={"match_cmdline": [marker], "term_grace_s": 10.0},
    )
    env = wl.child_env("unit-a", socket=str(sock), interval_s=0.3, steps=10**6, step_s=0.02)
    procs: list[subprocess.Popen[bytes]] = []

    async def scenario() -> Agent:
        async with Agent(cfg, serve_metrics=False) as node:
            assert node.channel is not None
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tests.checkpoint_workload", marker],
                    env=env,
                    cwd=REPO,
                    stdout=subprocess.PIPE,
                )
            )
            channel = node.channel
            await wait_async(lambda: len(channel.written) >= 2, 120, "two periodic checkpoints")
            note = notice(cfg.instance_id, deadline_s=90, workload=wl.workload_id)
            node.handle(Delivery(note, "metadata", note.issued_at_us))
            await wait_async(lambda: bool(node.drainer.outcomes), 120, "the drain")
            return node

    try:
        node = asyncio.run(scenario())
        out = procs[0].communicate(timeout=30)[0].decode().splitlines()
    finally:
        reap(procs)
    assert json.loads(out[0])["method"] == "application"  # the bundle, as the agent holds it
    final_step = json.loads(out[-1])["final"]

    (outcome,) = node.drainer.outcomes
    assert outcome.checkpoint is not None and outcome.checkpoint.outcome == "written"
    assert outcome.result.verified  # the unit had stopped by itself after its final checkpoint
    lines = spool_events(cfg.spool_dir)
    written = of_type(lines, "checkpoint_written")
    periodic, final = written[:-1], written[-1]
    assert len(periodic) >= 2 and not any(w["final"] for w in periodic)
    assert final["final"] and final["workload_id"] == wl.workload_id
    generations = wl.client("unit-a").generations()
    assert [w["generation"] for w in written] == list(range(1, len(written) + 1))
    newest = generations[-1]
    assert (newest.generation, newest.step, newest.final) == (final["generation"], final_step, True)
    assert final["written_bytes"] == newest.written_bytes and final["duration_s"] > 0
    (triggered,) = of_type(lines, "checkpoint_triggered")
    assert triggered["outcome"] == "written" and "unit-a" in triggered["detail"]["string"]
    started = [line["event_type"] for line in lines]
    # told and waited for before the drain ended: the final checkpoint precedes drain_completed
    assert (
        started.index("drain_started")
        < len(started) - 1 - started[::-1].index("checkpoint_written")
        < started.index("drain_completed")
    )

    # The real figures reach the ledger: ship the spool into the log, catch the ledger up.
    in_ledger = _ship_and_project(cfg.spool_dir, tmp_path / "log", ledger_store)
    assert [(p["generation"], p["written_bytes"]) for p in in_ledger] == [
        (w["generation"], w["written_bytes"]) for w in written
    ]
    lines_rows = ledger_store.query(
        "SELECT count() AS n, sum(quantity) AS gb_months FROM ledger_lines FINAL"
        " WHERE cause = 'checkpoint_storage' AND workload_id = {w:String}",
        {"w": wl.workload_id},
    )
    assert lines_rows[0]["n"] == len(written)
    total = sum(w["written_bytes"] for w in written)
    assert abs(lines_rows[0]["gb_months"] - total * 7 / (1e9 * 30)) < 1e-12


def _ship_and_project(spool_dir: Path, log_dir: Path, ledger: ChdbStore) -> list[dict[str, Any]]:
    """The spool shipped into an embedded log, the ledger caught up from it: the payloads of
    the ledger's checkpoint_written events, oldest first."""
    log = EmbeddedLog(log_dir)
    log.apply_topics(region_topics(REGION))
    shipper = SpoolShipper(spool_dir, log, Codec(), REGION)
    shipper.ship_once()
    shipper.close()
    catch_up(log, Codec(), REGION, Writer("ledger", ledger=ledger))
    log.close()
    rows = ledger.query(
        "SELECT payload FROM events FINAL WHERE event_type = 'checkpoint_written'"
        " ORDER BY occurred_at"
    )
    return [json.loads(r["payload"]) for r in rows]


def test_a_unit_that_does_not_answer_is_reported_and_the_drain_goes_on(tmp_path: Path) -> None:
    write_bundle(tmp_path, bundle(checkpoint_method="application", drain_budget_s=3))
    sock = tmp_path / "checkpoint.sock"
    cfg = config(tmp_path, checkpoint={"socket": str(sock), "timeout_s": 60.0})

    async def scenario() -> Agent:
        async with Agent(cfg, serve_metrics=False) as node:
            silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            silent.connect(str(sock))
            silent.sendall(encode(Hello("etl", "unit-silent", 1)))
            welcome = decode(silent.makefile("rb").readline())
            assert isinstance(welcome, Welcome) and welcome.drain_budget_s == 3
            note = notice(cfg.instance_id, deadline_s=60)
            node.handle(Delivery(note, "metadata", note.issued_at_us))
            await wait_async(lambda: bool(node.drainer.outcomes), 300, "the drain")
            silent.close()
            return node

    node = asyncio.run(scenario())
    (outcome,) = node.drainer.outcomes
    assert outcome.checkpoint is not None and outcome.checkpoint.outcome == "timed_out"
    assert "unit-silent" in (outcome.checkpoint.detail or "")
    # Bounded by the contract's 3 s drain budget, not the notice's 60 s: the drain ended before
    # its deadline, by the agent's own measure.
    assert outcome.deadline_margin_s > 0
    (triggered,) = of_type(spool_events(cfg.spool_dir), "checkpoint_triggered")
    assert triggered["outcome"] == "timed_out"
    assert not of_type(spool_events(cfg.spool_dir), "checkpoint_written")
