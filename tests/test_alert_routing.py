"""Every alert of infra/alerts/rules.yml fired from a run and routed to whoever can fix the cause
(ADR-28): a real Prometheus scrapes `spotcap serve` over a demo home and an agent's metrics
endpoint, evaluates the shipped rules and sends what fires to a real Alertmanager running the
shipped routing, whose three webhook receivers are small HTTP servers here that record what
they get.

The run goes healthy first (only DrillNotRun may fire: no drill has run), then the faults are
made in the run's own stores and log while Prometheus watches: breakers trip, an exclusion is
recorded two minutes after its evidence, a drain overruns its budget, a workload's fallback
spend nears its cap, drills fail, records go to the dead letter, the log runs 10,001 records
ahead of the projections, and last the fleet's PostgreSQL stops. Two stand-ins, said plainly:
the agent's slow notice path is its real metrics object and endpoint given 3-second
observations (a real wave that slow needs the agent bench's thousands of agents), and the two
failed drills are `drill_finished` events written to the fleet state, not drills run here
(tests/test_drill.py runs real ones).

The only changes to the shipped files: the webhook URLs point here, and the rules' `for:` holds
are dropped (the promtool unit tests cover them) so the run takes minutes, not an hour.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from agent.metrics import AgentMetrics
from infra.servers.alertmanager import start_alertmanager, start_prometheus
from infra.servers.process import Server, stop
from projections.postgres.writer import FleetWriter
from schemas.events import (
    BreakerTripped,
    DrainCompleted,
    DrainStarted,
    DrillFinished,
    FallbackDecided,
    PoolExcluded,
)
from spotcap.config import Settings
from spotcap.wiring import stores
from streams.embedded import EmbeddedLog
from tests.projection_support import event, positioned
from tests.serve_support import Served, get, spotcap

pytestmark = pytest.mark.slow
ALERTS = Path(__file__).resolve().parent.parent / "infra" / "alerts"
OWNERS = ("workload-owner", "platform-sre", "provider-team")
# Alertmanager waits group_wait (30 s, as shipped) before a new group's first notification; a
# loaded machine adds scrapes of several seconds.
ARRIVAL_TIMEOUT_S = 420.0
# A scrape of the console reads PostgreSQL, the ledger and the log, which on a loaded machine can
# take over a second; a failed scrape makes the series stale and can resolve a firing alert
# before Alertmanager's first notification. A scrape may take its whole interval.
SCRAPE_S = "10s"


class Receivers:
    """Three webhook receivers on one HTTP server, by path: what each was sent."""

    def __init__(self) -> None:
        self.got: dict[str, list[dict[str, Any]]] = {o: [] for o in OWNERS}
        self.lock = threading.Lock()
        got, lock = self.got, self.lock

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    got.setdefault(self.path.strip("/"), []).append(body)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def firing(self) -> dict[str, set[str]]:
        """The alert names each receiver was sent as firing."""
        with self.lock:
            return {
                receiver: {
                    a["labels"]["alertname"]
                    for body in bodies
                    for a in body["alerts"]
                    if a["status"] == "firing"
                }
                for receiver, bodies in self.got.items()
            }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def wait_until(
    what: str,
    check: Callable[[], bool],
    seen: Callable[[], object] = lambda: None,
    timeout_s: float = ARRIVAL_TIMEOUT_S,
) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f} s: {what}; {seen()}"
        time.sleep(0.5)


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((ALERTS / "rules.yml").read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("alerts-home")
    done = spotcap(root, "demo", "--days", "1", "--workloads", "20", "--orchestrator", "baseline")
    assert done.returncode == 0, done.stderr[-3000:]
    try:
        yield root
    finally:
        stores(Settings.load(home=root, region="dev")).stop_embedded_postgres()


def alertmanager_config(receivers: Receivers, folder: Path) -> Path:
    config = yaml.safe_load((ALERTS / "alertmanager.yml").read_text())
    for receiver in config["receivers"]:
        for hook in receiver["webhook_configs"]:
            hook["url"] = f"{receivers.url}/{receiver['name']}"
    path = folder / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def prometheus_config(folder: Path, served: Served, agent_port: int, am: Server) -> Path:
    doc = yaml.safe_load((ALERTS / "rules.yml").read_text())
    for group in doc["groups"]:
        group["interval"] = "1s"
        for rule in group["rules"]:
            rule.pop("for", None)
    (folder / "rules.yml").write_text(yaml.safe_dump(doc))
    config = {
        "global": {
            "scrape_interval": SCRAPE_S, "scrape_timeout": SCRAPE_S, "evaluation_interval": "1s"
        },
        "rule_files": [str(folder / "rules.yml")],
        "alerting": {"alertmanagers": [
            {"static_configs": [{"targets": [am.address.removeprefix("http://")]}]}]},
        "scrape_configs": [
            {"job_name": "spotcap", "static_configs": [
                {"targets": [served.url.removeprefix("http://")]}]},
            {"job_name": "agent", "static_configs": [
                {"targets": [f"127.0.0.1:{agent_port}"]}]},
        ],
    }  # fmt: skip
    path = folder / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def targets_up(prometheus: Server) -> bool:
    reply = get(f"{prometheus.address}/api/v1/query?query=up").json()
    values = [r["value"][1] for r in reply["data"]["result"]]
    return len(values) == 2 and set(values) == {"1"}


def prometheus_view(prometheus: Server) -> str:
    """What Prometheus holds: its alerts by state and its targets' last errors."""
    alerts = get(f"{prometheus.address}/api/v1/alerts").json()["data"]["alerts"]
    targets = get(f"{prometheus.address}/api/v1/targets").json()["data"]["activeTargets"]
    states = sorted(f"{a['labels']['alertname']}={a['state']}" for a in alerts)
    errors = [f"{t['scrapeUrl']}: {t['lastError']}" for t in targets if t["lastError"]]
    return f"Prometheus alerts {states}, scrape errors {errors}"


