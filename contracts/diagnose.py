"""Turning validation errors and findings into located `ContractError`s with a fix.

pydantic reports an error at a location such as ``("checkpoint", "size_bytes")``; this module
finds the line the author wrote that key on (`LoadedYaml`), says what is wrong in the
contract's own words and how to fix it. A finding about a field the author did not write (a
tier default) points at the ``tier:`` line and says the value came from the tier.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from contracts.source import LoadedYaml
from schemas.contracts.errors import ContractError, Finding, KeyPath, dotted
from schemas.contracts.model import (
    CheckpointDocument,
    ContractDocument,
    FallbackDocument,
    RestartDocument,
)
from schemas.contracts.tiers import TIERS
from schemas.contracts.units import FixableError, as_written, format_bytes, format_eur

_MODELS: dict[KeyPath, type[BaseModel]] = {
    (): ContractDocument,
    ("checkpoint",): CheckpointDocument,
    ("restart",): RestartDocument,
    ("fallback",): FallbackDocument,
}

# Names authors reach for that mean something else here; the fix says what to write.
_RENAMED: dict[str, str] = {
    "spend_cap_per_month_eur_micros": "the fallback cap is per day, UTC (ADR-23): write "
    "fallback.spend_cap_per_day_eur_micros",
    "spend_cap_eur_micros": "write fallback.spend_cap_per_day_eur_micros (the cap is daily)",
    "tolerated_interruptions_per_day": "write tolerated_interruptions_per_h: <n>/day",
    "tolerated_interruption_per_h": "write tolerated_interruptions_per_h",
    "floor": "write floor_vcpu",
    "drain_budget": "write drain_budget_s",
    "api_version": "write apiVersion: spotcap/v1",
    "approver": "the approver belongs under fallback: (fallback.approver)",
}

_FIELD_FIXES: dict[str, str] = {
    "apiVersion": "write apiVersion: spotcap/v1 (the only contract format this compiler reads)",
    "kind": "write kind: InterruptionContract",
    "tier": "use one of t1, t2, t3, t4, t5, or bespoke with every field declared "
    "(see docs/contracts.md#tiers)",
    "scheduler": "use kubernetes or slurm",
    "deadline": "write an ISO 8601 timestamp with a timezone, e.g. 2026-12-01T06:00:00Z",
    "checkpoint": "write checkpoint as a mapping, e.g. method: spark, size_bytes: 2 GiB, "
    "periodic_interval_s: 60m, each on its own indented line",
    "restart": "write restart as a mapping of semantics and effects_on_completion_only",
    "fallback": "write fallback as a mapping of spend_cap_per_day_eur_micros and approver",
}

_KIND_WORDS = {
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "model_type": "a mapping of fields",
    "model_attributes_type": "a mapping of fields",
    "dict_type": "a mapping of fields",
}


def _key_path(loc: tuple[int | str, ...]) -> KeyPath:
    # pydantic appends tags such as "function-after[...]" inside unions; keep the field path.
    path: list[str | int] = []
    for part in loc:
        if isinstance(part, str) and ("[" in part or part in ("int", "str", "float", "bool")):
            break
        path.append(part)
    return tuple(path)


def _known_fields(parent: KeyPath) -> list[str]:
    model = _MODELS.get(parent)
    if model is None:
        return []
    return [info.alias or name for name, info in model.model_fields.items()]


def _short(value: Any) -> str:
    text = as_written(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bound(name: str, bound: Any) -> str:
    """A bound in the unit the field is written in, e.g. ``1125899906842624 (1 PiB)``."""
    if not isinstance(bound, int):
        return str(bound)
    if name.endswith("_bytes"):
        return f"{bound} ({format_bytes(bound)})"
    if name.endswith("_eur_micros"):
        return f"{bound} ({format_eur(bound)})"
    if name.endswith("_s"):
        return f"{bound} s ({bound // 86_400} days)" if bound >= 86_400 else f"{bound} s"
    return str(bound)


def describe_validation_error(detail: ErrorDetails) -> tuple[KeyPath, str, str]:
    """(field path, message, fix) of one pydantic error on a `ContractDocument`."""
    path = _key_path(detail["loc"])
    kind = detail["type"]
    name = str(path[-1]) if path else "(document)"
    field = dotted(path)
    value = detail.get("input")
    ctx = detail.get("ctx", {})
    if kind == "value_error" and isinstance(ctx.get("error"), FixableError):
        error: FixableError = ctx["error"]
        return path, error.message, error.fix
    if kind == "extra_forbidden":
        if name in _RENAMED:
            return path, "is not a contract field", _RENAMED[name]
        known = _known_fields(path[:-1])
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        return (
            path,
            "is not a contract field",
            f"{hint}remove it, or use one of: {', '.join(known)}",
        )
    if kind == "missing":
        return path, "is required", f"add {field}: ... ({_FIELD_FIXES.get(name, 'see docs')})"
    if kind in ("literal_error", "enum"):
        expected = ctx.get("expected", "")
        fix = _FIELD_FIXES.get(name, f"use one of {expected}")
        return path, f"{_short(value)} is not one of {expected}", fix
    if kind in ("greater_than", "greater_than_equal"):
        bound = ctx.get("gt", ctx.get("ge"))
        relation = "above" if kind == "greater_than" else "at least"
        return path, f"{_short(value)} is too small", f"use a value {relation} {bound}"
    if kind in ("less_than", "less_than_equal"):
        bound = ctx.get("lt", ctx.get("le"))
        relation = "below" if kind == "less_than" else "at most"
        return (
            path,
            f"{_short(value)} is too large",
            f"use a value {relation} {_bound(name, bound)}",
        )
    if kind == "finite_number":
        return path, f"{_short(value)} is not a finite number", "write a finite number"
    if kind.startswith(("datetime", "timezone")):
        return path, f"{_short(value)} is not a timestamp with a timezone", _FIELD_FIXES["deadline"]
    wanted = _KIND_WORDS.get(kind)
    if wanted is not None:
        fix = _FIELD_FIXES.get(name, f"write {field} as {wanted}")
        return path, f"{_short(value)} is not {wanted}", fix
    return path, detail["msg"], _FIELD_FIXES.get(name, f"correct {field} (see docs/contracts.md)")


def locate(
    file: Path, loaded: LoadedYaml, path: KeyPath, *, message: str, fix: str, rule: str
) -> ContractError:
    """A `ContractError` at the line `path` was written on (or its parent's, for a missing key)."""
    return ContractError(file, loaded.line_of(path), dotted(path), message, fix, rule)


def locate_finding(file: Path, loaded: LoadedYaml, finding: Finding) -> ContractError:
    """A finding about a resolved contract, placed where its value came from."""
    path, message = finding.path, finding.message
    tier = loaded.data.get("tier") if isinstance(loaded.data, dict) else None
    line = loaded.line_of(path)
    written = loaded.has(path) or loaded.has(path[:1])
    if not written and finding.rule == "tier":
        # Required because of the tier (bespoke has no defaults): point at the tier line.
        line = loaded.line_of(("tier",))
    elif not written and tier in TIERS:
        # The value is the tier's default: point at the tier line and say so.
        line = loaded.line_of(("tier",))
        message += f" (the value is the tier {tier} default)"
    return ContractError(file, line, finding.field, message, finding.fix, finding.rule)
