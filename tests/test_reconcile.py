"""Reconciliation against the simulated region served as a cloud (the real openstacksdk adapter
over HTTP) and a real PostgreSQL: drift injected behind spotcap's back through Nova (an instance
removed, a foreign instance tagged as ours, an owner tag changed) is reported and handled as
docs/operating.md states; the read-only rebuild from the provider's tags reproduces the fleet
state that the log projected."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from infra import servers
from projections.catchup import Writer, catch_up
from projections.postgres.connection import Connection, connect
from projections.postgres.migrate import drop, migrate
from provider.base import OWNER_TAG, DeleteRequest, LaunchRequest, UnknownInstanceError, owned_tags
from provider.openstack import OpenStackProvider
from provider.reconcile import Reconciler, rebuild_from_provider
from provider.reconcile.compare import MISSING, OWNER_CHANGED, UNKNOWN, StateInstance
from provider.reconcile.reconciler import live_instances
from schemas.codec import Codec
from schemas.events import DriftDetected, Envelope, InstanceLaunched, InstanceLost
from sim.cloud import ServedCloud
from sim.cloud.serve import write_client_files
from streams.embedded import EmbeddedLog
from streams.merged import MergedHistory
from streams.topics import region_topics
from streams.writer import EventWriter
from tests.cli_support import assert_one_sentence, spotcap
from tests.cloud_support import (
    OWNER,
    POOL,
    REGION,
    adapter,
    create_server,
    served_clouds,
)
from tests.cloud_support import (
    connect as connect_cloud,
)
from tests.projection_support import new_schema

CODEC = Codec()
WORKLOAD = "wl-reconciled"


@pytest.fixture
def clouds() -> Iterator[Callable[..., ServedCloud]]:
    yield from served_clouds()


class Region:
    """A served cloud, its OpenStack adapter, an embedded log and fleet schemas to project."""

    def __init__(self, root: Path, cloud: ServedCloud, postgres: servers.Server) -> None:
        self.cloud = cloud
        self.provider: OpenStackProvider = adapter(cloud)
        self.cloud_conn = connect_cloud(cloud.access)
        self.nova = self.cloud_conn.compute
        self.log = EmbeddedLog(root / "log")
        self.log.apply_topics(region_topics(REGION))
        self.writer = EventWriter(self.log, CODEC, REGION)
        self.postgres = postgres
        self.schemas: list[tuple[Connection, str]] = []

    def launch(self, count: int) -> list[str]:
        """`count` instances launched through the adapter, their events on the log."""
        ids = []
        for _ in range(count):
            request = LaunchRequest(POOL, WORKLOAD, owned_tags(OWNER, WORKLOAD))
            ids.append(self.provider.launch(request).instance_id)
        self.ship()
        return ids

    def ship(self) -> None:
        for event in self.provider.poll_events():
            self.writer.write(event)
        self.writer.flush()

    def schema(self) -> Connection:
        name = new_schema()
        conn = connect(self.postgres.address, name)
        migrate(conn, name)
        self.schemas.append((conn, name))
        return conn

    def project(self, conn: Connection) -> None:
        catch_up(self.log, CODEC, REGION, Writer("fleet", fleet=conn))

    def events(self) -> list[Envelope]:
        return [d.envelope for d in MergedHistory(self.log, CODEC, REGION, ("lifecycle",))]

    def close(self) -> None:
        self.writer.close()
        for conn, name in self.schemas:
            drop(conn, name)
            conn.close()


@pytest.fixture
def region(
    tmp_path: Path, clouds: Callable[..., ServedCloud], postgres: servers.Server
) -> Iterator[Region]:
    made = Region(tmp_path, clouds(), postgres)
    yield made
    made.close()


def test_drift_behind_spotcaps_back_is_reported_and_handled(region: Region) -> None:
    ours = region.launch(4)
    state = region.schema()
    region.project(state)
    assert sorted(live_instances(state)) == sorted(ours)

    # Behind spotcap's back: one of ours deleted, a foreign server tagged as ours, and one of
    # ours handed to another owner (its metadata changed).
    removed, handed_over = ours[0], ours[1]
    region.nova.delete_server(removed)
    stranger = create_server(
        region.cloud,
        region.cloud_conn,
        POOL,
        {
            **{k.replace("/", ":"): v for k, v in owned_tags(OWNER, "wl-stranger").items()},
            "spotcap.io:pool": POOL,
            "spotcap.io:purchase-model": "reclaimable",
        },
        tags=[f"spotcap.io:owner={OWNER}"],
    )
    region.nova.set_server_metadata(handed_over, **{OWNER_TAG.replace("/", ":"): "team-b"})

    reconciler = Reconciler(
        region.provider, state, region.writer.write, region.writer.flush, grace_s=0.0
    )
    report = reconciler.round()
    found = {(d.kind, d.instance_id) for d in report.drifts}
    assert found == {(MISSING, removed), (UNKNOWN, stranger), (OWNER_CHANGED, handed_over)}

    events = region.events()
    drifts = {e.payload.instance_id: e for e in events if isinstance(e.payload, DriftDetected)}
    assert set(drifts) == {removed, stranger, handed_over}
    lost = [
        (e.payload.instance_id, e.payload.reason, e.causation_id)
        for e in events
        if isinstance(e.payload, InstanceLost)
    ]
    assert lost == [(removed, "deleted_outside", drifts[removed].event_id)]
    adopted = [
        (e.payload.workload_id, e.causation_id)
        for e in events
        if isinstance(e.payload, InstanceLaunched) and e.payload.instance_id == stranger
    ]
    assert adopted == [("wl-stranger", drifts[stranger].event_id)]

    # Handled: the state follows the log, and the handed-over instance still runs, untouched.
    region.project(state)
    live = live_instances(state)
    assert sorted(live) == sorted([stranger, handed_over, *ours[2:]])
    assert region.provider.get(handed_over).tags[OWNER_TAG] == "team-b"
    with pytest.raises(UnknownInstanceError):
        region.provider.get(removed)

    # Level-triggered and idempotent: the next round finds only what it leaves alone, and
    # writes nothing again.
    before = len(region.events())
    again = reconciler.round()
    assert {(d.kind, d.instance_id) for d in again.drifts} == {(OWNER_CHANGED, handed_over)}
    assert again.written == 0 and len(region.events()) == before
    # A restarted reconciler writes the same events again (same ids): readers drop them.
    Reconciler(region.provider, state, region.writer.write, region.writer.flush).round()
    region.project(state)
    assert sorted(live_instances(state)) == sorted(live)


def test_the_read_only_rebuild_reproduces_the_fleet_state(region: Region) -> None:
    began_us = region.provider.now_us()
    launched = region.launch(6)
    ended_us = region.provider.now_us()
    for instance_id in launched[:2]:  # two deleted through spotcap: on the log's tail
        region.provider.delete(DeleteRequest(instance_id, "test"))
    region.ship()
    projected = region.schema()
    region.project(projected)

    rebuilt = region.schema()
    calls_before = len(region.cloud.http.calls)
    report = rebuild_from_provider(region.provider, rebuilt, region.log, CODEC)
    mutating = [c for c in list(region.cloud.http.calls)[calls_before:] if c.method != "GET"]
    assert mutating == [], "the rebuild made a mutating call"
    assert report.instances == 4
    assert _without_launch_time(live_instances(rebuilt)) == _without_launch_time(
        live_instances(projected)
    )
    # The launch time is the provider's (Nova's `created`, whole seconds), not the moment the
    # adapter saw the answer: within the launches' window.
    for instance in live_instances(rebuilt).values():
        assert began_us - 1_000_000 < instance.launched_at_us <= ended_us

    # The normal projection then fills in the rest: the same instances, states and history.
    region.project(rebuilt)
    assert _without_launch_time(live_instances(rebuilt)) == _without_launch_time(
        live_instances(projected)
    )
    assert _instance_history(rebuilt) == _instance_history(projected)


def _without_launch_time(state: dict[str, StateInstance]) -> dict[str, StateInstance]:
    return {i: replace(s, launched_at_us=0) for i, s in state.items()}


def _instance_history(conn: Connection) -> list[tuple[object, ...]]:
    """Every instance the fleet state holds (live or not), with its state."""
    rows = conn.execute(
        "SELECT instance_id, state, workload_id, pool_id, vcpu FROM instances"
    ).fetchall()
    return sorted(tuple(r) for r in rows)


def test_rebuild_postgres_from_provider_on_the_command_line(
    region: Region, tmp_path: Path, postgres: servers.Server
) -> None:
    """`spotcap rebuild postgres --from-provider FILE` in a child process: the instances the
    provider runs are in the fresh fleet state, and a rebuild of the ledger is refused there."""
    ours = region.launch(3)
    region.writer.close()  # the log as a crash left it: written, nobody writing
    provider_file = write_client_files(region.cloud, tmp_path / "client")
    database = f"d_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(region.postgres.address, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {database}")
    dsn = str(psycopg.conninfo.make_conninfo(region.postgres.address, dbname=database))
    home = ["--home", str(tmp_path), "--region", REGION]
    done = spotcap(*home, "rebuild", "postgres", "--from-provider", str(provider_file),
                   "--orchestrator-id", OWNER, "--postgres", dsn, "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["instances"] == 3
    conn = connect(dsn)
    assert sorted(live_instances(conn)) == sorted(ours)
    conn.close()
    refused = spotcap(*home, "rebuild", "all", "--from-provider", str(provider_file),
                      "--postgres", dsn)  # fmt: skip
    assert_one_sentence(refused, "--from-provider rebuilds the fleet state only")
