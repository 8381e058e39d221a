"""`spotcap run projections` and `spotcap run relay` as a person runs them: child processes
over a home (the embedded log, or the session's real Kafka; the home's embedded PostgreSQL and
chdb ledger), fed while they run, stopped with SIGTERM.

What is checked is what they leave: the fleet state's stored offsets and `spotcap query lag`
at the log's end offsets after each of two feeds, the state unchanged by a restart with nothing
new, and every capacity action of the outbox on the audit topic once, keyed by its id.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from infra import servers
from schemas.codec import Codec
from schemas.events import Envelope
from spotcap.config import Settings
from spotcap.wiring import open_log, stores
from streams.log import EventLog
from streams.topics import region_end_offsets, region_topics, topic_name
from streams.writer import publish
from tests.cli_support import SPOTCAP, spotcap
from tests.kube_support import wait_until
from tests.projection_support import dump_fleet, ended, process_tree, sim_events

pytestmark = pytest.mark.slow

WAIT_S = 240  # generous: a loaded 2-core machine, a PostgreSQL started on first use
FLEET = ("lifecycle", "market", "demand", "decisions", "usage")


@dataclasses.dataclass
class Service:
    """A `spotcap ... run NAME` child process; its stdout and stderr go to files."""

    argv: Sequence[str]
    folder: Path
    proc: subprocess.Popen[bytes] | None = None
    runs: int = 0

    def start(self) -> Service:
        self.runs += 1
        self.out = self.folder / f"service-{self.runs}.out"
        self.err = self.folder / f"service-{self.runs}.err"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTCAP_")}
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen([SPOTCAP, *self.argv], stdout=out, stderr=err, env=env)
        return self

    def said(self) -> str:
        return self.err.read_text()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> str:
        """SIGTERM; exit 0 expected; returns its stdout (the summary line)."""
        assert self.proc is not None and self.alive(), self.said()
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=WAIT_S) == 0, self.said()
        return self.out.read_text().strip()

    def kill(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(timeout=60)


@pytest.fixture
def services() -> Iterator[list[Service]]:
    """Every service a test starts, killed if the test left it running."""
    started: list[Service] = []
    yield started
    for service in started:
        service.kill()


def region_events(region: str) -> list[Envelope]:
    """A small simulated region's events, as region `region`."""
    return [dataclasses.replace(e, region=region) for _, e in sim_events(0.1, 10)]


def feed(settings: Settings, events: Sequence[Envelope]) -> None:
    """Write `events` to the home's log and let go of it (the embedded writer lock too)."""
    log = open_log(settings)
    try:
        log.apply_topics(region_topics(settings.region))
        publish(log, Codec(), settings.region, events)
    finally:
        log.close()


def ends(settings: Settings, logical: Sequence[str]) -> dict[tuple[str, int], int]:
    log: EventLog = open_log(settings)
    try:
        found = region_end_offsets(log, settings.region)
    finally:
        log.close()
    wanted = {topic_name(settings.region, t) for t in logical}
    return {(t, p): o for t, parts in found.items() if t in wanted and parts
            for p, o in parts.items() if o}  # fmt: skip


def fleet_offsets(settings: Settings) -> dict[tuple[str, int], int]:
    with stores(settings).open_fleet() as conn:
        rows = conn.execute("SELECT topic, partition, next_offset FROM consumed_offsets").fetchall()
    return {(t, p): o for t, p, o in rows}


def lag(settings: Settings, global_args: Sequence[str]) -> list[dict[str, Any]] | None:
    """`spotcap query lag --json` (None when it could not read: the ledger held by a round)."""
    done = spotcap(*global_args, "query", "lag", "--json", timeout_s=WAIT_S)
    return json.loads(done.stdout) if done.returncode == 0 else None


def caught_up(settings: Settings, global_args: Sequence[str], wanted: int) -> bool:
    """Both projections at the log's end, which holds `wanted` records of their topics."""
    rows = lag(settings, global_args)
    if not rows:
        return False
    by_projection = Counter[str]()
    for row in rows:
        if row["next_offset"] is None or row["lag"] != 0:
            return False
        by_projection[row["projection"]] += row["end_offset"]
    return by_projection["fleet"] == wanted and by_projection["ledger"] == wanted


def _home(tmp_path: Path, region: str, kafka: str | None = None) -> tuple[Settings, list[str]]:
    settings = Settings.load(home=tmp_path / "home", region=region, kafka_bootstrap=kafka)
    args = ["--home", str(settings.home), "--region", region]
    start_postgres(settings)
    return settings, [*args, "--kafka", kafka] if kafka else args


