"""The projections' link to PostgreSQL faulted (Toxiproxy): the fleet state's follower
(`projections.follow.follow`, what `spotcap run projections fleet` runs) writes through a proxy
that adds latency, then resets every connection for a moment. The follower exits on the lost
connection (its contract: a supervisor starts it again, and it resumes from the offsets stored
with its rows); the test is that supervisor. Afterwards the fleet tables equal a clean
projection of the same log into another database, row for row: nothing lost, nothing doubled."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from infra import servers
from projections.catchup import catch_up, open_writer
from projections.follow import follow
from projections.postgres.connection import FleetDatabaseError, connect
from projections.postgres.writer import FLEET_PROJECTION
from projections.stores import StoreError, Stores
from streams.embedded import EmbeddedLog
from streams.log import EventLog
from streams.topics import region_topics, topic_name
from streams.writer import EventWriter
from tests.projection_support import dump_fleet, sim_events
from tests.test_processing_chain import CODEC

pytestmark = pytest.mark.slow

FLEET = ("lifecycle", "market", "demand", "decisions", "usage")


def _database(postgres: servers.Server, name: str) -> str:
    with connect(postgres.address) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return postgres.address.rsplit("/", 1)[0] + f"/{name}"


def _ends(log: EventLog, region: str) -> dict[tuple[str, int], int]:
    ends: dict[tuple[str, int], int] = {}
    for logical in FLEET:
        name = topic_name(region, logical)
        ends.update({(name, p): o for p, o in log.end_offsets(name).items() if o})
    return ends


def _stored(dsn: str) -> dict[tuple[str, int], int]:
    """The offsets the fleet state stored with its rows (none before its schema exists)."""
    with connect(dsn) as conn:
        try:
            rows = conn.execute(
                "SELECT topic, partition, next_offset FROM consumed_offsets WHERE projection = %s",
                (FLEET_PROJECTION,),
            ).fetchall()
        except psycopg.errors.UndefinedTable:
            return {}
    return {(str(t), int(p)): int(o) for t, p, o in rows}


def _caught_up(dsn: str, ends: dict[tuple[str, int], int]) -> bool:
    stored = _stored(dsn)
    return all(stored.get(tp, 0) >= end for tp, end in ends.items())


@pytest.fixture
def log_and_region(tmp_path: Path) -> Iterator[tuple[EventLog, str]]:
    events = sim_events(days=0.25, workloads=20)
    region = events[0][1].region
    log = EmbeddedLog(tmp_path / "log")
    log.apply_topics(region_topics(region))
    writer = EventWriter(log, CODEC, region)
    for _, event in events:
        writer.write(event)
    writer.flush(60)
    yield log, region
    log.close()


class Supervised:
    """The follower under a supervisor (a thread here): started again whenever it ends, each
    run with a stop of its own (a follower that ends sets its stop, as its process would be
    gone), after a restart delay."""

    def __init__(self, log: EventLog, region: str, stores: Stores) -> None:
        self.exits: list[BaseException] = []
        self._args = (log, region, stores)
        self._stop = threading.Event()
        self._runs: list[threading.Event] = []
        self._thread = threading.Thread(target=self._supervise, name="supervisor", daemon=True)
        self._thread.start()

    def _supervise(self) -> None:
        log, region, stores = self._args
        while not self._stop.is_set():
            run = threading.Event()
            self._runs[:] = [run]
            if self._stop.is_set():
                break
            try:
                follow(log, CODEC, region, stores, ["fleet"], stop=run, interval_s=0.5)
            except Exception as exc:  # whatever ends it, it is started again
                self.exits.append(exc)
                self._stop.wait(1.0)

    def stop(self) -> bool:
        """Stop it; True once its thread ended."""
        self._stop.set()
        for run in self._runs:
            run.set()
        self._thread.join(60)
        return not self._thread.is_alive()


def clean_projection(log: EventLog, region: str, dsn: str, home: Path) -> dict[str, list[Any]]:
    """`spotcap project`'s catch-up of the same log into another database, no proxy."""
    writer = open_writer(Stores(home, postgres_dsn=dsn), "fleet")
    assert writer.fleet is not None
    try:
        catch_up(log, CODEC, region, writer)
        return dump_fleet(writer.fleet.conn)
    finally:
        writer.fleet.conn.close()


def test_the_fleet_follower_rides_out_latency_and_resets(
    tmp_path: Path,
    postgres: servers.Server,
    toxiproxy: servers.Server,
    log_and_region: tuple[EventLog, str],
) -> None:
    log, region = log_and_region
    suffix = uuid.uuid4().hex[:8]
    faulted_dsn, clean_dsn = (_database(postgres, f"{k}_{suffix}") for k in ("faulted", "clean"))
    port = faulted_dsn.split("@127.0.0.1:", 1)[1].split("/", 1)[0]
    proxy = servers.Toxiproxy(toxiproxy.address).proxy(f"postgres-{suffix}", f"127.0.0.1:{port}")
    through = faulted_dsn.replace(f"127.0.0.1:{port}", proxy.listen)
    ends = _ends(log, region)
    proxy.latency(30, jitter_ms=10)
    follower = Supervised(
        log, region, Stores(tmp_path / "home", postgres_dsn=through, region=region)
    )
    try:
        deadline = time.monotonic() + 120
        while not _stored(faulted_dsn) and time.monotonic() < deadline:
            time.sleep(0.2)  # some of the log applied (through the latency), not all of it
        assert not _caught_up(faulted_dsn, ends)
        proxy.reset_peer()
        time.sleep(2)
        proxy.heal()
        deadline = time.monotonic() + 180
        while not _caught_up(faulted_dsn, ends) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _caught_up(faulted_dsn, ends), "the follower did not catch up after the faults"
    finally:
        proxy.heal()
        assert follower.stop()
    assert follower.exits, "the reset reached the follower (it exited, and was started again)"
    assert all(isinstance(e, FleetDatabaseError | StoreError) for e in follower.exits), [
        repr(e) for e in follower.exits
    ]
    with connect(faulted_dsn) as conn:
        assert dump_fleet(conn) == clean_projection(log, region, clean_dsn, tmp_path / "clean")
