"""Reading an accounting rule from a YAML file (docs/accounting.md has the format).

A mistake is reported as ``FILE:LINE: KEY: what is wrong (fix: ...)``: the YAML is read with
the line of every key (`contracts.source`), and every check names the key path it is about.
Money is written in euros (``0.0002``) and must come to whole micro-euros; scales are decimals.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

from contracts.source import LoadedYaml, YamlSourceError, decode_utf8, load_yaml_with_lines
from projections.ledger.rule import (
    CHECKPOINT_STORAGE,
    COUNTERFACTUAL,
    FALLBACK_SPEND,
    FLOOR_SPEND,
    FOOTPRINT,
    HEADROOM,
    IDLE_FLOOR,
    RECLAIMABLE_SPEND,
    SURPLUS,
    USEFUL_WORK,
    WASTED_WORK,
)
from replay.rule import (
    CHARGES,
    TIERS,
    Charge,
    CheckpointRule,
    FootprintRule,
    IdleFloorRule,
    LineRule,
    Rate,
    Rule,
    WasteCharge,
)
from schemas.contracts.errors import KeyPath, dotted

SHIPPED = (
    "recorded",
    "used-is-useful",
    "flat-guaranteed-rate",
    "owner-pays-own-waste",
    "footprint-by-vcpu-hours",
    "contract-chargeback",
)
_TOP = {
    "rule": True,
    "description": False,
    COUNTERFACTUAL: True,
    RECLAIMABLE_SPEND: True,
    FLOOR_SPEND: True,
    FALLBACK_SPEND: True,
    SURPLUS: True,
    HEADROOM: True,
    WASTED_WORK: True,
    CHECKPOINT_STORAGE: True,
    FOOTPRINT: True,
    IDLE_FLOOR: True,
    "late_facts": True,
    "rounding": False,
}
_LINE_KEYS = {"rate": True, "charge_to": True, "scale": False}
_MAX_EUR = Decimal(1_000_000)  # per vCPU-hour or GB-month: far above any real price


class RuleError(ValueError):
    """A rule file that cannot be used; ``str()`` is ``FILE:LINE: KEY: message (fix: ...)``."""

    def __init__(self, source: str, line: int, key: str, message: str, fix: str) -> None:
        super().__init__(f"{source}:{line}: {key}: {message} (fix: {fix})")
        self.source, self.line, self.key = source, line, key
        self.message, self.fix = message, fix


def shipped_rule_path(name: str) -> Path:
    """The path of a rule that ships with spotcap (``recorded``, ...)."""
    return Path(str(resources.files("replay.rules") / f"{name}.yaml"))


def load_rule(path: Path) -> Rule:
    """Read and check one rule file."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise RuleError(
            str(path),
            1,
            "(file)",
            f"cannot be read: {error.strerror or error}",
            "give the path of a rule file, e.g. replay/rules/recorded.yaml",
        ) from error
    try:
        text = decode_utf8(data, "rule")
    except YamlSourceError as error:
        raise RuleError(str(path), error.line, error.field, error.message, error.fix) from error
    return parse_rule(text, str(path))


def parse_rule(text: str, source: str) -> Rule:
    try:
        loaded = load_yaml_with_lines(text, "rule")
    except YamlSourceError as error:
        raise RuleError(source, error.line, error.field, error.message, error.fix) from error
    return _Reader(loaded, source).rule()