def start_postgres(settings: Settings) -> None:
    """The home's embedded PostgreSQL, started before anything else can start it: two
    processes starting one home's server at the same moment can stop each other's (one takes
    the other's new postmaster, not yet in its state file, for a stale one)."""
    stores(settings).open_fleet().close()


def _follow_two_feeds(
    tmp_path: Path, settings: Settings, args: list[str], services: list[Service]
) -> None:
    events = region_events(settings.region)
    half = len(events) // 2
    feed(settings, events[:half])
    follower = Service([*args, "run", "projections"], tmp_path)
    services.append(follower.start())
    try:
        first = sum(ends(settings, FLEET).values())
        wait_until(lambda: caught_up(settings, args, first) or not follower.alive(), WAIT_S,
                   "the first feed projected", every_s=1.0)  # fmt: skip
        assert follower.alive(), follower.said()
        feed(settings, events[half:])  # while it runs: the follower holds no writer lock
        everything = ends(settings, FLEET)
        assert sum(everything.values()) > first
        wait_until(lambda: caught_up(settings, args, sum(everything.values())), WAIT_S,
                   "the second feed projected", every_s=1.0)  # fmt: skip
        assert fleet_offsets(settings) == everything
        summary = follower.stop()
        taken = sum(everything.values())
        assert summary.startswith(f"fleet state: {taken} records taken; ledger: {taken} events")
        with stores(settings).open_fleet() as conn:
            before = dump_fleet(conn)
        # A restart with nothing new applies nothing and changes nothing.
        follower.start()
        wait_until(lambda: "fleet state: following" in follower.said() or not follower.alive(),
                   WAIT_S, "the restarted follower to follow")  # fmt: skip
        assert follower.stop() == (
            "fleet state: 0 records taken; ledger: 0 events in 0 rounds, 0 unpriced"
        )
        with stores(settings).open_fleet() as conn:
            assert dump_fleet(conn) == before
        assert "Traceback" not in follower.said()
    finally:
        stores(settings).stop_embedded_postgres()


def test_run_projections_follows_the_embedded_log_as_it_grows(
    tmp_path: Path, services: list[Service]
) -> None:
    settings, args = _home(tmp_path, "demo")
    _follow_two_feeds(tmp_path, settings, args, services)


def test_run_projections_follows_kafka_as_it_grows(
    tmp_path: Path, kafka: servers.Server, services: list[Service]
) -> None:
    settings, args = _home(tmp_path, f"follow-{uuid.uuid4().hex[:8]}", kafka.address)
    _follow_two_feeds(tmp_path, settings, args, services)


def test_a_follower_whose_database_went_away_stops_and_a_restart_resumes(
    tmp_path: Path, services: list[Service]
) -> None:
    settings, args = _home(tmp_path, "demo")
    events = region_events(settings.region)
    half = len(events) // 2
    feed(settings, events[:half])
    follower = Service([*args, "run", "projections", "fleet"], tmp_path)
    services.append(follower.start())
    try:
        first = ends(settings, FLEET)
        wait_until(lambda: fleet_offsets(settings) == first or not follower.alive(), WAIT_S,
                   "the first feed projected")  # fmt: skip
        assert follower.alive(), follower.said()
        assert stores(settings).stop_embedded_postgres()
        feed(settings, events[half:])  # a batch the database cannot take
        assert follower.proc is not None and follower.proc.wait(timeout=WAIT_S) == 1
        said = follower.said()
        assert "closed the connection" in said and "start the follower again" in said
        assert "Traceback" not in said
        # Started again with the database, it resumes where the rows stopped.
        start_postgres(settings)
        follower.start()
        everything = ends(settings, FLEET)
        wait_until(lambda: fleet_offsets(settings) == everything or not follower.alive(),
                   WAIT_S, "the rest projected")  # fmt: skip
        taken = sum(everything.values()) - sum(first.values())
        assert follower.stop() == (
            f"fleet state: {taken} records taken; ledger: 0 events in 0 rounds, 0 unpriced"
        )
    finally:
        stores(settings).stop_embedded_postgres()


