"""Read-side rows as JSON values, the one rendering `--json` and the HTTP API share.

Times are ISO 8601 in UTC with a ``Z``; money columns (``..._eur_micros``, integer micro-euros)
become ``..._eur``, exact decimal strings in euros as in the savings report; ids are strings.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, date, datetime
from typing import Any

from projections.money import eur_string

MONEY_SUFFIX = "_eur_micros"


def utc_text(moment: datetime) -> str:
    """``2026-11-02T14:00:00Z`` (microseconds only where there are some)."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return utc_text(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    return value


def json_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """One row with its money in euros (decimal strings) and its times in UTC."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if key.endswith(MONEY_SUFFIX):
            out[key.removesuffix("_micros")] = None if value is None else eur_string(int(value))
        else:
            out[key] = json_value(value)
    return out
