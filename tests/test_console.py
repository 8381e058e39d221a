"""The console in a real headless Chromium (Debian's, driven by playwright-core from npm) against
`spotcap serve` over a demo history with a hall-wide wave: every page loads and shows the API's
figures for the same query, the why timeline of a lost instance names its notice, drain and
replacement, nothing is requested outside the process, axe-core finds no serious violation, the
keyboard reaches the navigation, the figures are there without JavaScript, and each page's
screenshot is written (under the test's directory; into SPOTCAP_CONSOLE_SCREENSHOTS too when set,
which is how docs/console/ is made)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.parse
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from console.pages.routes import MISSING, eur
from console.whatif import shipped_rules
from infra.servers.promtool import fetch_promtool
from projections.ledger.rule import COST_CAUSES, PLATFORM
from projections.postgres.writer import FleetWriter
from schemas.events import DrainCompleted, DrainStarted
from spotcap.config import Settings
from spotcap.wiring import stores
from tests.projection_support import T0_US, event, positioned
from tests.serve_support import Served, Story, spotcap, write_story

pytestmark = pytest.mark.slow
DRIVER = Path(__file__).with_name("browser") / "console.cjs"
NODE_MODULES = Path.home() / ".cache" / "spotcap" / "node" / "node_modules"
CHROMIUM = Path("/usr/bin/chromium")
SERIOUS = {"serious", "critical"}
WHAT_IF = "flat-guaranteed-rate"  # a shipped rule that changes the counterfactual only


def _browser_tools() -> None:
    missing = [str(p) for p in (CHROMIUM, NODE_MODULES / "playwright-core",
                                NODE_MODULES / "axe-core") if not p.exists()]  # fmt: skip
    assert not missing and shutil.which("node"), (
        f"the browser tests need {', '.join(missing) or 'node'}: run `make browser-tools`"
    )


ARCHIVED = "2026-11"  # the demo's one month
BROKEN = "cost_lines.parquet"  # the file the broken-archive pages find changed


class Console:
    def __init__(self, served: Served, story: Story, wave_instance: str, report: dict[str, Any],
                 *, home: Path, public_key: Path, broken_api: dict[str, Any]) -> None:  # fmt: skip
        self.served, self.story, self.wave_instance = served, story, wave_instance
        self.pages: dict[str, dict[str, Any]] = report["pages"]
        self.home, self.public_key = home, public_key
        self.broken_api = broken_api  # the API's verify while the archive was broken

    def api(self, path: str) -> Any:
        reply = self.served.get(path)
        assert reply.status == 200, (path, reply.text)
        return reply.json()

    def figures(self, page: str) -> dict[str, dict[str, str | None]]:
        figures: dict[str, dict[str, str | None]] = self.pages[page]["figures"]
        return figures


def write_wave_drain(settings: Settings) -> str:
    """A drain (started, completed) for an instance of the demo's wave that was noticed and
    replaced: the demo's agents are not wired yet, the rest of its chain is the demo's own."""
    conn = stores(settings).open_fleet()
    try:
        row = conn.execute(
            "SELECT n.payload->>'instance_id', n.payload->>'workload_id', n.occurred_at"
            " FROM events n JOIN replacements r ON r.replaces_instance_id ="
            " n.payload->>'instance_id' WHERE n.event_type = 'notice_received'"
            " AND n.correlation_id IS NOT NULL ORDER BY 1 LIMIT 1"
        ).fetchone()
        assert row, "the demo history has no wave instance that was noticed and replaced"
        instance, workload, noticed_at = row
        at_s = (noticed_at.timestamp() * 1e6 - T0_US) / 1e6
        started = event(DrainStarted(instance, workload, "kubernetes", 90, "notice"), at_s + 1,
                        name="wave-drain", region=settings.region)  # fmt: skip
        done = event(DrainCompleted(instance, workload, "kubernetes", 30.0, True, False, False,
                                    60.0), at_s + 31, name="wave-drained",
                     causation_id=started.event_id, region=settings.region)  # fmt: skip
        FleetWriter(conn).write(positioned([started, done]), {})
        return str(instance)
    finally:
        conn.close()


def archive_month(home: Path, keys: Path) -> Path:
    """The demo's month exported to the home's archive, signed with a new key; its .pub."""
    made = spotcap(home, "contracts", "keygen", "--out", str(keys / "archive.key"))
    assert made.returncode == 0, made.stderr
    done = spotcap(home, "archive", "export", "--month", ARCHIVED, "--key",
                   str(keys / "archive.key"), "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["events"] > 10_000
    return keys / "archive.key.pub"


def drive(served: Served, config_path: Path, out: Path, pages: list[dict[str, Any]]) -> Any:
    """tests/browser/console.cjs over `pages`: its report."""
    config = {"base": served.url, "pages": pages, "out": str(out),
              "modules": str(NODE_MODULES), "chromium": str(CHROMIUM)}  # fmt: skip
    config_path.write_text(json.dumps(config))
    driven = subprocess.run(
        ["node", str(DRIVER), str(config_path)],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert driven.returncode == 0, driven.stderr[-3000:]
    return json.loads(driven.stdout)


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    _browser_tools()
    root = tmp_path_factory.mktemp("console-home")
    settings = Settings.load(home=root, region="dev")
    # Seed 3's first day has a hall-wide wave (wave-0001, in hall-d), run by the deciders (the
    # demo's default orchestrator; the baseline comparison is left out: it writes nothing).
    done = spotcap(root, "demo", "--days", "1", "--workloads", "40", "--seed", "3",
                   "--no-compare")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    try:
        story = write_story(settings)
        wave_instance = write_wave_drain(settings)
        public_key = archive_month(root, tmp_path_factory.mktemp("console-keys"))
        logs = tmp_path_factory.mktemp("console-logs")
        # The archive is the home's own (<home>/archive, the default of both commands).
        served = Served(root, logs, "--log-level", "warning",
                        "--archive-public-key", str(public_key))  # fmt: skip
        try:
            out = tmp_path_factory.mktemp("console-shots")
            report = drive(served, logs / "config.json", out, [
                {"name": "fleet", "path": "/"},
                {"name": "workloads", "path": "/workloads"},
                {"name": "workload", "path": f"/workloads/{story.workload}"},
                {"name": "why", "path": f"/why?id={wave_instance}"},
                {"name": "savings", "path": "/savings"},
                # The what-if form, filled in and sent as a person would.
                {"name": "what-if", "path": "/savings", "select": ["#rule", WHAT_IF],
                 "click": "#replay"},
                {"name": "archive", "path": "/archive"},
                {"name": "archive-verified", "path": "/archive",
                 "click": "button[name=month][value='']"},
            ])  # fmt: skip
            # One byte of the month's cost lines changed: the verify button names the file.
            target = root / "archive" / "dev" / ARCHIVED / BROKEN
            original = target.read_bytes()
            target.write_bytes(original[:100] + bytes([original[100] ^ 1]) + original[101:])
            try:
                broken = drive(served, logs / "broken.json", out, [
                    {"name": "archive-broken", "path": "/archive",
                     "click": f"button[name=month][value='{ARCHIVED}']"},
                ])  # fmt: skip
                broken_api = served.post(f"/api/v1/archive/verify?month={ARCHIVED}").json()
            finally:
                target.write_bytes(original)
            report["pages"].update(broken["pages"])
            if os.environ.get("SPOTCAP_CONSOLE_SCREENSHOTS"):
                target = Path(os.environ["SPOTCAP_CONSOLE_SCREENSHOTS"])
                target.mkdir(parents=True, exist_ok=True)
                for page in report["pages"].values():
                    shutil.copy(page["screenshot"], target)
            yield Console(served, story, wave_instance, report, home=root,
                          public_key=public_key, broken_api=broken_api)  # fmt: skip
        finally:
            code = served.stop()
            assert code == 0, served.err.read_text()[-3000:]
    finally:
        stores(settings).stop_embedded_postgres()


def test_every_page_loads_with_a_screenshot(console: Console) -> None:
    assert set(console.pages) == {
        "fleet",
        "workloads",
        "workload",
        "why",
        "savings",
        "what-if",
        "archive",
        "archive-verified",
        "archive-broken",
    }
    for name, page in console.pages.items():
        assert page["status"] == 200, name
        assert page["title"].endswith("· spotcap"), page["title"]
        shot = Path(page["screenshot"])
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_nothing_is_requested_outside_the_process(console: Console) -> None:
    for name, page in console.pages.items():
        outside = [u for u in page["requests"] if not u.startswith(console.served.url + "/")]
        assert outside == [], (name, outside)
        # The recorder sees the subresources too, not only the page itself.
        assert f"{console.served.url}/static/console.css" in page["requests"], name


def test_the_fleet_page_shows_the_apis_figures(console: Console) -> None:
    f = console.figures("fleet")
    pools = console.api("/api/v1/pools?limit=10000")
    assert len(pools) > 10
    for p in pools:
        rank = f[f"pool.{p['pool_id']}.rank"]["text"]
        assert rank == (str(p["rank"]) if p["rank"] is not None else MISSING), p["pool_id"]
        assert f[f"pool.{p['pool_id']}.price"]["value"] == p["price_per_vcpu_h_eur"]
        excluded = f[f"pool.{p['pool_id']}.excluded"]["text"]
        assert excluded == ("excluded" if p["excluded"] else "no"), p["pool_id"]
    assert f[f"pool.{console.story.excluded_pool}.excluded"]["text"] == "excluded"
    for x in console.api("/api/v1/exclusions"):
        shown = f[f"exclusion.{x['event_id']}.readmitted"]["text"]
        assert (shown == "in force") == (x["readmitted_at"] is None), x
    for state in ("running", "lost", "replaced", "deleted"):
        n = len(console.api(f"/api/v1/instances?state={state}&limit=10000"))
        assert int(str(f[f"instances.{state}"]["text"]).replace(",", "")) == n, state
    lag: dict[str, int] = {}
    for r in console.api("/api/v1/lag"):
        key = f"lag.{r['projection']}.{r['topic']}"
        lag[key] = lag.get(key, 0) + r["lag"]
    assert {k: int(str(f[k]["text"]).replace(",", "")) for k in lag} == lag
    wave = console.api("/api/v1/waves/last")
    assert f["wave.id"]["text"] == wave["wave_id"] == "wave-0001"
    for stage, n in wave["counts"].items():
        assert int(str(f[f"wave.{stage}"]["text"])) == n, stage
    # Every reclaimed instance of the wave was noticed first (one may be lost in it unnoticed),
    # the hand-written drain is there, and the deciders replaced what was lost.
    counts = wave["counts"]
    assert counts["notice"] > 10 and counts["loss"] >= counts["notice"]
    assert counts["drain"] == 2 and counts["replacement"] >= counts["loss"]


def test_the_workload_pages_show_the_apis_figures(console: Console) -> None:
    w = console.story.workload
    listed = console.figures("workloads")
    for row in console.api("/api/v1/workloads?limit=10000"):
        shown = str(listed[f"workload.{row['workload_id']}.live_vcpu"]["text"])
        assert int(shown.replace(",", "")) == row["live_vcpu"]
    f = console.figures("workload")
    (contract,) = console.api(f"/api/v1/workloads?workload={w}")
    assert f["contract.tier"]["text"] == contract["tier"]
    for k in ("target_vcpu", "floor_vcpu", "live_vcpu"):
        assert int(str(f[f"contract.{k}"]["text"]).replace(",", "")) == contract[k], k
    assert f["contract.spend_cap"]["value"] == contract["spend_cap_eur"]
    assert f["contract.spend_cap"]["text"] == eur(contract["spend_cap_eur"])
    spread = console.api(f"/api/v1/workloads/{w}/spread")
    assert {r["level"] for r in spread} == {"pool", "hall", "correlation_group"}
    for r in spread:
        shown = str(f[f"spread.{r['level']}.{r['key']}.reclaimable_vcpu"]["text"])
        assert int(shown.replace(",", "")) == r["reclaimable_vcpu"]
    fallbacks = console.api(f"/api/v1/fallbacks?workload={w}")
    assert {x["kind"] for x in fallbacks} >= {"within_cap", "escalated"}  # the story's, at least
    for x in fallbacks:
        assert f[f"fallback.{x['event_id']}.spend"]["value"] == x["spend_eur"]
    daily = console.api(f"/api/v1/reports/savings/daily?workload={w}")
    assert daily["days"]
    for d in daily["days"]:
        net = f[f"daily.{d['day']}.net_saving"]
        assert net["value"] == d["eur"]["net_saving"]
        assert net["text"] == eur(d["eur"]["net_saving"])
    for i in console.api(f"/api/v1/instances?workload={w}&limit=10000"):
        assert f[f"instance.{i['instance_id']}.state"]["text"] == i["state"]


def test_the_savings_page_shows_the_apis_figures(console: Console) -> None:
    f = console.figures("savings")
    report = console.api("/api/v1/reports/savings")
    for k in ("counterfactual", "cost", "net_saving"):
        assert f[f"total.{k}"]["value"] == report["total"][k]
        assert f[f"total.{k}"]["text"] == eur(report["total"][k])
    # The region's 40 workloads, and the platform's line (the idle floor is charged to no one).
    assert sorted(w["workload_id"] == PLATFORM for w in report["workloads"]) == [False] * 40 + [
        True
    ]
    for w in report["workloads"]:
        for cause, amount in w["eur"].items():
            if cause not in ("counterfactual", "cost"):
                assert f[f"savings.{w['workload_id']}.{cause}"]["value"] == amount
    # The page's per-workload net savings add up to the total it shows.
    total = sum(Decimal(str(v["value"])) for k, v in f.items()
                if k.startswith("savings.") and k.endswith(".net_saving"))  # fmt: skip
    assert total == Decimal(report["total"]["net_saving"])


def test_the_why_timeline_names_notice_drain_and_replacement(console: Console) -> None:
    page = console.pages["why"]
    answer = console.api(f"/api/v1/why/{console.wave_instance}")
    assert [s["event_type"] for s in page["why"]] == [s["event_type"] for s in answer["steps"]]
    assert [s["sentence"] for s in page["why"]] == [s["sentence"] for s in answer["steps"]]
    assert [s["link"] for s in page["why"]] == [f"/why?id={s['event_id']}" for s in answer["steps"]]
    kinds = [s["event_type"] for s in page["why"]]
    for kind in ("notice_received", "drain_started", "drain_completed", "instance_lost",
                 "replacement_requested"):  # fmt: skip
        assert kind in kinds, (kind, kinds)
    # The deciders ask for the replacement on the notice, while the instance drains.
    notice = kinds.index("notice_received")
    assert notice < kinds.index("drain_started") < kinds.index("drain_completed")
    assert notice < kinds.index("replacement_requested")
    assert console.figures("why")["why.subject"]["text"] == console.wave_instance


def _verify_lines(answer: dict[str, Any]) -> list[str]:
    """Each finding of a verification as the Archive page writes it."""
    return [f"{'problem' if x['error'] else 'note'} {m['month']}: {x['subject']}: {x['message']}"
            for m in answer["months"] for x in m["findings"]]  # fmt: skip


def _shown_findings(f: dict[str, dict[str, str | None]]) -> list[str]:
    return [
        str(v["text"]) for k, v in f.items() if k.startswith("verify.") and k != "verify.result"
    ]


def test_the_archive_page_shows_the_apis_figures(console: Console) -> None:
    listing = console.api("/api/v1/archive")
    (month,) = listing["months"]
    # The API's figures are the signed manifest's own.
    manifest = json.loads(
        (console.home / "archive" / "dev" / ARCHIVED / "manifest.json").read_text()
    )
    assert month["month"] == ARCHIVED and month["merkle_root"] == manifest["merkle"]["root"]
    assert month["events"] == manifest["merkle"]["size"] == manifest["chain"]["size"] > 10_000
    assert month["cost_lines"] == manifest["files"][BROKEN]["rows"] > 0
    assert (month["link"], month["previous_month"], month["signature"]) == ("first", None, "valid")
    assert month["signed_by"] == listing["trusted_key"] and not listing["locked"]
    f = console.figures("archive")
    for k in ("events", "cost_lines", "first_event_at", "last_event_at", "merkle_root", "link",
              "signature"):  # fmt: skip
        assert f[f"archive.{ARCHIVED}.{k}"]["value"] == str(month[k]), k
    assert f[f"archive.{ARCHIVED}.verification"]["value"] == "not_run"  # before the button
    assert f["archive.trusted_key"]["text"] == listing["trusted_key"]


def test_the_verify_button_runs_verify_without_javascript(console: Console) -> None:
    page = console.pages["archive-verified"]
    assert page["status"] == page["status_without_js"] == 200
    assert page["url"].endswith("/archive/verify") and page["url_without_js"] == page["url"]
    f = console.figures("archive-verified")
    assert f["verify.result"]["value"] == "ok"
    assert f[f"archive.{ARCHIVED}.verification"]["value"] == "verified"
    answer = console.served.post("/api/v1/archive/verify").json()
    assert answer["ok"] and [m["month"] for m in answer["months"]] == [ARCHIVED]
    assert _shown_findings(f) == _verify_lines(answer)
    # ... and `spotcap archive verify` finds the same.
    cli = spotcap(console.home, "archive", "verify", "--public-key", str(console.public_key),
                  "--json")  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    assert _verify_lines(json.loads(cli.stdout)) == _verify_lines(answer)


def test_the_verify_button_names_what_is_wrong(console: Console) -> None:
    page = console.pages["archive-broken"]
    assert page["status"] == page["status_without_js"] == 200
    f = console.figures("archive-broken")
    assert f["verify.result"]["value"] == "problems"
    assert f[f"archive.{ARCHIVED}.verification"]["value"] == "problems"
    shown = _shown_findings(f)
    assert shown == _verify_lines(console.broken_api) and not console.broken_api["ok"]
    manifest = json.loads(
        (console.home / "archive" / "dev" / ARCHIVED / "manifest.json").read_text()
    )
    (problem,) = [line for line in shown if line.startswith("problem")]
    assert problem.startswith(f"problem {ARCHIVED}: {BROKEN}: SHA-256 is "), problem
    assert f"the manifest says {manifest['files'][BROKEN]['sha256']}" in problem


def test_the_what_if_form_shows_the_apis_diff(console: Console) -> None:
    page = console.pages["what-if"]
    assert page["status"] == page["status_without_js"] == 200
    assert f"rule={WHAT_IF}" in page["url"] and page["url_without_js"] == page["url"]
    f = console.figures("what-if")
    answer = console.api(f"/api/v1/reports/what-if?rule={WHAT_IF}")
    assert f["whatif.rule"]["value"] == answer["rule"] == WHAT_IF
    assert f["whatif.identical"]["value"] == "false" and not answer["identical"]
    for t in answer["totals"]:
        for k in ("recorded", "what_if", "delta"):
            assert f[f"whatif.total.{t['line']}.{k}"]["value"] == t[f"{k}_eur"], (t, k)
    rows = {f"whatif.{r['workload_id']}.{r['line']}.{k}": r[f"{k}_eur"]
            for r in answer["rows"] for k in ("recorded", "what_if", "delta")}  # fmt: skip
    shown = {k: v["value"] for k, v in f.items() if k.startswith("whatif.")
             and not k.startswith("whatif.total.")
             and k not in ("whatif.rule", "whatif.identical")}  # fmt: skip
    assert rows and shown == rows
    # The rule prices the counterfactual only; the recorded column is the savings report's.
    delta = {t["line"]: Decimal(t["delta_eur"]) for t in answer["totals"]}
    assert delta["counterfactual"] != 0 and delta["net_saving"] == delta["counterfactual"]
    assert all(delta[c] == 0 for c in COST_CAUSES)
    report = console.api("/api/v1/reports/savings")
    assert {t["line"]: t["recorded_eur"] for t in answer["totals"]} == {
        k: v for k, v in report["total"].items() if k != "cost"
    }


def test_the_recorded_rule_reproduces_the_recorded_ledger(console: Console) -> None:
    answer = console.api("/api/v1/reports/what-if?rule=recorded&from=2026-11-02&to=2026-11-02")
    assert answer["identical"] and answer["rows"] == [] and answer["workloads_compared"] == 41
    assert (answer["from"], answer["to"]) == ("2026-11-02", "2026-11-02")
    assert {t["delta_eur"] for t in answer["totals"]} == {"0.000000"}
    page = console.served.get("/savings?rule=recorded")
    assert page.status == 200 and "No difference: rule recorded reproduces" in page.text


@pytest.mark.parametrize("rule", ["no-such-rule", "recorded.yaml", "../rules/recorded",
                                  "/etc/passwd", "replay/rules/recorded.yaml"])  # fmt: skip
def test_what_if_takes_only_a_shipped_rule_by_name(console: Console, rule: str) -> None:
    quoted = urllib.parse.quote(rule, safe="")
    reply = console.served.get(f"/api/v1/reports/what-if?rule={quoted}")
    assert reply.status == 400 and reply.content_type == "application/problem+json"
    assert f"give one of recorded, {WHAT_IF}" in reply.json()["detail"] or (
        "is not a shipped rule" in reply.json()["detail"]
    ), reply.text
    page = console.served.get(f"/savings?rule={quoted}")
    assert page.status == 400 and 'role="alert"' in page.text and "not a shipped rule" in page.text


def test_no_serious_accessibility_violation(console: Console) -> None:
    for name, page in console.pages.items():
        assert page["passes"] > 10, name  # axe ran
        serious = [v for v in page["violations"] if v["impact"] in SERIOUS]
        assert serious == [], (name, serious)


def test_the_keyboard_reaches_the_navigation(console: Console) -> None:
    for name, page in console.pages.items():
        if "#" in page["url"]:  # a form's answer (what-if): Tab starts from its anchor, the form
            rules = "".join(shipped_rules())[
                :40
            ]  # the select's text: its options, cut as the driver cuts
            assert page["focus"][:3] == [f"select {rules}", "input ", "input "], name
            continue
        assert page["focus"] == ["a Skip to the content", "a Fleet", "a Workloads", "a Why"], name


def test_the_figures_are_there_without_javascript(console: Console) -> None:
    for name, page in console.pages.items():
        assert page["figures_without_js"] == len(page["figures"]) > 0, name


def test_errors_are_pages_of_one_sentence(console: Console) -> None:
    for path, status in (("/workloads/no-such-workload", 404), ("/why?id=no-such-thing", 404),
                         ("/savings?from=2026-11-31", 400)):  # fmt: skip
        reply = console.served.get(path)
        assert reply.status == status and reply.content_type.startswith("text/html"), path
        assert 'role="alert"' in reply.text
    reply = console.served.post("/archive/verify", {"month": "2026-13"})
    assert reply.status == 400 and 'role="alert"' in reply.text and "YYYY-MM" in reply.text
    api = console.served.post("/api/v1/archive/verify?month=2026-13")
    assert api.status == 400 and "YYYY-MM" in api.json()["detail"]


DASHBOARDS = sorted((Path(__file__).parents[1] / "infra" / "grafana").glob("*.json"))
_METRIC = re.compile(r"\bspotcap_[a-z_]+\b")
_LABELS = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)|[{,]\s*([a-z_]+)\s*=~?")


def panel_queries() -> list[tuple[str, str, str]]:
    """(dashboard, panel title, PromQL) for every target of every panel."""
    out = []
    for path in DASHBOARDS:
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel["targets"]:
                out.append((path.name, str(panel["title"]), str(target["expr"])))
    return out


def test_every_dashboard_query_names_metrics_the_process_exports(console: Console) -> None:
    """Each panel's query, against a real scrape of /metrics: its metric names are series the
    process exports, its labels are labels of those series, and promtool parses it."""
    assert DASHBOARDS and len(panel_queries()) >= 10
    exported: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(console.served.get("/metrics").text):
        for sample in family.samples:
            exported.setdefault(sample.name, set()).update(sample.labels)
    for dashboard, title, expr in panel_queries():
        names = _METRIC.findall(expr)
        assert names, (dashboard, title, expr)
        for name in names:
            assert name in exported, f"{dashboard} {title!r}: {name} is not exported"
        labels = {x.strip() for by, one in _LABELS.findall(expr) for x in (*by.split(","), one)}
        known = set().union(*(exported[n] for n in names))
        assert labels - {""} <= known, (dashboard, title, labels - known)
    # promtool parses each query (as a recording rule's expression: its rule check parses PromQL).
    rules = {"groups": [{"name": "dashboards", "rules": [
        {"record": f"dashboard:panel_{n}", "expr": expr}
        for n, (_, _, expr) in enumerate(panel_queries())]}]}  # fmt: skip
    path = Path(console.served.out).with_name("dashboard-rules.json")
    path.write_text(json.dumps(rules))  # YAML is a superset of JSON
    checked = subprocess.run(
        [str(fetch_promtool()), "check", "rules", str(path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(panel_queries())} rules found" in checked.stdout, checked.stdout


def test_the_dashboard_check_fails_on_a_metric_not_exported(console: Console) -> None:
    """The check above can fail: a misspelt metric is not among the exported names."""
    text = console.served.get("/metrics").text
    names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert "spotcap_decisions_total" in names and "spotcap_decision_total" not in names
    assert _METRIC.findall('sum(rate(spotcap_decision_total{kind="x"}[5m]))') == [
        "spotcap_decision_total"
    ]
