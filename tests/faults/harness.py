"""The fault harness over the live region, shared by tests/faults/ (the bounded CI form) and
bench/faults.py (more faults, more seeds): a live run on servers of its own under a schedule
of faults (`sim.live.faults`), then the checks of what the log, the fleet state and the ledger
hold afterwards. Each check returns what it found wrong ("" when it held).

- ``injected``: every fault of the schedule ran;
- ``restarted``: every killed service was started again by its supervisor;
- ``no event lost``: every fact the region published is in the log, and every input fact of the
  log reached the deciders' journal;
- ``decisions``: the embedded runner over the journal makes exactly the decisions the Faust
  workers wrote, byte for byte (none lost, changed or made twice);
- ``carried out once``: no launch order launched more than one instance;
- ``projections``: every fleet table equals a clean projection of the same log, row for row;
- ``ledger``: the ledger's sums by workload, day and cause, its net saving and its events
  equal a clean projection's;
- ``drained``: every noticed node of a workload was drained;
- ``in region time``: no event is stamped ahead of the region's clock at the end of the run,
  and no throttled provider call lies further than the span from the run's first event.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra import servers
from projections.postgres.connection import connect
from projections.stores import LEDGER_DATABASE
from provider.base import CALL_TAG
from provider.openstack.config import ClockAnchor, load_provider_file
from schemas.codec import Codec
from schemas.events import DrainStarted, Envelope, InstanceLaunched, NoticeReceived
from sim.live import LiveConfig, Scenario, region_events, run_live
from sim.live.faults import SERVERS, Fault
from sim.live.processes import SPOTCAP, child_env
from streams.kafka import KafkaLog
from streams.runtime.core import DERIVED_PREFIX, is_input
from streams.runtime.embedded import ListSink, replay_journal
from tests.projection_support import dump_fleet

CODEC = Codec()
REPO = Path(__file__).resolve().parents[2]


@dataclass
class FaultedRun:
    faults: tuple[Fault, ...]
    report: dict[str, Any]
    events: list[Envelope]
    home: Path
    region: str
    address: dict[str, str]


@contextmanager
def faulted_run(
    folder: Path,
    faults: Sequence[Fault],
    *,
    seed: int = 1,
    speed: float = 15.0,
    span_s: int = 3600,
    agents_lead_s: int = 480,
    patience_s: float = 600.0,
    say: Callable[[str], None] = lambda text: print(text, flush=True),
) -> Iterator[FaultedRun]:
    """A live run under `faults` on servers of its own, started here in the folder the run
    restarts them from, so that they outlive the run for the checks (stopped on exit).
    `agents_lead_s`: from the start of the real agents to their nodes' notices (`Scenario`)."""
    home = folder / "home"
    region = f"faults-{uuid.uuid4().hex[:8]}"
    servers_folder = home / "live" / region / "servers"
    started: list[Path] = []
    try:
        for name, start in (("kafka", servers.start_kafka), ("postgres", servers.start_postgres),
                            ("nats", servers.start_nats)):  # fmt: skip
            started.append(servers_folder / name)
            start(servers_folder / name)
        address = {p.name: str(json.loads((p / "server.json").read_text())["address"])
                   for p in started}  # fmt: skip
        scenario = Scenario(seed=seed, span_s=span_s, workloads=10, region=region,
                            agents_lead_s=agents_lead_s)  # fmt: skip
        config = LiveConfig(scenario, speed=speed, kafka=address["kafka"], nats=address["nats"],
                            postgres=address["postgres"], patience_s=patience_s,
                            faults=tuple(faults))  # fmt: skip
        report = run_live(config, home, say)
        log = KafkaLog(address["kafka"])
        try:
            events = list(region_events(log, CODEC, region))
        finally:
            log.close()
        yield FaultedRun(tuple(faults), report, events, home, region, address)
    finally:
        for path in reversed(started):
            servers.stop(path)


def injected(run: FaultedRun) -> str:
    done = Counter((f["target"], f["how"]) for f in run.report["live"]["faults"])
    wanted = Counter((f.target, f.how) for f in run.faults)
    return "" if done == wanted else f"injected {dict(done)}, scheduled {dict(wanted)}"


def restarted(run: FaultedRun) -> str:
    restarts = run.report["live"]["restarts"]
    killed = {f.target for f in run.faults if f.how == "kill" and f.target not in SERVERS}
    missing = []
    for target in sorted(killed):
        names = [n for n in restarts if n == target or n.startswith(f"{target}-")]
        if not names:
            missing.append(target)
    return f"killed, never restarted: {missing} (restarts: {restarts})" if missing else ""


