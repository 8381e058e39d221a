"""`spotcap serve` over a demo history: every endpoint against its OpenAPI description
(schemathesis), the same answers as the CLI, errors as documented problem documents, metrics
read from the stores (and linted by promtool), a server that outlives PostgreSQL, a busy port."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from infra.servers.promtool import fetch_promtool
from projections.money import eur_string
from replay.rule_file import shipped_rule_path
from spotcap.cli import main
from spotcap.config import Settings
from spotcap.wiring import stores
from streams.embedded import EmbeddedLog
from tests.serve_support import SPOTCAP, Served, Story, child_env, spotcap, write_story

pytestmark = pytest.mark.slow
SCHEMATHESIS = str(Path(SPOTCAP).with_name("schemathesis"))


class Home:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.settings = Settings.load(home=root, region="dev")

    def cli_json(self, *args: str) -> Any:
        """A fleet-state query in this process (it touches no ledger)."""
        result = CliRunner().invoke(main, ["--home", str(self.root), *args, "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    def child_json(self, *args: str) -> Any:
        """A query in a `spotcap` process of its own (the ledger's: see serve_support)."""
        done = spotcap(self.root, *args, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Home]:
    h = Home(tmp_path_factory.mktemp("serve-home"))
    # The story is the stand-in orchestrator's run (the deciders are the demo's default now).
    done = spotcap(h.root, "demo", "--days", "1", "--workloads", "40", "--orchestrator", "baseline")
    assert done.returncode == 0, done.stderr[-3000:]
    try:
        yield h
    finally:
        stores(h.settings).stop_embedded_postgres()


@pytest.fixture(scope="module")
def story(home: Home) -> Story:
    return write_story(home.settings)


@pytest.fixture(scope="module")
def served(home: Home, story: Story, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    server = Served(home.root, tmp_path_factory.mktemp("serve-logs"), "--log-level", "warning")
    try:
        yield server
    finally:
        code = server.stop()
        assert code == 0, f"spotcap serve exited {code}:\n{server.err.read_text()[-3000:]}"


def operations(served: Served) -> list[tuple[str, str]]:
    doc = served.get("/openapi.json").json()
    return [(m.upper(), p) for p, ops in doc["paths"].items() for m in ops]


def schemathesis(served: Served, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCHEMATHESIS, "--config-file", str(tmp / "schemathesis.toml"), "--no-color", "run",
         "--seed", "1", "--generation-database", "none",
         "--request-timeout", "120",  # its 10 s default: a what-if report on a loaded machine
         *args],
        capture_output=True, text=True, env=child_env(), timeout=1200, check=False,
        cwd=tmp,  # its cache (.schemathesis/) goes there, not into the work tree
    )  # fmt: skip


def write_config(tmp: Path, served: Served, story: Story) -> None:
    """Real ids for the path and filters (else every `why` is a 404 and every filter empty)."""
    instances = [r["instance_id"] for r in served.get("/api/v1/instances?limit=5").json()]
    ids = [story.lost_instance, story.workload, *story.exclusion_event_ids, *instances]
    (tmp / "schemathesis.toml").write_text(
        f"""
[dictionaries.ids]
values = {json.dumps(ids)}
[dictionaries.pools]
values = {json.dumps(story.pools)}
[dictionaries.workloads]
values = {json.dumps([story.workload])}
[parameters]
"path.id" = {{ dictionary = "ids", probability = 0.6 }}
"query.pool" = {{ dictionary = "pools", probability = 0.5 }}
"query.workload" = {{ dictionary = "workloads", probability = 0.5 }}

# `from` after `to` is schema-valid (JSON Schema cannot relate two parameters) and refused with
# a documented 400 that says so; schemathesis's defaults otherwise.
[[operations]]
include-path = "/api/v1/reports/savings"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "400", "401", "403", "404", "409", "429", "5xx"]
[[operations]]
include-path = "/api/v1/reports/what-if"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "400", "401", "403", "404", "409", "429", "5xx"]

# This server was given no archive key: verify answers its documented 409, saying how to start
# the server with one.
[[operations]]
include-path = "/api/v1/archive/verify"
checks.positive_data_acceptance.expected-statuses = ["2xx", "409"]
"""
    )


def test_every_endpoint_conforms_to_its_description(
    served: Served, story: Story, tmp_path: Path
) -> None:
    """schemathesis, every check: each operation's responses (2xx and errors, in their content
    types, with their headers) are documented and match their schemas; invalid input is
    refused with a documented 4xx, valid input accepted; no 5xx."""
    write_config(tmp_path, served, story)
    done = schemathesis(served, tmp_path, served.url + "/openapi.json", "--checks", "all",
                        "--max-examples", "25")  # fmt: skip
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
    count = len(operations(served))
    assert count == 17
    assert f"Selected: {count}/{count}" in done.stdout and f"Tested: {count}" in done.stdout
    assert re.search(r"(\d+) generated, \1 passed", done.stdout), done.stdout[-2000:]


def test_the_api_test_fails_on_an_undocumented_response(
    served: Served, story: Story, tmp_path: Path
) -> None:
    """The same run against a description that leaves out the 400 and 404 answers fails, naming
    the undocumented status: the test above can fail."""
    write_config(tmp_path, served, story)
    doc = served.get("/openapi.json").json()
    for ops in doc["paths"].values():
        for op in ops.values():
            op["responses"].pop("400", None)
            op["responses"].pop("404", None)
    (tmp_path / "openapi.json").write_text(json.dumps(doc))
    done = schemathesis(served, tmp_path, str(tmp_path / "openapi.json"), "--url", served.url,
                        "--checks", "status_code_conformance", "--max-examples", "10",
                        "--include-path-regex", "^/api/v1/(why|instances)")  # fmt: skip
    assert done.returncode != 0, done.stdout[-3000:]
    assert "Undocumented status code" in done.stdout, done.stdout[-4000:]
    assert "Received: 400" in done.stdout
    for operation in ("GET /api/v1/instances", "GET /api/v1/why/{id}"):
        assert operation in done.stdout


def test_the_api_answers_what_the_cli_prints(served: Served, home: Home, story: Story) -> None:
    """No second data path: each endpoint's JSON equals `spotcap ... --json` for the same query."""
    w, p = story.workload, story.pools[0]
    same = {
        f"/api/v1/pools?pool={p}": ["query", "pools", "--pool", p],
        "/api/v1/pools?excluded=true": ["query", "pools", "--excluded"],
        "/api/v1/rankings": ["query", "rankings"],
        "/api/v1/exclusions?active=true": ["query", "exclusions", "--active"],
        "/api/v1/exclusions?since=2026-11-30T00:05:00Z": ["query", "exclusions", "--since",
                                                          "2026-11-30T00:05:00Z"],
        f"/api/v1/instances?workload={w}&state=lost&limit=50": [
            "query", "instances", "--workload", w, "--state", "lost", "--limit", "50"],
        "/api/v1/workloads": ["query", "workloads"],
        f"/api/v1/why/{story.lost_instance}": ["why", story.lost_instance],
    }  # fmt: skip
    for path, args in same.items():
        api = served.get(path)
        assert api.status == 200, (path, api.text)
        assert api.json() == home.cli_json(*args), path
    # The ledger's answers come from a `spotcap` process of its own, which can open the embedded
    # ledger because the server holds it only while a request reads it.
    savings = f"/api/v1/reports/savings?from=2026-11-02&to=2026-11-02&workload={w}"
    assert served.get(savings).json() == home.child_json(
        "report", "savings", "--from", "2026-11-02", "--to", "2026-11-02", "--workload", w
    )
    # A workload's why names the decisions behind its surplus, from the ledger.
    assert served.get(f"/api/v1/why/{w}").json() == home.child_json("why", w)
    assert served.get("/api/v1/lag").json() == home.child_json("query", "lag")
    # The figures a person checks: the demo's projections are at the log's end, the story shows.
    assert all(r["lag"] == 0 for r in served.get("/api/v1/lag").json())
    active = served.get("/api/v1/exclusions?active=true").json()
    assert [r["pool_id"] for r in active] == [story.excluded_pool]
    why = served.get(f"/api/v1/why/{story.lost_instance}").json()
    assert {"instance_lost", "drain_completed"} <= {s["event_type"] for s in why["steps"]}


def documented(served: Served, method_path: tuple[str, str], status: int) -> dict[str, Any]:
    doc = served.get("/openapi.json").json()
    method, path = method_path
    response: dict[str, Any] = doc["paths"][path][method.lower()]["responses"][str(status)]
    return response


def one_sentence(text: str) -> bool:
    return "\n" not in text and ". " not in text and 20 < len(text) < 400


@pytest.mark.parametrize(
    ("path", "template", "names"),
    [
        ("/api/v1/instances?limit=0", "/api/v1/instances", "limit"),
        ("/api/v1/instances?state=flying", "/api/v1/instances", "state"),
        ("/api/v1/rankings?since=yesterday", "/api/v1/rankings", "since"),
        ("/api/v1/pools?excluded=maybe", "/api/v1/pools", "excluded"),
        ("/api/v1/reports/savings?from=2026-11-31", "/api/v1/reports/savings", "from"),
        ("/api/v1/reports/savings?from=2026-11-05&to=2026-11-01", "/api/v1/reports/savings",
         "from"),
        ("/api/v1/workloads?workload_id=x", "/api/v1/workloads", "workload_id"),
        ("/api/v1/why/a%01b", "/api/v1/why/{id}", "id"),
        ("/api/v1/reports/what-if?rule=recorded.yaml", "/api/v1/reports/what-if", "rule"),
        ("/api/v1/reports/what-if", "/api/v1/reports/what-if", "rule"),
        ("/api/v1/reports/what-if?rule=recorded&to=2026-11-01&from=2026-11-05",
         "/api/v1/reports/what-if", "from"),
    ],
)  # fmt: skip
def test_a_bad_parameter_is_a_documented_400_of_one_sentence(
    served: Served, path: str, template: str, names: str
) -> None:
    reply = served.get(path)
    assert reply.status == 400, reply.text
    assert reply.content_type == "application/problem+json"
    body = reply.json()
    assert body["status"] == 400 and body["title"] == "Bad Request"
    assert one_sentence(body["detail"]) and names in body["detail"], body["detail"]
    assert "application/problem+json" in documented(served, ("GET", template), 400)["content"]


def test_what_if_answers_what_spotcap_replay_prints(served: Served, home: Home) -> None:
    """The endpoint is `spotcap replay --diff` by the same engine over the same ledger."""
    rule = "flat-guaranteed-rate"
    api = served.get(f"/api/v1/reports/what-if?rule={rule}&from=2026-11-02&to=2026-11-02")
    assert api.status == 200, api.text
    answer = api.json()
    cli = home.child_json("replay", "--rules", str(shipped_rule_path(rule)), "--diff",
                          "--from", "2026-11-02", "--to", "2026-11-02")  # fmt: skip
    assert (answer["rule"], answer["engine"], answer["events"]) == (
        cli["rule"], cli["engine"], cli["events"])  # fmt: skip
    assert answer["identical"] is cli["diff"]["identical"] is False
    totals = {line: [eur_string(t[k]) for k in ("recorded_micros", "what_if_micros",
                                                "delta_micros")]
              for line, t in cli["diff"]["totals"].items()}  # fmt: skip
    assert {t["line"]: [t["recorded_eur"], t["what_if_eur"], t["delta_eur"]]
            for t in answer["totals"]} == totals  # fmt: skip
    rows = [(r["workload_id"], r["line"], eur_string(r["recorded_micros"]),
             eur_string(r["what_if_micros"]), eur_string(r["delta_micros"]))
            for r in cli["diff"]["rows"]]  # fmt: skip
    assert rows and [(r["workload_id"], r["line"], r["recorded_eur"], r["what_if_eur"],
                      r["delta_eur"]) for r in answer["rows"]] == rows  # fmt: skip


def test_the_archive_without_a_key_is_listed_and_verify_says_how_to_start(
    served: Served, home: Home
) -> None:
    listing = served.get("/api/v1/archive").json()
    assert listing["months"] == [] and listing["trusted_key"] is None
    assert listing["archive"] == f"the local archive at {home.root / 'archive'}"
    reply = served.post("/api/v1/archive/verify")
    assert reply.status == 409 and reply.content_type == "application/problem+json"
    assert "--archive-public-key" in reply.json()["detail"] and one_sentence(reply.json()["detail"])
    assert "application/problem+json" in documented(
        served, ("POST", "/api/v1/archive/verify"), 409)["content"]  # fmt: skip


def test_an_unknown_id_in_why_is_a_documented_404(served: Served) -> None:
    for ident in ("no-such-thing", "0b5e6b3e-0000-4000-8000-000000000000"):
        reply = served.get(f"/api/v1/why/{ident}")
        assert reply.status == 404 and reply.content_type == "application/problem+json"
        assert ident in reply.json()["detail"] and one_sentence(reply.json()["detail"])
    assert (
        "application/problem+json"
        in documented(served, ("GET", "/api/v1/why/{id}"), 404)["content"]
    )


def scrape(served: Served) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    text = served.get("/metrics").text
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def test_metrics_are_read_from_the_stores(served: Served, home: Home, story: Story) -> None:
    m = scrape(served)
    assert m["spotcap_store_up"] == {(("store", "fleet"),): 1.0, (("store", "ledger"),): 1.0}
    assert m["spotcap_exclusions_active"] == {(): 1.0}
    for kind, n in story.decisions.items():
        assert m["spotcap_decisions_total"][(("kind", kind),)] == n, kind
    for authority, eur in story.fallback_eur.items():
        assert m["spotcap_fallback_spend_eur_total"][(("authority", authority),)] == eur
    assert m["spotcap_drains_total"] == {
        (("overrun", "false"), ("path", "slurm"), ("verified", "true")): 1.0
    }
    for state in ("running", "lost", "replaced"):
        instances = served.get(f"/api/v1/instances?state={state}&limit=10000").json()
        assert m["spotcap_instances"][(("state", state),)] == len(instances), state
    lag = served.get("/api/v1/lag").json()
    for projection in ("fleet", "ledger"):
        applied = sum(
            v for k, v in m["spotcap_projection_events_applied_total"].items()
            if ("projection", projection) in k
        )  # fmt: skip
        assert applied == sum(r["next_offset"] for r in lag if r["projection"] == projection)
        assert applied > 10_000
    assert set(m["spotcap_projection_lag_records"].values()) == {0.0}
    dead = EmbeddedLog(home.settings.log_dir).end_offsets("dev.deadletter")
    assert m["spotcap_dead_letters_total"] == {(): float(sum(dead.values()))}


@pytest.mark.timeout(3600)  # the first run builds promtool (~12 min of CPU)
def test_the_metrics_pass_promtool(served: Served) -> None:
    """Prometheus's own linter on the text format (promtool reads no OpenMetrics); the
    OpenMetrics a scraper may ask for parses with prometheus_client's OpenMetrics parser."""
    promtool = fetch_promtool()
    text = served.get("/metrics")
    assert text.status == 200 and text.content_type.startswith("text/plain")
    checked = subprocess.run(
        [str(promtool), "check", "metrics"], input=text.text, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "spotcap_decisions_total" in text.text
    open_metrics = served.get("/metrics", "application/openmetrics-text; version=1.0.0")
    assert open_metrics.content_type.startswith("application/openmetrics-text")
    families = {f.name: f for f in openmetrics_families(open_metrics.text)}  # type: ignore[no-untyped-call]
    assert families["spotcap_decisions"].type == "counter"
    assert families["spotcap_projection_lag_records"].type == "gauge"


def test_the_ledger_held_by_another_process_is_a_503_then_recovers(
    served: Served, home: Home
) -> None:
    holder = subprocess.Popen(
        [str(Path(SPOTCAP).with_name("python")), "-c",
         "import sys, time\n"
         "from spotcap.config import Settings\n"
         "from spotcap.wiring import stores\n"
         f"store = stores(Settings.load(home={str(home.root)!r})).open_ledger()\n"
         "print('held', flush=True)\n"
         "sys.stdin.read()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env(),
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        reply = served.get("/api/v1/reports/savings")
        assert reply.status == 503 and reply.headers.get("retry-after") == "5", reply.text
        assert "ledger" in reply.json()["detail"] and one_sentence(reply.json()["detail"])
        lag = served.get("/api/v1/lag").json()  # the fleet's lag is still known
        assert {r["lag"] is None for r in lag if r["projection"] == "ledger"} == {True}
        assert all(r["lag"] == 0 for r in lag if r["projection"] == "fleet")
        assert scrape(served)["spotcap_store_up"][(("store", "ledger"),)] == 0.0
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)
    assert served.get("/api/v1/reports/savings").status == 200


def test_the_server_outlives_postgresql(served: Served, home: Home) -> None:
    """PostgreSQL stopped: the fleet's endpoints answer 503 naming the database and the fix,
    the rest goes on; PostgreSQL started again (on another port): the answers come back."""
    assert stores(home.settings).stop_embedded_postgres()
    try:
        for path in ("/api/v1/pools", "/api/v1/why/x", "/api/v1/lag"):
            reply = served.get(path)
            assert reply.status == 503, (path, reply.text)
            assert reply.content_type == "application/problem+json"
            detail = reply.json()["detail"]
            assert "fleet-state database" in detail and "db migrate" in detail, detail
            assert one_sentence(detail), detail
            documented(served, ("GET", path if "why" not in path else "/api/v1/why/{id}"), 503)
        health = served.get("/api/v1/health").json()
        assert health["status"] == "degraded" and not health["stores"]["fleet"]["up"]
        assert served.get("/api/v1/reports/savings").status == 200
        metrics = scrape(served)
        assert metrics["spotcap_store_up"][(("store", "fleet"),)] == 0.0
        assert "spotcap_instances" not in metrics
    finally:
        stores(home.settings).open_fleet().close()  # starts it again, as any command would
    deadline = time.monotonic() + 60
    while served.get("/api/v1/pools").status != 200:
        assert time.monotonic() < deadline, "the server did not find PostgreSQL again"
        time.sleep(1)
    assert served.get("/api/v1/health").json()["status"] == "ok"


def test_a_busy_port_is_one_sentence_and_a_failure(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = spotcap(tmp_path / "home", "serve", "--port", str(port), timeout_s=120)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"port {port} on 127.0.0.1 is already in use" in lines[0]
    assert "--port" in lines[0]
