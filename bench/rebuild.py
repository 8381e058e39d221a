"""The read-only rebuild of a large region's fleet from the provider's tags (issue 23: 50,000
instances within 5 minutes), against a bare reference, alternating which goes first.

A served cloud (`sim.cloud`, the simulated region behind the OpenStack API subset, over HTTP)
is seeded with N servers tagged as the orchestrator's own (booted in-process: seeding is not
measured). Then, per round, into a fresh PostgreSQL schema each:

- **project**: `provider.reconcile.rebuild_from_provider` through the OpenStack adapter
  (openstacksdk, paged listing by the owner's server tag, metadata checked) and the fleet
  writer (the journal, the instance rows, the skip-by-id), reading the log's tail;
- **bare**: the same listing with openstacksdk alone and the same rows (the journal's and the
  instance's, into tables made ``LIKE`` the project's ``INCLUDING ALL``: the same indexes)
  written with psycopg ``COPY``, nothing of ours.

The log's tail is empty here (its cost per event is `bench/projections.py`'s catch-up): what
grows with the estate is the listing and the writes.

    .venv/bin/python bench/rebuild.py [--instances 50000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
from openstack.connection import Connection as SdkConnection

from infra import servers
from projections.postgres.connection import connect
from projections.postgres.migrate import migrate
from provider.openstack import OpenStackProvider, unbounded
from provider.reconcile import rebuild_from_provider
from schemas.codec import Codec
from schemas.pools import Pool, PoolCatalogue
from sim import ReclaimSettings, SimConfig
from sim.cloud import CloudConfig, ServedCloud, SpeedClock
from streams.embedded import EmbeddedLog
from streams.topics import region_topics

REGION = "bench-rebuild"
OWNER = "orch-bench"
NAMESPACE = uuid.UUID("9d3c6f1e-5b7a-4c2d-8e0f-1a2b3c4d5e6f")


def catalogue(instances: int) -> PoolCatalogue:
    per_pool = instances // 4 + 1
    pools = [
        Pool(
            sku_family="c3",
            size_vcpu=8,
            memory_gib=32,
            hall=f"hall-{hall}",
            host_aggregate="c3-general",
            purchase_model="reclaimable",
            capacity_vcpu=8 * per_pool,
            expected_interruptions_per_h=0.01,
            price_per_vcpu_h_eur_micros=4200,
            guaranteed_price_per_vcpu_h_eur_micros=14000,
        )
        for hall in "abcd"
    ]
    return PoolCatalogue(REGION, pools)


def seeded_cloud(instances: int) -> ServedCloud:
    config = SimConfig(
        seed=3,
        days=1.0,
        region=REGION,
        workloads=0,
        catalogue=catalogue(instances),
        reclaims=ReclaimSettings(background=False, waves_per_day=0.0),
        rate_card_interval_s=86_400,
        forward_capacity_interval_s=86_400,
    )
    cloud = ServedCloud(CloudConfig(sim=config, speed=1.0))
    cloud.start()
    names = cloud.region.names
    pools = list(cloud.region.sim.catalogue)
    for n in range(instances):
        pool = pools[n % len(pools)]
        workload = f"wl-{n % 400:03d}"
        metadata = {
            "spotcap.io:owner": OWNER,
            "spotcap.io:workload": workload,
            "spotcap.io:pool": pool.pool_id,
            "spotcap.io:purchase-model": pool.purchase_model,
        }
        cloud.nova.boot(
            f"{workload}-{n:06d}",
            names.flavor_of(pool),
            pool,
            metadata,
            tags=[f"spotcap.io:owner={OWNER}"],
        )
    return cloud


def sdk(cloud: ServedCloud) -> SdkConnection:
    options = cloud.access.connection_options(application_credential=True)
    return SdkConnection(**options, api_timeout=120, connect_retries=0)


def project(cloud: ServedCloud, dsn: str, log: EmbeddedLog) -> tuple[float, int]:
    schema = f"p_{uuid.uuid4().hex[:10]}"
    conn = connect(dsn, schema)
    migrate(conn, schema)
    provider = OpenStackProvider(
        sdk(cloud),
        orchestrator_id=OWNER,
        pools=cloud.region.names.pool_mapping(),
        feed_endpoint=cloud.access.feed_endpoint,
        acquire=unbounded,
        timeout_s=120.0,
        clock=SpeedClock.from_anchor(cloud.access.to_json()["clock"]).now_us,
    )
    started = time.perf_counter()
    report = rebuild_from_provider(provider, conn, log, Codec())
    elapsed = time.perf_counter() - started
    (rows,) = conn.execute("SELECT count(*) FROM instances").fetchone() or (0,)
    conn.close()
    assert report.instances == rows, (report, rows)
    return elapsed, int(rows)


def bare(cloud: ServedCloud, dsn: str, like: str) -> tuple[float, int]:
    """The same listing and rows, openstacksdk and psycopg alone."""
    schema = f"b_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        for table in ("journal", "instances"):
            conn.execute(f"CREATE TABLE {schema}.{table} (LIKE {like}.{table} INCLUDING ALL)")
        started = time.perf_counter()
        compute = sdk(cloud).compute
        path: str | None = "/servers/detail"
        params: dict[str, Any] | None = {"tags": f"spotcap.io:owner={OWNER}", "limit": 1000}
        listed: list[dict[str, Any]] = []
        while path is not None:  # the pages as JSON (the SDK's Server resource is slow)
            body = compute.get(path, params=params, microversion="2.96").json()
            listed += body["servers"]
            links = [x["href"] for x in body.get("servers_links", ()) if x["rel"] == "next"]
            path, params = (links[0] if links else None), None
        journal: list[tuple[Any, ...]] = []
        rows: list[tuple[Any, ...]] = []
        for server in listed:
            meta = server["metadata"]
            gone = server["status"] in {"DELETED", "SOFT_DELETED"}
            if meta.get("spotcap.io:owner") != OWNER or gone:
                continue
            tags = {k.replace(":", "/", 1): v for k, v in sorted(meta.items())}
            at = datetime.fromisoformat(str(server["created"]).replace("Z", "+00:00"))
            server_id = server["id"]
            event_id = uuid.uuid5(NAMESPACE, f"{REGION}:instance/{server_id}/instance_launched")
            vcpu = int(server["flavor"]["vcpus"])
            payload = {
                "instance_id": server_id,
                "pool_id": tags["spotcap.io/pool"],
                "workload_id": tags["spotcap.io/workload"],
                "vcpu": vcpu,
                "purchase_model": tags["spotcap.io/purchase-model"],
                "tags": tags,
            }
            journal.append((
                event_id, "instance_launched", at, at, server_id, None, None, "bare",
                f"provider:{REGION}", 0, len(journal), json.dumps(payload, sort_keys=True),
            ))  # fmt: skip
            rows.append((
                server_id, "running", payload["workload_id"], payload["pool_id"], vcpu,
                payload["purchase_model"], at, event_id, json.dumps(tags, sort_keys=True), at,
            ))  # fmt: skip
        with conn.transaction(), conn.cursor() as cur:
            with cur.copy(
                f"COPY {schema}.journal (event_id, event_type, occurred_at, recorded_at, key,"
                ' causation_id, correlation_id, producer, topic, partition, "offset", payload)'
                " FROM STDIN"
            ) as copy:
                for row in journal:
                    copy.write_row(row)
            with cur.copy(
                f"COPY {schema}.instances (instance_id, state, workload_id, pool_id, vcpu,"
                " purchase_model, launched_at, launch_event_id, tags, last_event_at) FROM STDIN"
            ) as copy:
                for row in rows:
                    copy.write_row(row)
        elapsed = time.perf_counter() - started
        return elapsed, len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="spotcap-bench-rebuild-") as tmp:
        root = Path(tmp)
        pg = servers.start_postgres(root / "pg")
        started = time.perf_counter()
        cloud = seeded_cloud(args.instances)
        print(f"seeded {args.instances:,} servers in {time.perf_counter() - started:,.1f} s")
        try:
            log = EmbeddedLog(root / "log")
            log.apply_topics(region_topics(REGION))
            like = f"l_{uuid.uuid4().hex[:10]}"
            migrate(connect(pg.address, like), like)
            results: dict[str, list[float]] = {"project": [], "bare": []}
            for n in range(args.rounds):
                order = ("project", "bare") if n % 2 == 0 else ("bare", "project")
                for side in order:
                    if side == "project":
                        seconds, rows = project(cloud, pg.address, log)
                    else:
                        seconds, rows = bare(cloud, pg.address, like)
                    results[side].append(seconds)
                    print(f"round {n + 1} {side:7}: {rows:,} instances in {seconds:,.1f} s")
        finally:
            cloud.close()
            servers.stop(pg)
    best = {side: min(times) for side, times in results.items()}
    print(
        f"\nrebuild of {args.instances:,} instances: project {best['project']:,.1f} s "
        f"({args.instances / best['project']:,.0f}/s), bare {best['bare']:,.1f} s "
        f"({args.instances / best['bare']:,.0f}/s), ratio (bare time / project time) "
        f"{best['bare'] / best['project']:.2f}; target: at most 300 s"
    )


if __name__ == "__main__":
    main()
