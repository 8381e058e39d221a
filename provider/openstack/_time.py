"""Timestamps: spotcap uses int microseconds since the epoch, UTC; OpenStack uses strings."""

from __future__ import annotations

from datetime import UTC, datetime

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MINUTE_US = 60_000_000


def iso_to_us(text: str) -> int:
    """``2026-11-30T07:00:00Z``, ``2017-12-26T12:00:00.000000`` or ``2017-12-27 10:00:00``
    (naive means UTC, as OpenStack writes it) as microseconds since the epoch."""
    parsed = datetime.fromisoformat(text.strip().replace(" ", "T"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    delta = parsed - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def us_to_blazar(at_us: int) -> str:
    """Blazar's request date format, ``CCYY-MM-DD hh:mm`` (UTC); refuses a time off the minute,
    which Blazar would silently truncate."""
    if at_us % _MINUTE_US:
        raise ValueError(f"{at_us} µs is not on a whole minute; Blazar dates have minute precision")
    return datetime.fromtimestamp(at_us // 1_000_000, tz=UTC).strftime("%Y-%m-%d %H:%M")
