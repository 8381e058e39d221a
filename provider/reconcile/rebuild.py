"""The read-only rebuild of the fleet from the provider's tags (ADR-11: PostgreSQL holds fleet
state for speed, the provider's tags hold it for truth).

After a loss of PostgreSQL, replaying a year of log to know what runs takes too long to wait for
before acting. `rebuild_from_provider` knows it in minutes instead, without one mutating call:

1. the provider lists the instances tagged as the orchestrator's own (read-only), and each
   becomes the ``instance_launched`` the adapter wrote for it (the same event id,
   `provider.base.instance_fact_id`, built from its tags);
2. the log's recent tail (the last `tail_records` records of each partition of the fleet's
   topics) adds what tags cannot say: notices, drains, losses and launches of the last minutes;
3. both are applied by the fleet writer, which stores no log position: the normal projection
   (`spotcap project fleet`) then reads the whole log from the start and fills in the rest of
   the state (pools, contracts, exclusions, history); the events the rebuild applied are
   skipped by id, and the state rows do not depend on the order their events came in.

What the rebuild says is running is what the provider runs; nothing acts until it is done
(the command returns, then the services start).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from projections.postgres.connection import Connection
from projections.postgres.migrate import drop, migrate
from projections.postgres.writer import FLEET_TOPICS, FleetWriter
from projections.stores import Stores
from provider.base import OWNER_TAG, CapacityProvider, Instance, instance_fact_id
from schemas.codec import Codec
from schemas.errors import Origin
from schemas.events import Envelope, InstanceLaunched
from streams.log import EventLog, TopicPartition
from streams.merged import MergedHistory
from streams.topics import topic_name

PRODUCER = "spotcap/rebuild"
TAIL_RECORDS = 10_000
BATCH = 5_000


@dataclass(frozen=True, slots=True)
class RebuildReport:
    instances: int  # listed by the provider
    tail_events: int  # read from the log's tail
    applied: int  # events applied (the rest were in the state already)
    list_s: float
    apply_s: float

    def as_json(self) -> dict[str, Any]:
        """What `spotcap rebuild postgres --from-provider --json` prints (seconds to the ms)."""
        return {"instances": self.instances, "tail_events": self.tail_events,
                "applied": self.applied, "list_s": round(self.list_s, 3),
                "apply_s": round(self.apply_s, 3)}  # fmt: skip

    def describe(self) -> str:
        """The rebuild in words, and what to run next."""
        return (
            f"fleet state rebuilt from the provider: {self.instances:,} instances listed in "
            f"{self.list_s:,.1f} s, {self.tail_events:,} events of the log's tail; "
            f"{self.applied:,} applied in {self.apply_s:,.1f} s. Next: `spotcap project fleet`"
            " fills in the rest from the log."
        )


def launched_fact(region: str, instance: Instance) -> Envelope:
    """The ``instance_launched`` of a provider instance, from its tags."""
    payload = InstanceLaunched(
        instance_id=instance.instance_id,
        pool_id=instance.pool_id,
        workload_id=instance.workload_id,
        vcpu=instance.vcpu,
        purchase_model=instance.purchase_model,
        tags=dict(sorted(instance.tags.items())),
    )
    return Envelope(
        event_id=instance_fact_id(region, instance.instance_id, "instance_launched"),
        event_type=payload.EVENT_TYPE,
        occurred_at=instance.launched_at,
        recorded_at=instance.launched_at,
        region=region,
        key=instance.instance_id,
        causation_id=None,
        correlation_id=None,
        producer=PRODUCER,
        payload=payload,
    )


def rebuild_from_provider(
    provider: CapacityProvider,
    conn: Connection,
    log: EventLog,
    codec: Codec,
    *,
    tail_records: int = TAIL_RECORDS,
    on_progress: Callable[[str, int], None] | None = None,
) -> RebuildReport:
    """Rebuild the fleet's instances in `conn` (a migrated schema, normally empty) from the
    provider's tags and the log's tail (see the module's doc)."""
    region = provider.region
    progress = on_progress or (lambda what, n: None)
    started = time.monotonic()
    instances = provider.list_by_tag(OWNER_TAG, provider.orchestrator_id)
    listed_s = time.monotonic() - started
    progress("listed", len(instances))
    source = f"provider:{region}"
    seeds = [(Origin(source, 0, n), launched_fact(region, i)) for n, i in enumerate(instances)]
    writer = FleetWriter(conn)
    applied = 0
    started = time.monotonic()
    for batch in _batches(iter(seeds)):
        applied += writer.write(batch, {}).applied
        progress("applied", applied)
    tail = _tail(log, codec, region, tail_records)
    tail_events = 0
    for batch in _batches((d.origin, d.envelope) for d in tail):
        tail_events += len(batch)
        applied += writer.write(batch, {}).applied
        progress("applied", applied)
    return RebuildReport(len(instances), tail_events, applied, listed_s, time.monotonic() - started)


def rebuild_fleet(
    stores: Stores,
    provider: CapacityProvider,
    log: EventLog,
    codec: Codec,
    *,
    on_progress: Callable[[str, int], None] | None = None,
) -> RebuildReport:
    """`spotcap rebuild postgres --from-provider`: drop the fleet state's tables, make them
    anew and rebuild the instances from the provider (`rebuild_from_provider`)."""
    conn = stores.open_fleet(migrated=False)
    try:
        drop(conn)
        migrate(conn)
        return rebuild_from_provider(provider, conn, log, codec, on_progress=on_progress)
    finally:
        conn.close()


def _tail(log: EventLog, codec: Codec, region: str, records: int) -> MergedHistory:
    ends: dict[TopicPartition, int] = {}
    for logical in FLEET_TOPICS:
        name = topic_name(region, logical)
        for partition, end in log.end_offsets(name).items():
            ends[(name, partition)] = end
    start = {tp: max(0, end - records) for tp, end in ends.items()}
    return MergedHistory(log, codec, region, FLEET_TOPICS, until=ends, start=start)


def _batches(
    items: Iterator[tuple[Origin, Envelope]],
) -> Iterator[list[tuple[Origin, Envelope]]]:
    batch: list[tuple[Origin, Envelope]] = []
    for item in items:
        batch.append(item)
        if len(batch) >= BATCH:
            yield batch
            batch = []
    if batch:
        yield batch