def no_event_lost(run: FaultedRun) -> str:
    live = run.report["live"]
    if not live["tap_written"] or live["tap_missing"]:
        return f"{live['tap_missing']} of {live['tap_written']} facts of the region not in the log"
    items = replay_journal(run.address["kafka"], CODEC, run.region, ListSink())
    inputs = sum(1 for e in run.events if is_input(e))
    if not items >= inputs > 0:
        return f"the journal holds {items} items for {inputs} input facts of the log"
    return ""


def decisions(run: FaultedRun) -> str:
    logged = {e.event_id for e in run.events}
    derived = [e for e in run.events if e.producer.startswith(DERIVED_PREFIX)]
    written = {e.event_id: CODEC.encode(e) for e in derived if e.causation_id in logged}
    if not written:
        return "the Faust workers wrote no decision"
    sink = ListSink()
    replay_journal(run.address["kafka"], CODEC, run.region, sink)
    replayed = {e.event_id: CODEC.encode(e) for e in sink.decisions}
    if len(sink.decisions) != len(replayed):
        return f"the replay made {len(sink.decisions) - len(replayed)} decisions twice"
    missing = replayed.keys() - written.keys()
    extra = written.keys() - replayed.keys()
    differ = {i for i in written.keys() & replayed.keys() if written[i] != replayed[i]}
    if not (missing or extra or differ):
        return ""
    decoded = {i: CODEC.decode(b) for i, b in (replayed | written).items()}

    def kinds(ids: set[str]) -> dict[str, int]:
        return dict(Counter(decoded[i].event_type for i in ids))

    return (
        f"{len(written)} decisions on the log, {len(replayed)} replayed: missing "
        f"{kinds(missing)}, extra {kinds(extra)}, different {kinds(differ)}"
    )


def carried_out_once(run: FaultedRun) -> str:
    """Each launch order (an ``actuation_ordered`` decision; its id is the instance's call tag)
    launched one instance at most, whatever was killed or paused while it went out."""
    launched: dict[str, set[str]] = defaultdict(set)
    for e in run.events:
        if isinstance(e.payload, InstanceLaunched) and CALL_TAG in e.payload.tags:
            launched[e.payload.tags[CALL_TAG]].add(e.payload.instance_id)
    if not launched:
        return "nothing was launched by an order"
    twice = {order: sorted(ids) for order, ids in launched.items() if len(ids) > 1}
    return f"launch orders carried out more than once: {twice}" if twice else ""


def _clean_projection(run: FaultedRun, scratch: Path) -> str:
    """`spotcap project` from the log into a new database and a new home; its DSN."""
    dsn = run.address["postgres"]
    database = f"clean_{uuid.uuid4().hex[:8]}"
    admin = connect(dsn, "public")
    try:
        admin.execute(f"CREATE DATABASE {database}")
    finally:
        admin.close()
    clean = dsn.rsplit("/", 1)[0] + f"/{database}"
    argv = [SPOTCAP, "--home", str(scratch / database), "--region", run.region,
            "--kafka", run.address["kafka"], "project", "--postgres", clean]  # fmt: skip
    done = subprocess.run(argv, env=child_env(), capture_output=True, text=True, timeout=900,
                          check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"the clean projection failed: {done.stderr[-2000:]}")
    return clean


def _ledger(home: Path) -> dict[str, Any]:
    """What the ledger at `home` adds up to: the sums of its lines by workload, day and cause,
    its net saving, and the events it took. Not its lines one by one: a card that reached the
    live ledger after the usage it prices (a paused broker delays one topic more than another)
    re-prices that usage with correction lines naming the card, where a projection of the
    finished log prices it once; both add up to the same amounts (tests/test_late_facts.py)."""
    argv = [sys.executable, "-m", "tests.projection_worker", "ledger-dump", "--path",
            str(home / "ledger"), "--database", LEDGER_DATABASE]  # fmt: skip
    done = subprocess.run(argv, env=child_env(), capture_output=True, text=True, timeout=600,
                          check=False, cwd=REPO)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"the ledger dump failed: {done.stderr[-2000:]}")
    dumped: dict[str, Any] = json.loads(done.stdout)
    sums: Counter[str] = Counter()
    for line in dumped["ledger_lines"]:
        sums[f"{line['workload_id']} {line['day']} {line['cause']}"] += int(
            line["amount_eur_micros"]
        )
    return {
        "sums": dict(sums),
        "net_saving": dumped["net_saving"],
        "events": sorted(json.dumps(e, sort_keys=True) for e in dumped["events"]),
        "consumed_offsets": dumped["consumed_offsets"],
    }


