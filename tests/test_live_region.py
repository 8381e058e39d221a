"""The live region end to end (`sim.live`, `spotcap demo --live`): the deciders on Faust, the
actuator, the projections as real processes on the session's real Kafka and NATS and a
PostgreSQL of their own, over the simulated region served as a cloud (the real openstacksdk
adapter over HTTP), for one sim hour with a hall-wide wave and a misbehaving pool.

What is checked is what the log and the ledger hold afterwards: for a concrete noticed
instance, the chain notice -> drain -> replacement -> launch -> usage -> ledger line, followed
through the events' causes; and replay equivalence: the embedded runner's core over the inputs
the live deciders took, in the order the region's sequencer recorded them (a merged read of
the finished log is another order: the provider's answers reach the log later than their
event time), makes exactly the decisions the Faust workers wrote (de-duplicated by event id,
byte for byte). Waits are bounded and generous (a loaded 2-core machine); nothing asserts a wall
time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra import servers
from schemas.codec import Codec
from schemas.events import (
    DrainStarted,
    Envelope,
    InstanceLaunched,
    InstanceLost,
    NoticeReceived,
    ReplacementRequested,
    UsageInterval,
)
from sim.live import WAVE_ID, LiveConfig, Scenario, region_events, run_live
from sim.live.processes import child_env
from streams.kafka import KafkaLog
from streams.runtime.core import DERIVED_PREFIX, is_input
from streams.runtime.embedded import ListSink, replay_journal
from tests.faults.harness import region_clock_us, stamped_in_region_time

pytestmark = pytest.mark.slow

CODEC = Codec()
PATIENCE_S = 600.0  # generous: Faust starts slowly on a loaded 2-core machine


def ancestors(event: Envelope, by_id: dict[str, Envelope]) -> Iterator[Envelope]:
    """`event`'s causes, nearest first, as far as the log holds them."""
    seen: set[str] = set()
    cause = event.causation_id
    while cause is not None and cause in by_id and cause not in seen:
        seen.add(cause)
        yield by_id[cause]
        cause = by_id[cause].causation_id


# The ledger the live run's services wrote under its home, read by a process of its own: this
# one's chdb holds the suite's shared data path (SPOTCAP_CHDB_PATH; chdb opens one per process).
_PRICED_USAGE = """
import json, sys
from pathlib import Path
from projections.ledger.store import ChdbStore
from projections.stores import LEDGER_DATABASE
store = ChdbStore(Path(sys.argv[1]) / "ledger", LEDGER_DATABASE)
rows = store.query("SELECT event_id FROM ledger_lines WHERE event_type = 'usage_interval' "
                   "AND amount_eur_micros > 0")
print(json.dumps(sorted(str(r["event_id"]) for r in rows)))
store.close()
"""


def priced_usage(home: Path) -> list[str]:
    """The ids of the usage intervals the live run's ledger priced above zero."""
    done = subprocess.run([sys.executable, "-c", _PRICED_USAGE, str(home)], env=child_env(),
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    ids: list[str] = json.loads(done.stdout)
    return ids


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory, kafka: servers.Server, nats: servers.Server
) -> dict[str, Any]:
    """One live run (shared by the module's tests): its report, its events, its home."""
    home = tmp_path_factory.mktemp("live") / "home"
    region = f"live-{uuid.uuid4().hex[:8]}"
    scenario = Scenario(seed=1, span_s=3600, workloads=10, region=region)
    config = LiveConfig(
        scenario, speed=30.0, kafka=kafka.address, nats=nats.address, patience_s=PATIENCE_S
    )
    report = run_live(config, home, lambda text: print(text, flush=True))
    log = KafkaLog(kafka.address)
    try:
        events = list(region_events(log, CODEC, region))
    finally:
        log.close()
    return {"report": report, "events": events, "home": home, "region": region, "kafka": kafka,
            "span_s": scenario.span_s}  # fmt: skip


def test_the_run_had_its_wave_and_its_misbehaving_pool(live: dict[str, Any]) -> None:
    report = live["report"]
    (wave,) = report["waves"]
    assert wave["wave_id"] == WAVE_ID and wave["instances_lost"] > 0
    (pool,) = report["misbehaving_pools"]
    assert pool["reclaims"] > 0
    assert report["notices"] > 0 and report["events_by_type"]["instance_launched"] > 0
    assert report["events_by_type"]["usage_interval"] > 0
    assert set(report["live"]["services"]) >= {"actuator", "projections"}
    # The misbehaving pool's first nodes ran real agents (`spotcap agent run`), whose drains
    # reached the log through their spools; the other nodes' agents were simulated.
    drains = report["live"]["drains"]
    assert drains["by real agents"] > 0 and drains["by simulated agents"] > 0


def test_every_event_is_stamped_in_the_regions_time(live: dict[str, Any]) -> None:
    """Every process of the run stamps its events with the served region's clock: none is
    ahead of that clock at the end of the run, and the actuator's throttled calls (its budget
    hook's, `streams.actuation.BudgetHook`) lie within the run's span of its first event."""
    end_us = region_clock_us(live["home"], live["region"])
    assert stamped_in_region_time(live["events"], end_us, live["span_s"]) == ""


