"""The deciders' settings by name: ``section.field=value`` assignments, each checked against
the range it may take, and the settings as plain data (recorded with a run, read back).

`spotcap replay decisions --set KEY=VALUE` changes any field of `DeciderSettings` this way.
A key is ``section.field`` (``exclusion.rate_factor``) or the bare field name when only one
section has it (``rate_factor``). Every settable field has a range here (a test holds every
field of the settings to one), so a bad value is refused with one sentence that names the key
and what it may be; the settings' own checks across fields (hysteresis, cap order, the floor
check inside the rebuild) then apply to the result, their sentence prefixed with the key.

The owner tag (`actuator.orchestrator_id`) is not settable: it names whose instances the
orchestrator may delete, which is the recorded run's identity, not a decision parameter.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from streams.deciders.settings import DeciderSettings

DAY_S = 86_400
MAX_S = 30 * DAY_S  # no window, dwell or interval of a decider is longer than a month
MAX_COUNT = 1_000_000
MAX_FACTOR = 1e6
NOT_SETTABLE = {"actuator.orchestrator_id"}
NOT_SECTIONS = frozenset({"trust"})  # the keys the deciders trust (ADR-30): not a parameter


@dataclass(frozen=True, slots=True)
class Range:
    """What one field may be: an integer or a finite number between `low` and `high`."""

    low: float
    high: float
    low_open: bool = False  # `low` itself is not allowed
    unit: str = ""

    def admits(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        return above and value <= self.high

    def describe(self, integer: bool) -> str:
        kind = "an integer" if integer else "a number"
        low, high = _number(self.low), _number(self.high)
        span = f"above {low} and at most {high}" if self.low_open else f"from {low} to {high}"
        unit = f" ({self.unit})" if self.unit else ""
        return f"{kind} {span}{unit}"


def _number(value: float) -> str:
    return f"{int(value):,}" if value == int(value) else f"{value:g}"


def _seconds(low: int = 1) -> Range:
    return Range(low, MAX_S, unit="seconds of event time")


def _count(low: int = 1) -> Range:
    return Range(low, MAX_COUNT)


_SHARE = Range(0, 1, low_open=True, unit="a share of the workload's reclaimable capacity")
_WEIGHT = Range(0, MAX_FACTOR)

RANGES: dict[str, Range] = {
    "exclusion.burst_window_s": _seconds(),
    "exclusion.burst_min_reclaims": _count(),
    "exclusion.rate_window_s": _seconds(),
    "exclusion.rate_min_reclaims": _count(),
    "exclusion.rate_factor": Range(1, MAX_FACTOR, low_open=True, unit="x the expected rate"),
    "exclusion.significance": Range(0, 1, low_open=True, unit="a tail probability"),
    "exclusion.unrecorded_expected_per_h": Range(
        0, 100, low_open=True, unit="reclaims per instance-hour"
    ),
    "exclusion.readmission_healthy_s": _seconds(),
    "exclusion.readmission_factor": Range(0, MAX_FACTOR, low_open=True, unit="x the expected rate"),
    "exclusion.readmission_backoff_doublings": Range(0, 16),
    "exclusion.strike_memory_s": _seconds(0),
    "scoring.ranking_interval_s": _seconds(),
    "scoring.observation_window_s": _seconds(),
    "scoring.bucket_s": _seconds(),
    "scoring.min_exposure_instance_h": Range(0, MAX_FACTOR, unit="instance-hours"),
    "scoring.interruption_weight": _WEIGHT,
    "scoring.price_weight": _WEIGHT,
    "scoring.saving_weight": _WEIGHT,
    "placement.min_pools": Range(1, 10_000, unit="pools"),
    "placement.pool_cap_share": _SHARE,
    "placement.group_cap_share": _SHARE,
    "placement.floor_min_halls": Range(1, 1_000, unit="halls"),
    "placement.committed_reserve_share": Range(0, 1, unit="a share of each committed pool"),
    "placement.retry_s": _seconds(),
    "fallback.floor_rebuild_s": _seconds(),
    "fallback.floor_check_s": _seconds(),
    "fallback.stagger_step_s": _seconds(0),
    "fallback.min_dwell_s": _seconds(),
    "fallback.return_healthy_s": _seconds(0),
    "fallback.return_recheck_s": _seconds(),
    "fallback.replacement_s": _seconds(0),
    "fallback.deadline_safety": Range(0, MAX_FACTOR),
    "actuator.calls_per_s": Range(0, MAX_COUNT, low_open=True, unit="calls per second"),
    "actuator.burst_calls": _count(),
    "actuator.termination_window_s": _seconds(),
    "actuator.termination_threshold": _count(0),
    "actuator.breaker_open_s": _seconds(),
    "actuator.outage_failures": _count(),
    "actuator.recovery_ratio": Range(0, 1, low_open=True, unit="a share of the call budget"),
    "actuator.recovery_step_s": _seconds(),
    "canary.share_ratio": Range(0, 1, low_open=True, unit="a share of the workload's pools"),
    "canary.hold_s": _seconds(),
    "canary.max_notice_to_drain_p99_ms": Range(0, MAX_S * 1000, unit="milliseconds"),
    "canary.max_drain_failures": _count(0),
    "canary.max_losses_without_drain": _count(0),
    "canary.max_dead_letters": _count(0),
    "canary.min_drains": _count(0),
}


class SettingError(ValueError):
    """A `--set` assignment that cannot be applied; the message is one sentence."""


def all_keys() -> list[str]:
    """Every field of `DeciderSettings` as ``section.field``, in declaration order."""
    return [
        f"{section.name}.{f.name}"
        for section in fields(DeciderSettings)
        if section.name not in NOT_SECTIONS
        for f in fields(_section_type(section.name))
    ]


def settable_keys() -> list[str]:
    return [k for k in all_keys() if k not in NOT_SETTABLE]


def _section_type(section: str) -> type:
    section_type: type = typing.get_type_hints(DeciderSettings)[section]
    return section_type


def _field_type(key: str) -> type:
    section, name = key.split(".", 1)
    field_type: type = typing.get_type_hints(_section_type(section))[name]
    return field_type


def resolve(key: str) -> str:
    """The full ``section.field`` of `key` (either form); SettingError naming what exists."""
    keys = all_keys()
    if key in keys:
        full = key
    else:
        matches = [k for k in keys if k.split(".", 1)[1] == key]
        if len(matches) > 1:
            raise SettingError(
                f"--set {key}: more than one section has it ({', '.join(matches)}); "
                "name the section"
            )
        if not matches:
            sections = sorted({k.split(".", 1)[0] for k in keys})
            raise SettingError(
                f"--set {key}: no decider setting has that name; the keys are "
                f"section.field with sections {', '.join(sections)} "
                "(docs/replay-decisions.md lists every key and its range)"
            )
        full = matches[0]
    if full in NOT_SETTABLE:
        raise SettingError(
            f"--set {full}: the owner tag names whose instances the orchestrator may delete, "
            "the recorded run's identity, and cannot be changed"
        )
    return full


def allowed(key: str) -> str:
    """What `key` (full form) may be, in words: "an integer from 1 to 10,000 (pools)"."""
    return RANGES[key].describe(_field_type(key) is int)


def parse_value(key: str, text: str) -> int | float:
    """`text` as the value of `key` (full form), within its range; SettingError otherwise."""
    integer = _field_type(key) is int
    bounds = RANGES[key]
    allowed = bounds.describe(integer)
    try:
        value: int | float = int(text, 10) if integer else float(text)
    except ValueError:
        raise SettingError(f"--set {key}={text}: {key} must be {allowed}") from None
    if not math.isfinite(value) or not bounds.admits(value):
        raise SettingError(f"--set {key}={text}: {key} must be {allowed}")
    return value


def settings_table() -> list[dict[str, Any]]:
    """Every settable key with its default and what it may be set to."""
    defaults = as_data(DeciderSettings())
    return [{"key": k, "default": defaults[k], "allowed": allowed(k)} for k in settable_keys()]


def parse_assignments(assignments: Sequence[str]) -> dict[str, int | float]:
    """Each ``KEY=VALUE`` of `assignments` as full key -> value, each within its range (the
    last of a key wins); SettingError for the first that is not."""
    values: dict[str, int | float] = {}
    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        if not sep or not key.strip():
            raise SettingError(f"--set {assignment}: give KEY=VALUE, e.g. exclusion.rate_factor=4")
        full = resolve(key.strip())
        values[full] = parse_value(full, text.strip())
    return values


def apply(base: DeciderSettings, assignments: Sequence[str]) -> DeciderSettings:
    """`base` with each ``KEY=VALUE`` of `assignments` applied."""
    return with_values(base, parse_assignments(assignments))


def with_values(base: DeciderSettings, values: Mapping[str, int | float]) -> DeciderSettings:
    """`base` with `values` (full keys, parsed) set; the settings' checks across fields run on
    the result, their message naming the keys that were set."""
    sections: dict[str, dict[str, int | float]] = {}
    for key, value in values.items():
        section, name = key.split(".", 1)
        sections.setdefault(section, {})[name] = value
    try:
        return replace(
            base,
            **{
                section: replace(getattr(base, section), **changes)
                for section, changes in sections.items()
            },
        )
    except ValueError as error:
        given = ", ".join(f"{k}={v:g}" for k, v in values.items())
        raise SettingError(f"--set {given}: {error}") from None


def as_data(settings: DeciderSettings) -> dict[str, int | float | str]:
    """Every field as ``section.field`` -> value (JSON-able, for a run's record)."""
    data: dict[str, int | float | str] = {}
    for key in all_keys():
        section, name = key.split(".", 1)
        data[key] = getattr(getattr(settings, section), name)
    return data


def from_data(data: Mapping[str, Any]) -> DeciderSettings:
    """`as_data`'s inverse; a field missing from `data` keeps its default (a record written
    before the field existed), an unknown or ill-typed one is refused."""
    unknown = sorted(set(data) - set(all_keys()))
    if unknown:
        raise SettingError(f"unknown decider settings {', '.join(unknown)}")
    sections: dict[str, dict[str, Any]] = {}
    for key, raw in data.items():
        expected = _field_type(key)
        value = float(raw) if expected is float and type(raw) is int else raw
        if type(value) is not expected:
            raise SettingError(f"decider setting {key} is {raw!r}, not {expected.__name__}")
        section, name = key.split(".", 1)
        sections.setdefault(section, {})[name] = value
    base = DeciderSettings()
    try:
        return replace(
            base, **{s: replace(getattr(base, s), **changes) for s, changes in sections.items()}
        )
    except ValueError as error:
        raise SettingError(str(error)) from None


def differences(
    before: DeciderSettings, after: DeciderSettings
) -> list[tuple[str, int | float | str, int | float | str]]:
    """(key, before, after) for every field that differs, in declaration order."""
    a, b = as_data(before), as_data(after)
    return [(k, a[k], b[k]) for k in all_keys() if a[k] != b[k]]