def projections_and_ledger(run: FaultedRun, scratch: Path) -> dict[str, str]:
    """``projections`` and ``ledger`` against a clean projection of the same log."""
    clean = _clean_projection(run, scratch)
    live_conn, clean_conn = connect(run.address["postgres"]), connect(clean)
    try:
        live_fleet, clean_fleet = dump_fleet(live_conn), dump_fleet(clean_conn)
    finally:
        live_conn.close()
        clean_conn.close()
    found = {"projections": "", "ledger": ""}
    differ = [t for t in clean_fleet if live_fleet[t] != clean_fleet[t]]
    if not sum(map(len, live_fleet.values())):
        found["projections"] = "the fleet state is empty"
    elif differ:
        found["projections"] = f"fleet tables that differ from a clean run: {differ}"
    database = clean.rsplit("/", 1)[1]
    live_ledger, clean_ledger = _ledger(run.home), _ledger(scratch / database)
    differ = [t for t in clean_ledger if live_ledger[t] != clean_ledger[t]]
    if not live_ledger["sums"]:
        found["ledger"] = "the ledger priced nothing"
    elif differ:
        sums = live_ledger["sums"], clean_ledger["sums"]
        keys = sorted(k for k in set(sums[0]) | set(sums[1]) if sums[0].get(k) != sums[1].get(k))
        shown = [f"{k}: live {sums[0].get(k)}, clean {sums[1].get(k)}" for k in keys[:8]]
        found["ledger"] = (
            f"ledger tables that differ from a clean run: {differ}; {len(keys)} sums differ"
            f" ({'; '.join(shown)}); net saving live {live_ledger['net_saving']},"
            f" clean {clean_ledger['net_saving']}"
        )
    return found


def drained(run: FaultedRun) -> str:
    done = {e.payload.instance_id for e in run.events if isinstance(e.payload, DrainStarted)}
    noticed = {e.payload.instance_id for e in run.events
               if isinstance(e.payload, NoticeReceived) and e.payload.workload_id}  # fmt: skip
    if not noticed:
        return "no notice"
    never = noticed - done
    return (
        f"{len(never)} of {len(noticed)} noticed nodes never drained: {sorted(never)[:5]}"
        if never
        else ""
    )


CLOCK_TOLERANCE_US = 60_000_000
"""How far past the region's clock at the end of a run an event may be stamped: a sim minute,
for the deciders' timers (due at a whole interval after the last fact) and a node's release
kept one microsecond after the one before (`provider.nodes.follow`). The actuator's budget hook
once stamped its throttled calls with the wall clock: 33 days ahead (issue 27)."""


def region_clock_us(home: Path, region: str) -> int:
    """The live region's clock now (its end, once the run is over), as every client of the
    served cloud reads it: from the anchor in the provider file the run wrote."""
    anchor = load_provider_file(home / "live" / region / "cloud" / "provider.yaml").clock
    assert isinstance(anchor, ClockAnchor), "a live run's provider file has the cloud's clock"
    return anchor.now_us()


def stamped_in_region_time(events: Sequence[Envelope], clock_us: int, span_s: int) -> str:
    """What is stamped ahead of the region's clock `clock_us` (beyond `CLOCK_TOLERANCE_US`),
    and which ``actuation_throttled`` events lie more than `span_s` from the first event."""
    if not events:
        return "no event"
    ahead = sorted((e for e in events if e.occurred_at > clock_us + CLOCK_TOLERANCE_US),
                   key=lambda e: -e.occurred_at)  # fmt: skip
    first_us = min(e.occurred_at for e in events)
    throttled = [e for e in events if e.event_type == "actuation_throttled"]
    far = [e for e in throttled if abs(e.occurred_at - first_us) > span_s * 1_000_000]
    found = []
    if ahead:
        found.append(
            f"{len(ahead)} events stamped ahead of the region's clock at the end ({clock_us}): "
            f"{dict(Counter(e.event_type for e in ahead))}, the furthest "
            f"{(ahead[0].occurred_at - clock_us) / 86_400e6:.2f} days ahead "
            f"({ahead[0].producer})"
        )
    if far:
        furthest_d = max(abs(e.occurred_at - first_us) for e in far) / 86_400e6
        found.append(
            f"{len(far)} of {len(throttled)} actuation_throttled events more than the span "
            f"({span_s} s) from the run's first event, the furthest {furthest_d:.2f} days"
        )
    return "; ".join(found)


def in_region_time(run: FaultedRun) -> str:
    clock_us = region_clock_us(run.home, run.region)
    return stamped_in_region_time(run.events, clock_us, int(run.report["live"]["span_s"]))


def check_all(run: FaultedRun, scratch: Path) -> dict[str, str]:
    """Every check by name: "" when it held, else what it found."""
    found = {
        "injected": injected(run),
        "restarted": restarted(run),
        "no event lost": no_event_lost(run),
        "decisions": decisions(run),
        "carried out once": carried_out_once(run),
        "drained": drained(run),
        "in region time": in_region_time(run),
    }
    return found | projections_and_ledger(run, scratch)
