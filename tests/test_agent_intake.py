"""The agent end to end on the local path: a real nats-server and the metadata endpoint deliver
notices, the agent drains real processes from its signed bundle alone, records every step in the
spool, and keeps working with NATS and the control plane both down (fail-static)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from agent.config import AgentConfig
from agent.service import Agent
from infra import servers
from provider.notices import MetadataServer, NoticeBoard, NoticeRelay
from schemas.events import DrainPath
from schemas.notices import ReclaimAdvisory
from tests.agent_support import (
    bundle,
    config,
    notice,
    of_type,
    reap,
    spool_events,
    wait_async,
    wait_for,
    workload,
    write_bundle,
)

POLL_S = 0.05


def _local_config(tmp_path: Path, marker: str, **tables: Any) -> AgentConfig:
    return config(
        tmp_path,
        local={"match_cmdline": [marker], "term_grace_s": 5.0},
        drain={"safety_margin_s": 1.0},
        **tables,
    )


def test_a_notice_over_nats_drains_the_workload_once_and_records_every_step(
    tmp_path: Path, nats: servers.Server
) -> None:
    marker = f"spotcap-wl-{tmp_path.name}"
    write_bundle(tmp_path, bundle(scheduler="slurm"))  # no Slurm on this node: local path
    procs = [workload(marker, trap_term=True) for _ in range(3)]
    cfg = _local_config(
        tmp_path, marker, notices={"nats": [nats.address], "poll_interval_s": POLL_S}
    )

    async def scenario() -> None:
        board = NoticeBoard()
        async with MetadataServer(board) as metadata:
            cfg2 = _with_metadata(cfg, metadata.url)
            async with Agent(cfg2, serve_metrics=False) as node:
                assert await node.intake.wait_subscribed(10.0)
                note = notice(cfg.instance_id, deadline_s=60)
                relay = await NoticeRelay.connect(nats.address)
                await relay.publish(note)
                board.post(note)  # the same notice by the poll: a late copy, ignored
                await relay.publish(note)  # and again by NATS: a duplicate, ignored
                await relay.close()
                await wait_async(lambda: bool(node.drainer.outcomes), 20.0, "the drain")
                await wait_async(lambda: node.intake.duplicates != {}, 5.0, "the late copy")
                assert node.deliveries == 1

    asyncio.run(scenario())
    try:
        assert all(p.wait(timeout=5) == 0 for p in procs)  # each exited on its SIGTERM
        assert all(p.stdout is not None and p.stdout.read() == b"term\n" for p in procs)
    finally:
        reap(procs)
    lines = spool_events(cfg.spool_dir)
    types = [line["event_type"] for line in lines]
    assert types.count("notice_received") == 1
    assert types.count("drain_started") == 1 and types.count("drain_completed") == 1
    (received,) = of_type(lines, "notice_received")
    assert received["source"] == "nats"
    (started,) = of_type(lines, "drain_started")
    assert started["path"] == "local" and started["trigger"] == "notice"
    assert started["drain_budget_s"] == 90
    (done,) = of_type(lines, "drain_completed")
    assert done["path"] == "local" and done["verified"] and not done["fell_back_to_local"]
    assert not done["overrun"] and done["deadline_margin_s"]["double"] > 30
    (checkpoint,) = of_type(lines, "checkpoint_triggered")
    assert checkpoint["outcome"] == "failed"  # no trigger command configured for the method
    started_line = next(line for line in lines if line["event_type"] == "drain_started")
    notice_line = next(line for line in lines if line["event_type"] == "notice_received")
    assert started_line["event"]["causation_id"] == {"string": notice_line["event_id"]}


def _with_metadata(cfg: AgentConfig, url: str) -> AgentConfig:
    import dataclasses

    return dataclasses.replace(cfg, notices=dataclasses.replace(cfg.notices, metadata_url=url))


def test_fail_static_nats_and_control_plane_down_the_metadata_poll_carries_the_notice(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing but the metadata endpoint runs: NATS points at a closed port, there is no
    Kafka and no control plane; the bundle file was altered after signing, so the agent
    refuses it and acts on the last good bundle it verified before."""
    marker = f"spotcap-wl-{tmp_path.name}"
    bundle_file = write_bundle(tmp_path, bundle(drain_budget_s=45, checkpoint_method="pytorch"))
    (port,) = servers.process.free_ports(1)
    script = tmp_path / "ckpt.py"
    script.write_text('print("checkpointing"); print(\'{"written_bytes": 4096, "generation": 7}\')')
    cfg = _local_config(
        tmp_path,
        marker,
        notices={"nats": [f"nats://127.0.0.1:{port}"], "poll_interval_s": POLL_S},
        checkpoint={"pytorch": [sys.executable, str(script)]},
    )
    # A first start verifies the bundle and keeps it as the last good one.
    first = Agent(cfg, serve_metrics=False)
    assert first.bundles.load() is not None
    first.writer.close()
    bundle_file.write_bytes(
        bundle_file.read_bytes().replace(b'"drain_budget_s":45', b'"drain_budget_s":9')
    )
    procs = [workload(marker)]

    async def scenario() -> None:
        board = NoticeBoard()
        async with MetadataServer(board) as metadata:
            node = Agent(_with_metadata(cfg, metadata.url), serve_metrics=False)
            async with node:
                assert node.bundles.origin == "last-good"
                assert node.bundles.current is not None
                assert node.bundles.current.drain_budget_s == 45
                board.post(notice(cfg.instance_id, deadline_s=30))
                await wait_async(lambda: bool(node.drainer.outcomes), 20.0, "the drain")

    with caplog.at_level(logging.ERROR, logger="agent.bundle"):
        asyncio.run(scenario())
    try:
        assert procs[0].wait(timeout=5) != 0  # SIGTERM, no handler
    finally:
        reap(procs)
    assert any(
        "refusing the bundle" in r.message and "tampered" in r.message for r in caplog.records
    )
    lines = spool_events(cfg.spool_dir)
    (received,) = of_type(lines, "notice_received")
    assert received["source"] == "metadata"
    (started,) = of_type(lines, "drain_started")
    assert started["drain_budget_s"] == 45
    (done,) = of_type(lines, "drain_completed")
    assert done["verified"] and done["path"] == "local"
    (triggered,) = of_type(lines, "checkpoint_triggered")
    assert triggered["outcome"] == "written" and triggered["method"] == "pytorch"
    (written,) = of_type(lines, "checkpoint_written")
    assert written == {
        "instance_id": cfg.instance_id,
        "workload_id": "etl",
        "generation": 7,
        "written_bytes": 4096,
        "duration_s": written["duration_s"],
        "final": True,
    }


