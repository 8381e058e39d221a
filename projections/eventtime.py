"""Event time (integer microseconds since the epoch, UTC) as the database's timestamps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ts(micros: int) -> datetime:
    """An aware UTC datetime, exact to the microsecond."""
    return EPOCH + timedelta(microseconds=micros)


def ts_or_none(micros: int | None) -> datetime | None:
    return None if micros is None else ts(micros)


def micros(moment: datetime) -> int:
    """Back to integer microseconds since the epoch."""
    delta = moment - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def iso(micros_: int) -> str:
    """ISO 8601 with microseconds and a Z: ``2026-11-02T00:00:00.000000Z``."""
    return ts(micros_).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