def test_a_noticed_instance_is_drained_replaced_and_its_replacement_priced(
    live: dict[str, Any],
) -> None:
    events: list[Envelope] = live["events"]
    by_id = {e.event_id: e for e in events}
    notices = [e for e in events if isinstance(e.payload, NoticeReceived)]
    assert notices, "no notice in the live log"
    drains = {e.causation_id: e for e in events if isinstance(e.payload, DrainStarted)}
    replacements = {e.causation_id: e for e in events
                    if isinstance(e.payload, ReplacementRequested)}  # fmt: skip
    launches = [e for e in events if isinstance(e.payload, InstanceLaunched)]
    usage: dict[str, list[Envelope]] = {}
    for e in events:
        if isinstance(e.payload, UsageInterval):
            usage.setdefault(e.payload.instance_id, []).append(e)
    priced = set(priced_usage(live["home"]))
    losses = {e.payload.instance_id: e for e in events if isinstance(e.payload, InstanceLost)}
    chains = []
    for notice in notices:
        assert isinstance(notice.payload, NoticeReceived)
        loss = losses.get(notice.payload.instance_id)
        drain = drains.get(notice.event_id)
        # On the notice, or (when the loss reached the deciders first) on the noticed
        # instance's loss: either way the replacement of this noticed instance.
        replacement = replacements.get(notice.event_id) or (
            replacements.get(loss.event_id) if loss is not None else None
        )
        if drain is None or replacement is None:
            continue
        for launch in launches:
            if replacement not in list(ancestors(launch, by_id)):
                continue
            assert isinstance(launch.payload, InstanceLaunched)
            for interval in usage.get(launch.payload.instance_id, []):
                if interval.event_id in priced:
                    chains.append((notice, drain, replacement, launch, interval))
    assert chains, (
        f"no notice -> drain -> replacement -> launch -> usage -> ledger chain among "
        f"{len(notices)} notices, {len(drains)} drains, {len(replacements)} replacements, "
        f"{len(launches)} launches, {len(priced)} priced usage intervals"
    )
    notice, drain, replacement, launch, interval = chains[0]
    assert isinstance(notice.payload, NoticeReceived) and isinstance(drain.payload, DrainStarted)
    assert drain.payload.instance_id == notice.payload.instance_id
    assert notice.occurred_at <= drain.occurred_at <= notice.payload.deadline_at
    noticed_loss = losses.get(drain.payload.instance_id)
    causes = {notice.event_id} | ({noticed_loss.event_id} if noticed_loss else set())
    assert replacement.causation_id in causes
    assert notice.occurred_at <= replacement.occurred_at <= launch.occurred_at
    assert launch.occurred_at <= interval.occurred_at


def test_the_deciders_on_the_live_log_are_the_embedded_runners(live: dict[str, Any]) -> None:
    """Replay equivalence: the embedded runner's core over the inputs the live deciders took,
    in the order the region's sequencer recorded them (its journal), decides what the Faust
    workers wrote, decision for decision, byte for byte."""
    events: list[Envelope] = live["events"]
    logged = {e.event_id for e in events}
    derived = [e for e in events if e.producer.startswith(DERIVED_PREFIX)]
    # The actuator service draws each provider call from the regional budget through the same
    # guard (`streams.actuation.BudgetHook`) and logs its throttles under the guard's name; the
    # cause of such a draw is the call itself, which the log does not hold. Every decision of
    # the Faust workers has its cause in the log.
    drawn = [e for e in derived if e.causation_id not in logged]
    assert {e.event_type for e in drawn} <= {"actuation_throttled", "actuation_refused"}
    written = {e.event_id: CODEC.encode(e) for e in derived if e.causation_id in logged}
    assert written, "the Faust workers wrote no decision"
    sink = ListSink()
    items = replay_journal(live["kafka"].address, CODEC, live["region"], sink)
    inputs = sum(1 for e in events if is_input(e))
    assert items >= inputs > 0  # every input fact of the log was recorded (and the clocks)
    replayed = {e.event_id: CODEC.encode(e) for e in sink.decisions}
    assert len(sink.decisions) == len(replayed)  # none twice
    missing = replayed.keys() - written.keys()
    extra = written.keys() - replayed.keys()
    differ = {i for i in written.keys() & replayed.keys() if written[i] != replayed[i]}
    if missing or extra or differ:
        decoded = {i: CODEC.decode(b) for i, b in (replayed | written).items()}

        def kinds(ids: set[str]) -> dict[str, int]:
            return dict(Counter(decoded[i].event_type for i in ids))

        raise AssertionError(
            f"{len(written)} decisions on the live log, {len(replayed)} replayed: missing "
            f"{kinds(missing)}, extra {kinds(extra)}, different {kinds(differ)}"
        )
