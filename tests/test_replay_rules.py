"""Accounting rules as files: the shipped rules load, the recorded one is the ledger's own rule,
and a mistake is reported with the file, the line and the key."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
from click.testing import CliRunner

from projections.ledger.rule import RECORDED
from replay.rule import PLATFORM, Rate, WasteCharge
from replay.rule_file import SHIPPED, RuleError, load_rule, parse_rule, shipped_rule_path
from spotcap.cli import main

RECORDED_TEXT = shipped_rule_path("recorded").read_text(encoding="utf-8")


def test_every_shipped_rule_loads() -> None:
    names = {load_rule(shipped_rule_path(n)).name for n in SHIPPED}
    assert names == set(SHIPPED)
    assert sorted(p.stem for p in shipped_rule_path("recorded").parent.glob("*.yaml")) == sorted(
        SHIPPED
    )


def test_recorded_yaml_is_the_rule_the_ledger_records_with() -> None:
    assert load_rule(shipped_rule_path("recorded")).as_accounting_rule() == RECORDED


def test_what_if_rules_say_what_they_change() -> None:
    flat = load_rule(shipped_rule_path("flat-guaranteed-rate"))
    assert flat.counterfactual.rate == Rate("flat", eur_micros=48_000)
    waste = load_rule(shipped_rule_path("owner-pays-own-waste"))
    assert waste.wasted_work_charge == WasteCharge("workload", "platform")
    shared = load_rule(shipped_rule_path("footprint-by-vcpu-hours"))
    assert shared.footprint.charge_to == "shared_by_vcpu_h" and shared.shares
    tiers = load_rule(shipped_rule_path("contract-chargeback"))
    rate = tiers.spend["reclaimable_spend"].rate
    assert rate.source == "tier" and rate.tier_price("t1") == 12_000
    assert rate.tier_price(None) == rate.tier_price("nonsense") == 24_000
    for rule in (flat, waste, shared, tiers):
        with pytest.raises(ValueError, match="what-if"):
            rule.as_accounting_rule()
    assert PLATFORM == "(platform)"


def test_a_scale_is_an_exact_decimal() -> None:
    text = RECORDED_TEXT.replace("  rate: guaranteed ", "  scale: 2.5\n  rate: guaranteed ", 1)
    assert parse_rule(text, "x.yaml").counterfactual.scale == Fraction(5, 2)


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize(
    ("old", "new", "key", "words"),
    [
        ("  rate: card\n  charge_to: workload\nfloor_spend:", "  rat: card\n  charge_to: "
         "workload\nfloor_spend:", "reclaimable_spend.rat", "did you mean 'rate'"),
        ("  eur_per_gb_month: 0.02 ", "  eur_per_gb_month: 0.0000001 ",
         "checkpoint_storage.eur_per_gb_month", "whole number of micro-euros"),
        ("  rate: guaranteed ", "  rate: cheapest ", "counterfactual.rate", "is not a rate"),
        ("  agent_millicpu_per_instance: 20", "  agent_millicpu_per_instance: -1",
         "footprint.agent_millicpu_per_instance", "whole number"),
        ("  charge_to: workload       # or", "  charge_to: owner       # or",
         "wasted_work.charge_to", "is not a way to charge"),
    ],
)  # fmt: skip
def test_a_mistake_names_the_file_line_and_key(old: str, new: str, key: str, words: str) -> None:
    assert old in RECORDED_TEXT
    text = RECORDED_TEXT.replace(old, new, 1)
    with pytest.raises(RuleError) as caught:
        parse_rule(text, "what-if.yaml")
    error = caught.value
    assert error.key == key and words in f"{error.message} (fix: {error.fix})"
    assert error.line == _line_of(text, new.split("\n", maxsplit=1)[0])
    assert str(error).startswith(f"what-if.yaml:{error.line}: {key}: ")


def test_a_missing_section_and_a_key_written_twice() -> None:
    start = RECORDED_TEXT.index("headroom:\n")
    end = RECORDED_TEXT.index("# Work lost")
    with pytest.raises(RuleError, match=r"'headroom' is missing"):
        parse_rule(RECORDED_TEXT[:start] + RECORDED_TEXT[end:], "x.yaml")
    doubled = RECORDED_TEXT.replace("rule: recorded\n", "rule: recorded\nrule: again\n")
    with pytest.raises(RuleError) as caught:
        parse_rule(doubled, "x.yaml")
    assert caught.value.line == 6 and "written twice" in caught.value.message


def test_a_tier_rate_needs_a_default() -> None:
    text = load_text("contract-chargeback").replace("      default: 0.024\n", "")
    with pytest.raises(RuleError, match="no default price"):
        parse_rule(text, "x.yaml")


def load_text(name: str) -> str:
    return shipped_rule_path(name).read_text(encoding="utf-8")


def test_the_cli_says_what_is_wrong_in_one_sentence(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(RECORDED_TEXT.replace("  retention_days: 7", "  retention_days: seven"))
    result = CliRunner().invoke(main, ["--home", str(tmp_path), "replay", "--rules", str(bad)])
    assert result.exit_code == 1
    line = _line_of(bad.read_text(), "retention_days:")
    assert f"bad.yaml:{line}: checkpoint_storage.retention_days: 'seven' is not" in result.output
    assert "Traceback" not in result.output
    missing = CliRunner().invoke(main, ["--home", str(tmp_path), "replay"])
    assert missing.exit_code == 2 and "--rules FILE" in missing.output


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"\x00\x01\x02\xff\xfe binary", "byte 0xff at offset 3 is not UTF-8"),
        ("name: caf\u00e9\n".encode("latin-1"), "byte 0xe9 at offset 9 is not UTF-8"),
        (b"name: a\n---\nname: b\n", "keep one rule per file"),
        (b"name: [unclosed\n", "keep one rule per file"),
    ],
    ids=["binary", "latin-1", "two documents", "syntax"],
)
def test_a_rule_file_that_is_not_a_rule_is_one_sentence(
    tmp_path: Path, content: bytes, words: str
) -> None:
    """Not UTF-8 (a binary, a Latin-1 file) or not one YAML document: a sentence naming the file
    and the line, about a rule file (not a contract), never the crash handler."""
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(content)
    with pytest.raises(RuleError, match=words):
        load_rule(bad)
    result = CliRunner().invoke(main, ["--home", str(tmp_path), "replay", "--rules", str(bad)])
    assert result.exit_code == 1 and "bad.yaml:" in result.output and words in result.output
    assert "contract" not in result.output and "Traceback" not in result.output
    assert "bug in spotcap" not in result.output
