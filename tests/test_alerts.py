"""The alerting rules and their routing, as shipped in infra/alerts/ (ADR-28): Prometheus's
own checker and unit tests on the rules, amtool on the Alertmanager configuration, every metric
a rule reads exported by a service, every alert owned, routed, documented and unit-tested both
firing and quiet. tests/test_alert_routing.py fires them from a run."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.metrics import AgentMetrics
from console.metrics import exported_families
from infra.servers.alertmanager import fetch_amtool, start_alertmanager
from infra.servers.process import ServerError
from infra.servers.promtool import fetch_promtool

REPO = Path(__file__).resolve().parent.parent
ALERTS = REPO / "infra" / "alerts"
RULES = ALERTS / "rules.yml"
ALERTMANAGER = ALERTS / "alertmanager.yml"
UNIT_TESTS = sorted((ALERTS / "tests").glob("*.yml"))
OPERATING = REPO / "docs" / "operating.md"
OWNERS = ("workload-owner", "platform-sre", "provider-team")
SEVERITIES = ("page", "ticket")
# The samples a family of each type exposes, beside its own name.
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for group in doc["groups"] for r in group["rules"] if "alert" in r]


def exported_samples() -> set[str]:
    """Every sample name the agent's and the console's /metrics can carry."""
    families = [*AgentMetrics().registry.collect(), *exported_families()]
    return {f.name + suffix for f in families for suffix in SUFFIXES[f.type]}


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)


def test_the_rules_pass_promtool_check_rules() -> None:
    done = run(str(fetch_promtool()), "check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_the_rules_pass_their_promtool_unit_tests() -> None:
    assert UNIT_TESTS, "no promtool unit tests under infra/alerts/tests"
    done = run(str(fetch_promtool()), "test", "rules", *map(str, UNIT_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("SUCCESS") == len(UNIT_TESTS), done.stdout


def test_a_unit_test_fails_when_an_alert_stops_firing(tmp_path: Path) -> None:
    """The unit tests can fail: a rule whose threshold can never be reached fails them."""
    broken = RULES.read_text().replace("spotcap_store_up == 0", "spotcap_store_up == 2")
    assert broken != RULES.read_text()
    (tmp_path / "rules.yml").write_text(broken)
    test = (ALERTS / "tests" / "projections.yml").read_text()
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "projections.yml").write_text(test)
    done = run(str(fetch_promtool()), "test", "rules", str(tmp_path / "tests" / "projections.yml"))
    assert done.returncode != 0
    assert "alertname: StoreDown" in done.stdout + done.stderr


def test_every_metric_a_rule_reads_is_exported_by_a_service() -> None:
    exported = exported_samples()
    used = {name for rule in rules() for name in re.findall(r"\bspotcap_[a-z0-9_]+", rule["expr"])}
    assert used, "no spotcap metric in the rules"
    assert used - exported == set(), f"rules read metrics no service exports: {used - exported}"


@pytest.mark.parametrize("rule", rules(), ids=lambda r: str(r["alert"]))
def test_every_alert_names_its_owner_severity_cause_and_runbook(rule: dict[str, Any]) -> None:
    assert rule["labels"]["owner"] in OWNERS
    assert rule["labels"]["severity"] in SEVERITIES
    summary = rule["annotations"]["summary"]
    assert len(summary) > 60, "the summary should say what is wrong and what causes it"
    anchor = rule["annotations"]["runbook_url"]
    assert anchor == f"docs/operating.md#alarm-{rule['alert'].lower()}"
    assert anchor.split("#")[1] in doc_anchors(), f"docs/operating.md has no section {anchor}"


def doc_anchors() -> set[str]:
    """The GitHub-style anchors of docs/operating.md's headings."""
    headings = re.findall(r"^#+ (.+)$", OPERATING.read_text(), re.MULTILINE)
    return {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_alert_has_a_unit_test_where_it_fires_and_one_where_it_does_not() -> None:
    fired: set[str] = set()
    quiet: set[str] = set()
    for path in UNIT_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                (fired if case.get("exp_alerts") else quiet).add(case["alertname"])
    names = {str(r["alert"]) for r in rules()}
    assert names - fired == set(), "alerts no unit test fires"
    assert names - quiet == set(), "alerts no unit test shows quiet"


def test_the_alertmanager_configuration_passes_amtool() -> None:
    done = run(str(fetch_amtool()), "check-config", str(ALERTMANAGER))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout and "3 receivers" in done.stdout


@pytest.mark.parametrize("owner", [*OWNERS, None])
def test_amtool_routes_each_owner_to_its_own_receiver(owner: str | None) -> None:
    """An alert goes to the receiver named like its owner; one without an owner to the SRE."""
    labels = ["alertname=Any", *([f"owner={owner}"] if owner else [])]
    done = run(str(fetch_amtool()), "config", "routes", "test",
               f"--config.file={ALERTMANAGER}", *labels)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (owner or "platform-sre")


def test_every_owner_in_the_rules_has_a_receiver() -> None:
    config = yaml.safe_load(ALERTMANAGER.read_text())
    receivers = {r["name"] for r in config["receivers"]}
    assert receivers == set(OWNERS)
    assert {r["labels"]["owner"] for r in rules()} == set(OWNERS)


def test_alertmanager_with_a_bad_configuration_fails_loudly_saying_how_to_fix(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "alertmanager.yml"
    bad.write_text(ALERTMANAGER.read_text().replace("receiver: provider-team", "receiver: nobody"))
    with pytest.raises(ServerError) as raised:
        start_alertmanager(tmp_path / "am", bad, timeout_s=60)
    message = str(raised.value)
    assert "exited with code" in message and f"amtool check-config {bad}" in message
    assert "nobody" in message  # the log's tail names the undefined receiver