def test_an_unsigned_bundle_is_refused_and_the_agent_still_drains_from_the_deadline(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    marker = f"spotcap-wl-{tmp_path.name}"
    write_bundle(tmp_path, signed=False)
    procs = [workload(marker)]
    cfg = _local_config(tmp_path, marker, notices={"poll_interval_s": POLL_S})

    async def scenario() -> None:
        board = NoticeBoard()
        async with MetadataServer(board) as metadata:
            node = Agent(_with_metadata(cfg, metadata.url), serve_metrics=False)
            async with node:
                assert node.bundles.current is None
                board.post(notice(cfg.instance_id, deadline_s=30))
                await wait_async(lambda: bool(node.drainer.outcomes), 20.0, "the drain")

    with caplog.at_level(logging.ERROR, logger="agent.bundle"):
        asyncio.run(scenario())
    reap(procs)
    assert any("unsigned" in r.message and "not signed" in r.message for r in caplog.records)
    (done,) = of_type(spool_events(cfg.spool_dir), "drain_completed")
    assert done["verified"]


@pytest.mark.parametrize("proactive", [False, True])
def test_an_advisory_drains_only_where_the_contract_enables_proactive_drain(
    tmp_path: Path, nats: servers.Server, proactive: bool
) -> None:
    marker = f"spotcap-wl-{tmp_path.name}"
    write_bundle(tmp_path, bundle(proactive_drain_on_advisory=proactive))
    procs = [workload(marker)]
    cfg = _local_config(
        tmp_path, marker, notices={"nats": [nats.address]}, metrics_listen="127.0.0.1:0"
    )

    async def scenario() -> str:
        async with Agent(cfg) as node:
            assert await node.intake.wait_subscribed(10.0)
            now_us = notice().issued_at_us
            advisory = ReclaimAdvisory(
                event_id=notice().event_id,
                region=cfg.region,
                instance_id=cfg.instance_id,
                pool_id="pool-1",
                expected_reclaim_at_us=now_us + 300_000_000,
                issued_at_us=now_us,
            )
            relay = await NoticeRelay.connect(nats.address)
            await relay.publish(advisory)
            await relay.close()
            await wait_async(lambda: node.deliveries == 1, 10.0, "the advisory")
            if proactive:
                await wait_async(lambda: bool(node.drainer.outcomes), 20.0, "the drain")
            else:
                await asyncio.sleep(0.3)
            assert node.metrics_port is not None
            url = f"http://127.0.0.1:{node.metrics_port}/metrics"
            return await asyncio.to_thread(
                lambda: urllib.request.urlopen(url, timeout=5).read().decode()
            )

    scraped = asyncio.run(scenario())
    try:
        assert (procs[0].poll() is not None) is proactive
    finally:
        reap(procs)
    assert 'spotcap_agent_notices_total{kind="advisory",source="nats"} 1.0' in scraped
    started = of_type(spool_events(cfg.spool_dir), "drain_started")
    assert [s["trigger"] for s in started] == (["advisory"] if proactive else [])
    if proactive:
        assert 'spotcap_agent_drain_duration_seconds_count{path="local"} 1.0' in scraped


def test_a_full_disk_is_reported_and_the_drain_still_happens(tmp_path: Path) -> None:
    from tests.test_agent_spool import small_tmpfs

    marker = f"spotcap-wl-{tmp_path.name}"
    write_bundle(tmp_path)
    procs = [workload(marker)]
    with small_tmpfs(tmp_path / "disk", 64) as disk:
        filler = disk / "filler"
        with filler.open("wb") as f, contextlib.suppress(OSError):
            f.write(b"\0" * 70 * 1024)  # the node's disk is full before the notice comes
        cfg = _local_config(
            tmp_path, marker, state_dir=str(disk / "state"), notices={"poll_interval_s": POLL_S}
        )

        async def scenario() -> tuple[int, float]:
            board = NoticeBoard()
            async with MetadataServer(board) as metadata:
                node = Agent(_with_metadata(cfg, metadata.url), serve_metrics=False)
                async with node:
                    board.post(notice(cfg.instance_id, deadline_s=30))
                    await wait_async(lambda: bool(node.drainer.outcomes), 20.0, "the drain")
                    # notice, drain started, drain completed: all wait in memory
                    await wait_async(lambda: node.writer.backlog >= 3, 10.0, "the spool error")
                    (outcome,) = node.drainer.outcomes
                    assert outcome.result.verified
                    errors = node.metrics.registry.get_sample_value(
                        "spotcap_agent_spool_write_errors_total"
                    )
                    return node.writer.backlog, errors or 0.0

        backlog, errors = asyncio.run(scenario())
        try:
            assert procs[0].wait(timeout=5) != 0  # drained although nothing could be written
        finally:
            reap(procs)
        assert backlog >= 3 and errors >= 1


def test_a_repeated_drain_of_the_same_notice_writes_the_same_event_ids(tmp_path: Path) -> None:
    """An agent restarted mid-drain sees the notice again (the metadata poll) and repeats the
    drain: its events carry the same ids, so consumers keep one of each."""
    from agent.clock import WallClock
    from agent.drain.local import LocalDrain
    from agent.drainer import Drainer
    from agent.records import Recorder
    from schemas.events import Envelope

    cfg = config(tmp_path)
    note = notice(cfg.instance_id, deadline_s=60)
    runs: list[list[Envelope]] = []
    for _ in range(2):
        events: list[Envelope] = []
        local = LocalDrain(cfg.local)
        drainer = Drainer(
            cfg,
            {"local": local},
            Recorder(cfg.region, cfg.producer, WallClock(), events.append),
            WallClock(),
        )
        request = drainer.request_for(
            bundle(),
            workload_id="etl",
            trigger="notice",
            cause_event_id=note.event_id,
            deadline_at_us=note.deadline_at_us,
        )
        drainer.run(request, local, 0.0)
        runs.append(events)
    first, second = ([(e.event_type, e.event_id) for e in run] for run in runs)
    assert first == second and len(first) >= 3


class _Gated:
    """A drain path that notes when each drain starts and ends, and how many of its drains ran
    at once at most, and, for the causes in `gated`, waits for `gate` (bounded) before its
    signal, as a drain waiting on its scheduler does."""

    name: DrainPath = "local"

    def __init__(self, gated: set[str]) -> None:
        import threading

        self.gated = gated
        self.gate = threading.Event()
        self.steps: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._running = 0
        self.most_running = 0

    def drain(self, ctx: Any) -> Any:
        from agent.drain.base import DrainResult

        cause = ctx.request.cause_event_id
        with self._lock:
            self._running += 1
            self.most_running = max(self.most_running, self._running)
            self.steps.append(("start", cause))
        try:
            if cause in self.gated:
                assert self.gate.wait(60.0), "the test never opened the gate"
            ctx.mark_signal()
        finally:
            with self._lock:
                self._running -= 1
                self.steps.append(("end", cause))
        return DrainResult("local", True, False, "test")


def _gated_drainers(tmp_path: Path, pool: Any, instances: tuple[str, ...]) -> list[Any]:
    from agent.clock import WallClock
    from agent.drainer import Drainer
    from agent.records import Recorder

    drainers = []
    for instance in instances:
        cfg = config(tmp_path / instance, instance)
        drainer = Drainer(cfg, {"local": _Gated(set())}, Recorder(cfg.region, cfg.producer,
                          WallClock(), lambda _: None), WallClock(), pool=pool)  # fmt: skip
        drainer.start_thread()
        drainers.append(drainer)
    return drainers


def _start(drainer: Any, instance: str, *, gated: bool = False) -> str:
    """Hand a new notice's drain to `drainer` (held at its signal if `gated`); its cause."""
    path = drainer.path_for(None)
    note = notice(instance)
    if gated:
        path.gated.add(note.event_id)
    request = drainer.request_for(bundle(), workload_id="etl", trigger="notice",
                                  cause_event_id=note.event_id,
                                  deadline_at_us=note.deadline_at_us)  # fmt: skip
    assert drainer.start(request, path, 0.0)
    assert not drainer.start(request, path, 0.0), "a cause is drained once"
    return note.event_id


@pytest.mark.parametrize("first_running", [False, True], ids=["queued", "running"])
def test_a_blocked_drain_holds_back_no_other_agents_drain_and_an_agents_drains_run_in_order(
    tmp_path: Path, first_running: bool
) -> None:
    """Agents of one process share the drain pool: while agent A's drain waits on its scheduler,
    agent B's drain runs to its end; A's second notice is drained after its first, never beside,
    though the pool has threads to spare, whether the second came while the first still waited
    for a thread or while it ran, and whatever a wait for A's drains that times out says.

    Once A's first drain is at its path and every other job handed to the pool has finished
    (`busy() == (1, 0)`), a second drain of A handed to the pool on its own would have run:
    what A's path saw then is the whole answer, with no timing in it. (Before, the test looked
    as soon as B's drain ended, and under load A's first drain had sometimes not reached its
    path yet: 6 in 300 runs saw no step of A's at all, not a second drain beside the first.)"""
    from agent.drainer import DrainPool

    pool = DrainPool()
    for _ in range(4):
        pool.reserve()  # threads to spare: a second drain of A would find one
    a, b = _gated_drainers(tmp_path, pool, ("i-0000a", "i-0000b"))
    a_path, b_path = a.path_for(None), b.path_for(None)
    assert pool.threads == 6
    first = _start(a, "i-0000a", gated=True)
    if first_running:
        wait_for(lambda: a_path.steps == [("start", first)], 30.0, "A's first drain to start")
    second = _start(a, "i-0000a")
    other = _start(b, "i-0000b")
    assert b.wait(30.0), "agent B's drain waited for agent A's blocked drain"
    assert b_path.steps == [("start", other), ("end", other)]
    assert not a.wait(0.0), "A's first drain ended though its gate is shut"
    wait_for(
        lambda: ("start", first) in a_path.steps and pool.busy() == (1, 0),
        30.0,
        "A's first drain to start and every other job handed to the pool to finish",
    )
    assert a_path.steps == [("start", first)], "A's second drain ran beside its first"
    a_path.gate.set()
    assert a.wait(30.0)
    assert a_path.steps == [("start", first), ("end", first), ("start", second), ("end", second)]
    assert a_path.most_running == 1
    for _ in range(4):
        pool.release()
    for drainer in (a, b):
        drainer.stop(5.0)
    wait_for(lambda: pool.threads == 0, 30.0, "the pool's threads to end once given back")


def test_many_agents_drains_on_a_pool_of_many_threads_each_run_one_at_a_time_in_order(
    tmp_path: Path,
) -> None:
    """Forty drains of each of three agents handed to a pool of eight threads, interleaved and
    back to back, each agent's first drain held until all are handed over: every drain runs,
    each agent's in the order they came and never two of one agent at once."""
    from agent.drainer import DrainPool

    pool = DrainPool()
    for _ in range(5):
        pool.reserve()
    instances = ("i-0000a", "i-0000b", "i-0000c")
    drainers = _gated_drainers(tmp_path, pool, instances)
    assert pool.threads == 8
    causes: list[list[str]] = [[] for _ in instances]
    for turn in range(40):
        for which, (drainer, instance) in enumerate(zip(drainers, instances, strict=True)):
            causes[which].append(_start(drainer, instance, gated=turn == 0))
    for drainer in drainers:
        drainer.path_for(None).gate.set()
    for drainer, sent in zip(drainers, causes, strict=True):
        assert drainer.wait(60.0), "an agent's drains did not all run"
        path = drainer.path_for(None)
        assert path.steps == [(step, cause) for cause in sent for step in ("start", "end")]
        assert path.most_running == 1
    for _ in range(5):
        pool.release()
    for drainer in drainers:
        drainer.stop(5.0)
    wait_for(lambda: pool.threads == 0, 30.0, "the pool's threads to end once given back")


def test_a_wave_of_drains_in_one_process_wakes_few_threads_and_runs_every_drain() -> None:
    """A hundred lanes handed to the pool back to back while its one awake thread is busy run on
    a few threads, not one each (a thread woken per notice cost 40-80 µs of CPU a notice in
    `bench/agent.py`), and every one of them runs."""
    import threading

    from agent.drainer import DrainPool

    pool = DrainPool()
    for _ in range(50):
        pool.reserve()
    assert pool.threads == 50
    busy = threading.Event()
    ran: list[int] = []
    done = threading.Event()

    def quick() -> None:
        ran.append(threading.get_ident())
        if len(ran) == 100:
            done.set()

    def hold() -> None:
        busy.wait(60.0)

    pool.submit(hold)
    for _ in range(100):
        pool.submit(quick)
    assert done.wait(60.0), f"{len(ran)} of 100 jobs ran"
    assert len(set(ran)) < 50, f"{len(set(ran))} threads woken for 100 quick jobs"
    assert pool.wakes < 50, f"{pool.wakes} wakes for 100 quick jobs"
    busy.set()
    for _ in range(50):
        pool.release()
    wait_for(lambda: pool.threads == 0, 30.0, "the pool's threads to end once given back")
