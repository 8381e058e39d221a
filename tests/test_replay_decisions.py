"""`spotcap replay decisions`: the recorded demo run simulated again with changed decider
settings. With the recorded values nothing differs; an exclusion threshold no pool reaches
excludes nothing; the same settings give the same bytes; the baseline stand-in compares; a bad
key or value is one sentence naming the key and its range; the settings and the run's record
survive their round trip.

One day of a 20-workload region, so that each re-run (a closed-loop simulation of the day and
two reads of a log) stays short.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from replay.decisions import RECORDED_RULE, OutcomeCounter, base_settings, read_outcome
from replay.decisions_text import exclusion_lines, what_if_rows, what_if_summary, what_if_title
from replay.rule_file import load_rule
from sim.clock import DAY_US, EPOCH_US
from sim.pools import demo_region
from sim.reclaimer import ReclaimSettings
from sim.record import RecordedRun, RunRecordError, load_run, record_path, record_run
from sim.region import SimConfig
from spotcap.cli import main
from spotcap.config import Settings
from spotcap.wiring import make_codec, open_log, runs_dir
from streams.deciders.authority import ChangeTrust
from streams.deciders.settings import DeciderSettings
from streams.deciders.settings_keys import (
    RANGES,
    SettingError,
    all_keys,
    apply,
    as_data,
    from_data,
    settable_keys,
)
from tests.cli_support import assert_one_sentence, spotcap
from tests.home import run_demo

REGION = "wd"
CONFIG = SimConfig(seed=1, days=1.0, region=REGION, workloads=20)


class Recorded:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.settings = Settings.load(home=home, region=REGION)
        self.demo = run_demo(self.settings, CONFIG, compare=False)

    def what_if(self, *args: str) -> tuple[str, dict[str, Any]]:
        result = CliRunner().invoke(
            main,
            ["--home", str(self.home), "--region", REGION, "replay", "decisions", *args, "--json"],
            catch_exceptions=False,
        )
        assert result.exit_code == 0, result.output
        return result.stdout, json.loads(result.stdout)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    return Recorded(tmp_path_factory.mktemp("decisions"))


def figures(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["key"]: row for row in report["figures"]}


def test_the_recorded_values_report_no_difference(recorded: Recorded) -> None:
    _, report = recorded.what_if("--set", "exclusion.rate_factor=3", "--set", "min_pools=8")
    assert report["identical"] is True
    assert report["rerun"]["settings_changed"] == []
    assert report["recorded"]["events"] == report["rerun"]["events"] == recorded.demo["events"]
    rows = figures(report)
    assert all(row["delta"] == 0 for row in rows.values())
    # the figures are the run's, not zeros on both sides
    assert rows["exclusions"]["recorded"] >= 1
    assert rows["placements"]["recorded"] == recorded.demo["events_by_type"]["placement_decided"]
    assert rows["wasted_vcpu_h"]["recorded"] == recorded.demo["wasted_vcpu_h"]
    assert rows["ledger_counterfactual"]["recorded"] > 0
    # 20 workloads on a region reserved for 220: the reservations' idle part (the platform's
    # idle floor) outweighs their saving, so the net saving is the lines' sum, of either sign
    assert rows["ledger_net_saving"]["recorded"] == (
        rows["ledger_counterfactual"]["recorded"] - rows["ledger_cost"]["recorded"]
    )
    assert rows["ledger_idle_floor"]["recorded"] > 0


def test_a_threshold_no_pool_reaches_excludes_nothing_the_same_way_twice(
    recorded: Recorded,
) -> None:
    text, report = recorded.what_if("--set", "exclusion.rate_factor=1000")
    again, _ = recorded.what_if("--set", "rate_factor=1000")
    assert again == text  # deterministic: the same settings, the same bytes
    assert report["rerun"]["settings_changed"] == [
        {"key": "exclusion.rate_factor", "recorded": 3.0, "rerun": 1000.0}
    ]
    rows = figures(report)
    assert rows["exclusions"]["recorded"] >= 1
    assert rows["exclusions"]["rerun"] == 0
    assert rows["exclusions"]["delta"] == -rows["exclusions"]["recorded"]
    assert rows["misbehaving_pools_excluded"]["rerun"] == 0
    excluded = report["exclusions"]
    assert excluded["excluded_only_rerun"] == []
    assert excluded["excluded_in_both"] == []
    assert set(excluded["excluded_only_recorded"]) & set(excluded["misbehaving_pools"])
    assert report["identical"] is False


def test_the_baseline_stand_in_is_compared_with_the_recorded_deciders(recorded: Recorded) -> None:
    _, report = recorded.what_if("--orchestrator", "baseline")
    assert report["rerun"]["orchestrator"] == "baseline"
    rows = figures(report)
    # the stand-in places and replaces, but excludes nothing and never falls back (the
    # deciders, on this small region, may need no fallback either: what the reclaimable
    # spread cannot place goes on committed room the floors leave, or waits for a top-up)
    assert rows["exclusions"]["recorded"] > 0
    assert rows["exclusions"]["rerun"] == rows["fallbacks"]["rerun"] == 0
    assert rows["placements"]["rerun"] > 0
    assert rows["wasted_vcpu_h"]["delta"] != 0
    assert rows["ledger_net_saving"]["delta"] != 0
    assert rows["ledger_net_saving"]["delta"] == (
        rows["ledger_net_saving"]["rerun"] - rows["ledger_net_saving"]["recorded"]
    )


def test_a_range_of_days_counts_only_its_events(recorded: Recorded) -> None:
    rule = load_rule(RECORDED_RULE)
    misbehaving: tuple[str, ...] = ()
    day = CONFIG.start_us // DAY_US
    log = open_log(recorded.settings)
    try:
        codec = make_codec(recorded.settings)
        whole = read_outcome(
            log, codec, REGION, OutcomeCounter(misbehaving, rule), lambda d, t: None
        )
        first = read_outcome(
            log, codec, REGION, OutcomeCounter(misbehaving, rule, day, day), lambda d, t: None
        )
        none = read_outcome(
            log,
            codec,
            REGION,
            OutcomeCounter(misbehaving, rule, day + 5, day + 6),
            lambda d, t: None,
        )
    finally:
        log.close()
    assert 0 < first.figures["placements"] <= whole.figures["placements"]
    assert first.figures["ledger_counterfactual"] <= whole.figures["ledger_counterfactual"]
    assert none.figures["placements"] == none.figures["ledger_counterfactual"] == 0


def test_a_log_that_is_no_longer_the_run_is_refused(recorded: Recorded, tmp_path: Path) -> None:
    home = tmp_path / "copy"
    home.mkdir()
    settings = Settings.load(home=home, region=REGION)
    run = load_run(runs_dir(recorded.settings), REGION, "spotcap demo")
    record_run(runs_dir(settings), run)  # a record, but a log that holds nothing of that run
    result = spotcap("--home", str(home), "--region", REGION, "replay", "decisions")
    assert_one_sentence(result, "not the 0 the recorded demo run left")


@pytest.mark.parametrize(
    ("args", "needles", "code"),
    [
        (["--set", "exclusion.nope=1"], ["--set exclusion.nope", "no decider setting"], 2),
        (["--set", "rate_factor=0.5"], ["exclusion.rate_factor must be a number above 1"], 2),
        (["--set", "min_pools=many"], ["placement.min_pools must be an integer from 1"], 2),
        (["--set", "min_pools"], ["give KEY=VALUE"], 2),
        (["--set", "orchestrator_id=x"], ["actuator.orchestrator_id", "cannot be changed"], 2),
        (["--orchestrator", "baseline", "--set", "min_pools=3"], ["baseline stand-in"], 2),
        (["--from", "2026-11-03", "--to", "2026-11-02"], ["--from is after --to"], 2),
        ([], ["no recorded simulation to run again", "demo-config.json is missing"], 1),
    ],
)
def test_bad_input_is_one_sentence(
    tmp_path: Path, args: list[str], needles: list[str], code: int
) -> None:
    result = spotcap("--home", str(tmp_path), "--region", REGION, "replay", "decisions", *args)
    assert_one_sentence(result, *needles, code=code)


def test_settings_that_break_a_check_across_fields_are_one_sentence(recorded: Recorded) -> None:
    args = ("--home", str(recorded.home), "--region", REGION, "replay", "decisions")
    result = spotcap(*args, "--set", "readmission_factor=5")
    assert_one_sentence(result, "--set exclusion.readmission_factor=5", "hysteresis", code=2)
    result = spotcap(*args, "--set", "pool_cap_share=0.5")
    assert_one_sentence(result, "pool_cap_share <= group_cap_share", code=2)


def test_the_comparison_in_words_groups_figures_and_marks_misbehaving_pools() -> None:
    def figure(key: str, group: str, unit: str, recorded: float, rerun: float) -> dict[str, Any]:
        return {"key": key, "group": group, "label": key.replace("_", " "), "unit": unit,
                "recorded": recorded, "rerun": rerun, "delta": rerun - recorded}  # fmt: skip

    report: dict[str, Any] = {
        "region": "wd", "seed": 1, "sim_days": 1.0, "workloads": 20, "from": None,
        "to": "2026-11-02", "recorded": {"orchestrator": "deciders", "events": 1200},
        "rerun": {"orchestrator": "deciders", "events": 1100, "settings_changed": [
            {"key": "exclusion.rate_factor", "recorded": 3.0, "rerun": 1000.0}]},
        "figures": [figure("exclusions", "exclusions", "", 4, 0),
                    figure("pools_excluded", "exclusions", "", 2, 2),
                    figure("wasted_vcpu_h", "outcome", "vCPU-h", 10.25, 12.5),
                    figure("ledger_net_saving", "ledger", "EUR", 3_000_000, 2_500_000)],
        "exclusions": {"misbehaving_pools": ["p1"], "excluded_in_both": [],
                       "excluded_only_recorded": ["p1", "p2"], "excluded_only_rerun": []},
        "identical": False,
    }  # fmt: skip
    assert what_if_title(report) == (
        "region wd (seed 1, 1 day, 20 workloads), the start to 2026-11-02: recorded (deciders) "
        "against a re-run (deciders, exclusion.rate_factor 3 -> 1000)"
    )
    assert [row[0] for row in what_if_rows(report)] == ["exclusions", "", "outcome", "ledger"]
    assert what_if_rows(report)[0][2:] == ("4", "0", "-4")
    assert what_if_rows(report)[1][4] == "0"
    assert what_if_rows(report)[2][1:] == ("wasted vcpu h (vCPU-h)", "10.2", "12.5", "+2.2")
    assert exclusion_lines(report) == [
        "excluded in both runs: none",
        "excluded only in the recorded run: p1 (misbehaving), p2",
        "excluded only in the re-run: none",
    ]
    assert what_if_summary(report).startswith("net saving €3.00 recorded, €2.50 re-run (-€0.50)")
    assert what_if_summary({**report, "identical": True}) == (
        "no difference: the re-run decides as the recorded run did (1,200 events each)"
    )


def test_every_setting_has_a_range_and_round_trips() -> None:
    assert set(settable_keys()) == set(RANGES)
    assert set(all_keys()) - set(settable_keys()) == {"actuator.orchestrator_id"}
    defaults = DeciderSettings()
    assert from_data(as_data(defaults)) == defaults
    assert from_data(json.loads(json.dumps(as_data(defaults)))) == defaults
    changed = apply(defaults, ["placement.pool_cap_share=0.2", "return_healthy_s=60"])
    assert changed.placement.pool_cap_share == 0.2
    assert changed.fallback.return_healthy_s == 60
    assert from_data(as_data(changed)) == changed
    with pytest.raises(SettingError, match="not int"):
        from_data({"placement.min_pools": 2.5})


def test_the_runs_record_round_trips_with_a_catalogue_and_nested_settings(tmp_path: Path) -> None:
    settings = Settings.load(home=tmp_path, region="rt")
    config = SimConfig(
        seed=9,
        days=2.5,
        region="rt",
        workloads=7,
        start_us=EPOCH_US + 3 * DAY_US,
        reclaims=ReclaimSettings(notice_s=(100, 110), misbehaving_pools=1),
        catalogue=demo_region(4, "rt", 3),
    )
    run = RecordedRun(config, "deciders", apply(DeciderSettings(), ["min_pools=5"]))
    record_run(runs_dir(settings), run)
    assert load_run(runs_dir(settings), "rt", "spotcap demo") == run
    # A run under a keyring: its public keys are recorded, and the re-run decides with them.
    trust = ChangeTrust({"team": "b3duZXI="}, {"board": "Ym9hcmQ="})
    keyed = replace(run, deciders=replace(run.deciders or DeciderSettings(), trust=trust))
    record_run(runs_dir(settings), keyed)
    assert load_run(runs_dir(settings), "rt", "spotcap demo") == keyed
    assert base_settings(keyed).trust == trust
    baseline = RecordedRun(replace(config, catalogue=None), "baseline", None)
    record_run(runs_dir(settings), baseline)
    assert load_run(runs_dir(settings), "rt", "spotcap demo") == baseline
    record_path(runs_dir(settings), "rt").write_text('{"format": 1}')
    with pytest.raises(RunRecordError, match="not a usable run record"):
        load_run(runs_dir(settings), "rt", "spotcap demo")