class _Reader:
    def __init__(self, loaded: LoadedYaml, source: str) -> None:
        self.loaded, self.source = loaded, source

    def fail(self, path: KeyPath, message: str, fix: str) -> RuleError:
        return RuleError(self.source, self.loaded.line_of(path), dotted(path), message, fix)

    # -- structure ------------------------------------------------------------------------

    def mapping(self, value: Any, path: KeyPath, keys: Mapping[str, bool]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(
                path,
                f"is {_kind(value)}, not a mapping of keys",
                f"write the keys {', '.join(keys)} under it",
            )
        for key in value:
            if str(key) not in keys:
                near = difflib.get_close_matches(str(key), list(keys), n=1)
                hint = f"did you mean '{near[0]}'?" if near else f"the keys are {', '.join(keys)}"
                raise self.fail((*path, str(key)), "is not a key of this section", hint)
        for key, required in keys.items():
            if required and key not in value:
                raise self.fail(
                    path, f"'{key}' is missing", f"add '{key}:' (see replay/rules/recorded.yaml)"
                )
        return {str(k): v for k, v in value.items()}

    def euros(self, value: Any, path: KeyPath, *, allow_zero: bool = True) -> int:
        """Euros written as a decimal, to whole micro-euros."""
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise self.fail(
                path,
                f"is {_kind(value)}, not an amount in euros",
                "write a decimal number of euros, e.g. 0.045",
            )
        try:
            amount = Decimal(str(value))
        except InvalidOperation as error:
            raise self.fail(
                path, f"{value!r} is not a number", "write a decimal number of euros, e.g. 0.045"
            ) from error
        if not amount.is_finite() or amount < 0 or amount > _MAX_EUR:
            raise self.fail(
                path,
                f"{value} is not a usable price",
                "write a price between 0 and 1,000,000 euros",
            )
        micros = amount.scaleb(6)
        if micros != micros.to_integral_value():
            raise self.fail(
                path,
                f"{value} euros is not a whole number of micro-euros",
                "round it to six decimal places",
            )
        if not allow_zero and micros == 0:
            raise self.fail(path, "is zero", "write a positive price")
        return int(micros)

    def count(self, value: Any, path: KeyPath, *, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(
                path,
                f"{value!r} is not a whole number from {low:,} to {high:,}",
                f"write a whole number from {low:,} to {high:,}",
            )
        return value

    def scale(self, value: Any, path: KeyPath) -> Fraction:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise self.fail(path, f"is {_kind(value)}, not a number", "write e.g. 2 or 1.5")
        try:
            number = Decimal(str(value))
        except InvalidOperation as error:
            raise self.fail(path, f"{value!r} is not a number", "write e.g. 2 or 1.5") from error
        if not number.is_finite() or number < 0 or number > 1000:
            raise self.fail(path, f"{value} is not a usable scale", "write a number from 0 to 1000")
        return Fraction(number)

    def charge(self, value: Any, path: KeyPath) -> Charge:
        if value not in CHARGES:
            raise self.fail(
                path,
                f"{value!r} is not a way to charge a line",
                f"write one of {', '.join(CHARGES)}",
            )
        charge: Charge = value
        return charge

    def rate(self, value: Any, path: KeyPath) -> Rate:
        if value in ("card", "guaranteed"):
            return Rate(value)
        if isinstance(value, dict):
            keys = {"flat_eur_per_vcpu_h": False, "tier_eur_per_vcpu_h": False}
            given = self.mapping(value, path, keys)
            if len(given) != 1:
                raise self.fail(
                    path,
                    "names no rate, or two",
                    "write one of flat_eur_per_vcpu_h or tier_eur_per_vcpu_h",
                )
            if "flat_eur_per_vcpu_h" in given:
                return Rate(
                    "flat",
                    eur_micros=self.euros(
                        given["flat_eur_per_vcpu_h"], (*path, "flat_eur_per_vcpu_h")
                    ),
                )
            return self.tiers(given["tier_eur_per_vcpu_h"], (*path, "tier_eur_per_vcpu_h"))
        raise self.fail(
            path,
            f"{value!r} is not a rate",
            "write card, guaranteed, {flat_eur_per_vcpu_h: 0.05} or "
            "{tier_eur_per_vcpu_h: {t1: ..., default: ...}}",
        )

    def tiers(self, value: Any, path: KeyPath) -> Rate:
        given = self.mapping(value, path, {**dict.fromkeys(TIERS, False), "default": False})
        prices = {t: self.euros(v, (*path, t)) for t, v in given.items() if t != "default"}
        default = self.euros(given["default"], (*path, "default")) if "default" in given else None
        if default is None:
            raise self.fail(
                path,
                "has no default price",
                "add 'default:' for workloads whose contract is not in the history",
            )
        return Rate("tier", tier_eur_micros=MappingProxyType(prices), default_eur_micros=default)

    def line(self, value: Any, path: KeyPath) -> LineRule:
        given = self.mapping(value, path, _LINE_KEYS)
        scale = self.scale(given["scale"], (*path, "scale")) if "scale" in given else Fraction(1)
        return LineRule(
            rate=self.rate(given["rate"], (*path, "rate")),
            charge_to=self.charge(given["charge_to"], (*path, "charge_to")),
            scale=scale,
        )

    # -- the rule -------------------------------------------------------------------------

    def rule(self) -> Rule:
        top = self.mapping(self.loaded.data, (), _TOP)
        name = top["rule"]
        if not isinstance(name, str) or not name.strip() or len(name) > 80:
            raise self.fail(
                ("rule",),
                f"{name!r} is not a name",
                "write a short name, e.g. flat-guaranteed-rate",
            )
        description = top.get("description", "")
        if not isinstance(description, str):
            raise self.fail(("description",), f"is {_kind(description)}", "write a sentence")
        spend = {
            c: self.line(top[c], (c,)) for c in (RECLAIMABLE_SPEND, FLOOR_SPEND, FALLBACK_SPEND)
        }
        waste = self.mapping(top[WASTED_WORK], (WASTED_WORK,), _LINE_KEYS)
        rounding = self.mapping(
            top.get("rounding", {}),
            ("rounding",),
            {"usage_quanta_per_vcpu_h": False, "waste_quanta_per_vcpu_s": False},
        )
        counterfactual = self.mapping(
            top[COUNTERFACTUAL], (COUNTERFACTUAL,), {**_LINE_KEYS, "useful_work": True}
        )
        useful_work = counterfactual.pop("useful_work")
        if useful_work not in USEFUL_WORK:
            raise self.fail(
                (COUNTERFACTUAL, "useful_work"),
                f"{useful_work!r} is not a measure of useful work",
                "write asked_for (up to what the open claims ask for) or used (every used "
                "vCPU-hour, the rule before issue 22)",
            )
        late = self.mapping(top["late_facts"], ("late_facts",), {"allowed_lateness_s": True})
        return Rule(
            name=name.strip(),
            description=" ".join(description.split()),
            counterfactual=self.line(counterfactual, (COUNTERFACTUAL,)),
            useful_work=str(useful_work),
            spend=MappingProxyType(spend),
            surplus=self.line(top[SURPLUS], (SURPLUS,)),
            idle_floor=self.idle_floor(top[IDLE_FLOOR], (IDLE_FLOOR,)),
            allowed_lateness_s=self.count(
                late["allowed_lateness_s"],
                ("late_facts", "allowed_lateness_s"),
                low=0,
                high=400 * 86_400,
            ),
            headroom=self.line(top[HEADROOM], (HEADROOM,)),
            wasted_work_rate=self.rate(waste["rate"], (WASTED_WORK, "rate")),
            wasted_work_charge=self.waste_charge(waste["charge_to"], (WASTED_WORK, "charge_to")),
            wasted_work_scale=(
                self.scale(waste["scale"], (WASTED_WORK, "scale"))
                if "scale" in waste
                else Fraction(1)
            ),
            checkpoint_storage=self.checkpoint(top[CHECKPOINT_STORAGE], (CHECKPOINT_STORAGE,)),
            footprint=self.footprint(top[FOOTPRINT], (FOOTPRINT,)),
            usage_quanta_per_vcpu_h=self.count(
                rounding.get("usage_quanta_per_vcpu_h", 1_000_000),
                ("rounding", "usage_quanta_per_vcpu_h"),
                low=1,
                high=1_000_000_000,
            ),
            waste_quanta_per_vcpu_s=self.count(
                rounding.get("waste_quanta_per_vcpu_s", 1_000),
                ("rounding", "waste_quanta_per_vcpu_s"),
                low=1,
                high=1_000_000,
            ),
            source=self.source,
        )

    def waste_charge(self, value: Any, path: KeyPath) -> WasteCharge:
        if isinstance(value, dict):
            given = self.mapping(value, path, {"with_notice": True, "without_notice": True})
            return WasteCharge(
                self.charge(given["with_notice"], (*path, "with_notice")),
                self.charge(given["without_notice"], (*path, "without_notice")),
            )
        charge = self.charge(value, path)
        return WasteCharge(charge, charge)

    def idle_floor(self, value: Any, path: KeyPath) -> IdleFloorRule:
        given = self.mapping(value, path, {"count": True, "charge_to": True, "scale": False})
        count = given["count"]
        if not isinstance(count, bool):
            raise self.fail(
                (*path, "count"),
                f"{count!r} is not true or false",
                "write true (the reservations' idle part is a cost) or false (it is nobody's)",
            )
        charge = self.charge(given["charge_to"], (*path, "charge_to"))
        if charge == "workload":
            raise self.fail(
                (*path, "charge_to"),
                "the idle floor has no workload to be charged to",
                "write platform or shared_by_vcpu_h",
            )
        return IdleFloorRule(
            count=count,
            charge_to=charge,
            scale=self.scale(given["scale"], (*path, "scale")) if "scale" in given else Fraction(1),
        )

    def checkpoint(self, value: Any, path: KeyPath) -> CheckpointRule:
        keys = {"eur_per_gb_month": True, "retention_days": True, "charge_to": True, "scale": False}
        given = self.mapping(value, path, keys)
        return CheckpointRule(
            eur_micros_per_gb_month=self.euros(
                given["eur_per_gb_month"], (*path, "eur_per_gb_month")
            ),
            retention_days=self.count(
                given["retention_days"], (*path, "retention_days"), low=0, high=36_500
            ),
            charge_to=self.charge(given["charge_to"], (*path, "charge_to")),
            scale=self.scale(given["scale"], (*path, "scale")) if "scale" in given else Fraction(1),
        )

    def footprint(self, value: Any, path: KeyPath) -> FootprintRule:
        keys = {
            "agent_millicpu_per_instance": True,
            "agent_rate": True,
            "control_plane_eur_per_vcpu_h": True,
            "charge_to": True,
            "scale": False,
        }
        given = self.mapping(value, path, keys)
        return FootprintRule(
            agent_millicpu_per_instance=self.count(
                given["agent_millicpu_per_instance"],
                (*path, "agent_millicpu_per_instance"),
                low=0,
                high=1_000_000,
            ),
            agent_rate=self.rate(given["agent_rate"], (*path, "agent_rate")),
            control_plane_eur_micros_per_vcpu_h=self.euros(
                given["control_plane_eur_per_vcpu_h"], (*path, "control_plane_eur_per_vcpu_h")
            ),
            charge_to=self.charge(given["charge_to"], (*path, "charge_to")),
            scale=self.scale(given["scale"], (*path, "scale")) if "scale" in given else Fraction(1),
        )


def _kind(value: Any) -> str:
    if value is None:
        return "empty"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"