def test_a_killed_follower_leaves_no_child_and_its_restart_reads_the_ledger(
    tmp_path: Path, services: list[Service]
) -> None:
    """SIGKILL runs nothing of the follower: the ledger's child (and the pool's resource
    tracker) must end by themselves, or they live on, orphaned, beside the follower started in
    its place (issue 27)."""
    settings, args = _home(tmp_path, "demo")
    events = region_events(settings.region)
    half = len(events) // 2
    try:
        feed(settings, events[:half])
        follower = Service([*args, "run", "projections", "--interval-s", "0.5"], tmp_path)
        services.append(follower.start())
        assert follower.proc is not None
        pid = follower.proc.pid
        # The ledger's rounds run in a child (every 0.5 s: it may be killed in a round, holding
        # the ledger, or between two).
        wait_until(lambda: "events applied" in follower.said() or not follower.alive(), WAIT_S,
                   "a round of the ledger's child")  # fmt: skip
        assert follower.alive(), follower.said()
        tree = process_tree(pid)[1:]
        assert tree, "the ledger's child ended before its follower was killed"
        follower.proc.kill()
        follower.proc.wait(timeout=60)
        wait_until(lambda: all(ended(p) for p in tree), WAIT_S,
                   f"the killed follower's children {tree} to end")  # fmt: skip
        # Nothing held: a follower started in its place projects the rest into the ledger.
        feed(settings, events[half:])
        follower.start()
        everything = sum(ends(settings, FLEET).values())
        wait_until(lambda: caught_up(settings, args, everything) or not follower.alive(),
                   WAIT_S, "the restarted follower to project the rest", every_s=1.0)  # fmt: skip
        assert follower.alive(), follower.said()
        summary = follower.stop()
        assert summary.startswith("fleet state: "), summary
        assert "Traceback" not in follower.said()
    finally:
        stores(settings).stop_embedded_postgres()


def audit_records(settings: Settings) -> list[tuple[str, dict[str, Any]]]:
    """(key, record) of every record on the region's audit topic."""
    log = open_log(settings)
    consumer = log.consumer(f"check-{uuid.uuid4().hex[:8]}", [topic_name(settings.region, "audit")])
    out: list[tuple[str, dict[str, Any]]] = []
    try:
        while batch := consumer.poll(10_000, timeout_s=2.0):
            out += [((r.key or b"").decode(), json.loads(r.value or b"")) for r in batch]
    finally:
        consumer.close()
        log.close()
    return out


def outbox(settings: Settings) -> tuple[set[str], int]:
    """The outbox's action ids, and how many are unsent."""
    with stores(settings).open_fleet() as conn:
        ids = {r[0] for r in conn.execute("SELECT action_id::text FROM outbox").fetchall()}
        row = conn.execute("SELECT count(*) FROM outbox WHERE sent_at IS NULL").fetchone()
    assert row is not None
    return ids, int(row[0])


def test_run_relay_sends_each_action_once_while_the_outbox_grows(
    tmp_path: Path, services: list[Service]
) -> None:
    settings, args = _home(tmp_path, "demo")
    events = region_events(settings.region)
    half = len(events) // 2
    try:
        feed(settings, events[:half])
        assert spotcap(*args, "project", "fleet", timeout_s=WAIT_S).returncode == 0
        first, unsent = outbox(settings)
        assert unsent == len(first) > 0
        relay = Service([*args, "run", "relay", "--interval-s", "0.2", "--batch-size", "50"],
                        tmp_path)  # fmt: skip
        services.append(relay.start())
        wait_until(lambda: outbox(settings)[1] == 0 or not relay.alive(), WAIT_S,
                   "the first actions sent")  # fmt: skip
        assert relay.alive(), relay.said()
        # More history while it runs: it lets go of the log between bursts, so others write.
        feed(settings, events[half:])
        assert spotcap(*args, "project", "fleet", timeout_s=WAIT_S).returncode == 0
        everything, _ = outbox(settings)
        assert everything > first
        wait_until(lambda: outbox(settings)[1] == 0, WAIT_S, "the later actions sent")
        assert relay.stop() == f"audit: {len(everything)} actions sent, 0 pending"
        records = audit_records(settings)
        sent = Counter(key for key, _ in records)
        assert set(sent) == everything and max(sent.values()) == 1  # all of them, once
        assert all(key == record["action_id"] for key, record in records)
        # Once, with nothing pending: nothing sent, and it stops by itself.
        done = spotcap(*args, "run", "relay", "--once", timeout_s=WAIT_S)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "audit: 0 actions sent, 0 pending"
        assert len(audit_records(settings)) == len(records)
    finally:
        stores(settings).stop_embedded_postgres()