def make_faults(root: Path, agent: AgentMetrics) -> None:
    """The faults, each through the part that would see it in a real region."""
    for _ in range(50):  # the agents' notice path at 3 s (the stand-in above)
        agent.notice_to_signal.observe(3.0)
    settings = Settings.load(home=root, region="dev")
    conn = stores(settings).open_fleet()
    try:
        (workload, instance) = conn.execute(
            "SELECT i.workload_id, min(i.instance_id) FROM instances i JOIN contracts c"
            " ON c.workload_id = i.workload_id GROUP BY 1 ORDER BY 1 LIMIT 1"
        ).fetchone() or ("", "")
        (pool,) = conn.execute(
            "SELECT min(pool_id) FROM pools WHERE purchase_model = 'reclaimable'"
        ).fetchone() or ("",)  # reclaimable: its drill series are at 0 before the drills below
        assert workload and instance and pool, "the demo home has no contracted instance"
        region = settings.region
        started = event(DrainStarted(instance, workload, "local", 30, "notice"), 0,
                        name="alarm-drain", region=region)  # fmt: skip
        evidence = event(BreakerTripped("termination", 50, 60, 20, "mass termination"), 0,
                         name="alarm-termination", region=region)  # fmt: skip
        story = [
            evidence,
            event(BreakerTripped("provider", 0, 60, 0, "launches failing"), 1,
                  name="alarm-provider", region=region),
            event(PoolExcluded(pool, "burst", 0.5, 0.01, 6, 0, 1, (evidence.event_id,)), 120,
                  name="alarm-exclusion", region=region),
            started,
            event(DrainCompleted(instance, workload, "local", 95.0, True, True, False, 5.0), 95,
                  name="alarm-drained", causation_id=started.event_id, region=region),
            event(FallbackDecided(workload, "within_cap", 16, 3_500_000, 4_000_000, "ops-lead",
                                  2, "floor broken"), 130, name="alarm-fallback", region=region),
            # two failed drills: a node never noticed (the provider's), a drain never verified
            event(DrillFinished("alarm-drill-1", pool, 2, 1, 1, 1, 900, 900, 2, 2, 0.0, 0, False,
                                ("i-2: no notice",)), 140, name="alarm-drill-1", region=region),
            event(DrillFinished("alarm-drill-2", pool, 2, 2, 2, 1, 900, 900, 2, 2, 0.0, 0, False,
                                ("i-3: drain not verified",)), 150, name="alarm-drill-2",
                  region=region),
        ]  # fmt: skip
        FleetWriter(conn).write(positioned(story), {})
    finally:
        conn.close()
    log = EmbeddedLog(settings.log_dir)
    try:
        (record,) = log.partition("dev.lifecycle", 0).read(0, 1)
        producer = log.producer()
        for _ in range(10_001):  # resends of one record: the projections fall behind
            producer.produce("dev.lifecycle", record.value, record.key)
        for _ in range(5):
            producer.produce("dev.deadletter", b"not an event", b"alarm")
        producer.flush()
    finally:
        log.close()


