"""Replay under accounting rules: the recorded rule reproduces the recorded ledger exactly, the
two engines agree to the micro-euro on every shipped rule, a doubled guaranteed rate doubles
every counterfactual exactly, and the what-if rules move money where they say."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from fractions import Fraction
from typing import Any

import pytest

from projections.ledger.rule import COUNTERFACTUAL, FOOTPRINT, WASTED_WORK
from projections.ledger.writer import LEDGER_TOPICS
from replay import report as report_text
from replay.fold import LineKey, _days
from replay.ledgers import DiffRow, differing_lines, recorded_amounts
from replay.rule import PLATFORM, Rule
from replay.rule_file import SHIPPED, load_rule, shipped_rule_path
from replay.run import replay_clickhouse, replay_python
from replay.sql import LEDGER_RELATIONS
from schemas.events import InstanceLost, UsageInterval, WorkWasted
from spotcap.wiring import make_codec, open_log, stores
from streams.merged import MergedHistory
from tests.replay_support import History

RULES = [load_rule(shipped_rule_path(n)) for n in SHIPPED]


def python_engine(
    h: History, rules: list[Rule], first: int | None = None, last: int | None = None
) -> list[dict[LineKey, int]]:
    log = open_log(h.settings)
    try:
        history = MergedHistory(log, make_codec(h.settings), h.settings.region, LEDGER_TOPICS)
        return [r.amounts for r in replay_python(rules, (d.envelope for d in history), first, last)]
    finally:
        log.close()


def sql_engine(
    h: History, rule: Rule, first: int | None = None, last: int | None = None
) -> dict[LineKey, int]:
    store = stores(h.settings).open_ledger()
    return replay_clickhouse(store, LEDGER_RELATIONS, rule, first_day=first, last_day=last).amounts


@pytest.fixture(scope="module")
def by_python(replay_history: History) -> dict[str, dict[LineKey, int]]:
    return dict(zip(SHIPPED, python_engine(replay_history, RULES), strict=True))


def test_the_recorded_rule_reproduces_the_recorded_ledger_from_the_log(
    replay_history: History, by_python: dict[str, dict[LineKey, int]]
) -> None:
    recorded = recorded_amounts(stores(replay_history.settings).open_ledger())
    assert len({k[0] for k in recorded}) >= 25 and len({k[1] for k in recorded}) == 3
    assert differing_lines(recorded, by_python["recorded"]) == {}
    assert differing_lines(recorded, sql_engine(replay_history, RULES[0])) == {}


@pytest.mark.parametrize("name", SHIPPED)
def test_the_engines_agree_to_the_micro_euro(
    name: str, replay_history: History, by_python: dict[str, dict[LineKey, int]]
) -> None:
    rule = RULES[SHIPPED.index(name)]
    assert differing_lines(by_python[name], sql_engine(replay_history, rule)) == {}
    if name != "recorded":
        assert by_python[name] != by_python["recorded"]  # the rule changes something


def test_doubling_the_guaranteed_rate_doubles_every_counterfactual_exactly(
    replay_history: History, by_python: dict[str, dict[LineKey, int]]
) -> None:
    recorded = RULES[0]
    doubled = replace(
        recorded, name="double", counterfactual=replace(recorded.counterfactual, scale=Fraction(2))
    )
    base = by_python["recorded"]
    for amounts in (
        python_engine(replay_history, [doubled])[0],
        sql_engine(replay_history, doubled),
    ):
        assert {k for k in amounts if k[2] == COUNTERFACTUAL} == {
            k for k in base if k[2] == COUNTERFACTUAL
        }
        for key, micros in base.items():
            assert amounts[key] == (2 * micros if key[2] == COUNTERFACTUAL else micros), key


def test_a_range_of_days_agrees_with_the_recorded_ledger(replay_history: History) -> None:
    days = sorted({k[1] for k in recorded_amounts(stores(replay_history.settings).open_ledger())})
    first, last = days[1], days[1]
    recorded = recorded_amounts(stores(replay_history.settings).open_ledger(), first, last)
    assert recorded and {k[1] for k in recorded} == {first}
    assert differing_lines(recorded, python_engine(replay_history, RULES[:1], first, last)[0]) == {}
    assert differing_lines(recorded, sql_engine(replay_history, RULES[0], first, last)) == {}


def _totals(amounts: dict[LineKey, int]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for (_, _, cause), micros in amounts.items():
        out[cause] += micros
    return out


def test_owner_pays_own_waste_gives_the_platform_the_waste_of_losses_without_notice(
    replay_history: History, by_python: dict[str, dict[LineKey, int]]
) -> None:
    what_if = by_python["owner-pays-own-waste"]
    platform_waste = sum(v for k, v in what_if.items() if k[0] == PLATFORM and k[2] == WASTED_WORK)
    assert _totals(what_if)[WASTED_WORK] == _totals(by_python["recorded"])[WASTED_WORK]
    losses: dict[str, bool] = {}
    without_notice = 0
    log = open_log(replay_history.settings)
    try:
        history = MergedHistory(
            log, make_codec(replay_history.settings), "rp", ("lifecycle", "usage")
        )
        for d in history:
            p = d.envelope.payload
            if isinstance(p, InstanceLost):
                losses[d.envelope.event_id] = p.with_notice
            elif isinstance(p, WorkWasted) and not losses[d.envelope.causation_id or ""]:
                without_notice += 1 if p.wasted_vcpu_s else 0
    finally:
        log.close()
    assert (platform_waste > 0) == (without_notice > 0)


def test_a_shared_footprint_keeps_its_total_and_follows_use(
    replay_history: History, by_python: dict[str, dict[LineKey, int]]
) -> None:
    weights: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    log = open_log(replay_history.settings)
    try:
        for d in MergedHistory(log, make_codec(replay_history.settings), "rp", ("usage",)):
            u = d.envelope.payload
            if isinstance(u, UsageInterval) and u.end_at > u.start_at:
                used_q = round(u.used_vcpu_h * 1_000_000)
                for day, a, b in _days(u.start_at, u.end_at):
                    weights[day][u.workload_id] += used_q * (b - a) // (u.end_at - u.start_at)
    finally:
        log.close()
    recorded, shared = by_python["recorded"], by_python["footprint-by-vcpu-hours"]
    for day in {k[1] for k in recorded}:
        total = sum(v for k, v in recorded.items() if k[1] == day and k[2] == FOOTPRINT)
        got = {k[0]: v for k, v in shared.items() if k[1] == day and k[2] == FOOTPRINT}
        assert sum(got.values()) == total
        whole = sum(weights[day].values())
        for workload, weight in weights[day].items():
            assert total * weight // whole <= got.get(workload, 0) <= total * weight // whole + 1


def test_the_cli_replays_and_diffs(replay_history: History) -> None:
    rules = str(shipped_rule_path("recorded"))
    for engine in ("clickhouse", "python"):
        report: Any = replay_history.json("replay", "--rules", rules, "--diff", "--engine", engine)
        assert report["diff"]["identical"] and report["diff"]["rows"] == []
        assert report["engine"] == engine and report["events"] > 50_000
    flat = replay_history.json(
        "replay", "--rules", str(shipped_rule_path("flat-guaranteed-rate")), "--diff"
    )
    assert {r["line"] for r in flat["diff"]["rows"]} == {"counterfactual", "net_saving"}
    text = replay_history.cli("replay", "--rules", rules, "--diff")
    assert "no difference: rule recorded reproduces the recorded ledger exactly" in text
    table = replay_history.cli(
        "replay", "--rules", rules, "--from", "2026-11-30", "--to", "2026-11-30", "--limit", "3"
    )
    assert "2026-11-30 to 2026-11-30" in " ".join(table.split()) and "more (--limit" in table


def test_the_tables_words_come_from_the_report() -> None:
    """`replay.report`'s rows for people: a limit says how many more, a total row, signed
    deltas, and the diff's lines leave out what did not change and the net saving."""
    line = {c: 1_000_000 for c in report_text.LINES}
    report: dict[str, Any] = {
        "workloads": [{"workload_id": f"wl-{n}", "micros": line} for n in range(3)],
        "total": {"micros": {c: 3_000_000 for c in report_text.LINES}},
        "from": None,
        "to": "2026-11-03",
    }
    rows, total = report_text.ledger_rows(report, limit=2)
    assert [r[0] for r in rows] == ["wl-0", "wl-1", "... 1 more (--limit, --json)"]
    assert total[0] == "total" and set(total[1:]) == {"€3.00"}
    assert report_text.span(report) == "the start to 2026-11-03"
    assert [report_text.delta_text(m) for m in (1_200_000, -400_000, 0)] == [
        "+€1.20",
        "-€0.40",
        "€0.00",
    ]
    changed = [
        DiffRow("wl-a", "wasted_work", 0, 500_000),
        DiffRow("wl-a", "net_saving", 0, -500_000),
        DiffRow("wl-b", "floor_spend", 10, 10),
    ]
    assert report_text.diff_lines(changed) == [("wl-a", "wasted", "€0.00", "€0.50", "+€0.50")]


def test_the_diff_table_title_says_when_the_limit_cut_lines() -> None:
    assert report_text.diff_lines_title(3, 40) == "3 workload lines differ"
    assert report_text.diff_lines_title(1_234, 40) == (
        "1,234 workload lines differ (the first 40; --json for all)"
    )