def assert_the_faults_are_in_the_metrics(served: Served) -> None:
    """The console reads each fault from the stores and the log as the rules expect it."""
    m: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(served.get("/metrics").text):
        for sample in family.samples:
            m.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    assert m["spotcap_breaker_open"] == {(("breaker", "provider"),): 1.0,
                                         (("breaker", "termination"),): 1.0}  # fmt: skip
    delay = m["spotcap_exclusion_delay_seconds_bucket"]
    assert delay[(("le", "60.0"),)] == 0.0 and delay[(("le", "120.0"),)] == 1.0
    assert m["spotcap_exclusion_delay_seconds_sum"] == {(): 120.0}
    (spend,) = m["spotcap_fallback_day_spend_eur"].items()
    assert spend[1] == 3.5 and m["spotcap_fallback_day_cap_eur"] == {spend[0]: 4.0}
    overruns = list(m["spotcap_drain_overruns_total"].values())
    assert len(overruns) > 1 and sum(overruns) == max(overruns) == 1.0
    drills: dict[str, float] = {}  # summed over the pools (every reclaimable one is exported)
    for labels, n in m["spotcap_drill_runs_total"].items():
        drills[dict(labels)["result"]] = drills.get(dict(labels)["result"], 0) + n
    assert drills == {"passed": 0, "refused": 0, "notice_missing": 1, "drain_late": 1,
                      "replacement_late": 0}  # fmt: skip
    assert m["spotcap_dead_letters_total"][()] >= 5
    lag = {
        k: v for k, v in m["spotcap_projection_lag_records"].items() if "dev.lifecycle" in str(k)
    }
    assert lag and set(lag.values()) == {10_001.0}


def test_every_alert_reaches_the_receiver_of_its_owner(
    home: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tmp_path_factory.mktemp("alerting")
    owner_of = {str(r["alert"]): str(r["labels"]["owner"]) for r in rules()}
    receivers = Receivers()
    agent = AgentMetrics()
    agent_port = agent.serve("127.0.0.1:0")
    served = Served(home, folder, "--log-level", "warning")
    am = prometheus = None
    try:
        am = start_alertmanager(folder / "alertmanager", alertmanager_config(receivers, folder))
        prometheus = start_prometheus(
            folder / "prometheus", prometheus_config(folder, served, agent_port, am)
        )
        wait_until("Prometheus scrapes the console and the agent", lambda: targets_up(prometheus))

        # A healthy run: nothing fires but the drill that never ran.
        wait_until(
            "DrillNotRun reaches the SRE",
            lambda: bool(receivers.firing()["platform-sre"]),
            lambda: f"received: {receivers.firing()}; " + prometheus_view(prometheus),
        )
        assert receivers.firing() == {
            "workload-owner": set(), "platform-sre": {"DrillNotRun"}, "provider-team": set()
        }  # fmt: skip

        make_faults(home, agent)
        assert_the_faults_are_in_the_metrics(served)
        expected = {o: {a for a, owner in owner_of.items() if owner == o} for o in OWNERS}
        before_store_down = {o: names - {"StoreDown"} for o, names in expected.items()}
        wait_until(
            "every alert but StoreDown reaches its owner's receiver",
            lambda: all(before_store_down[o] <= receivers.firing()[o] for o in OWNERS),
            lambda: (
                f"expected at least {before_store_down}, received {receivers.firing()}; "
                + prometheus_view(prometheus)
            ),
        )
        stores(Settings.load(home=home, region="dev")).stop_embedded_postgres()
        wait_until(
            "StoreDown reaches the SRE",
            lambda: "StoreDown" in receivers.firing()["platform-sre"],
            lambda: f"received: {receivers.firing()}; " + prometheus_view(prometheus),
        )
        assert receivers.firing() == expected
    finally:
        for server in (prometheus, am):
            if server is not None:
                stop(server)
        served.stop()
        agent.close()
        receivers.close()
