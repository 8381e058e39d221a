"""Event time (integer microseconds since the epoch, UTC) as the database's timestamps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ts(micros: int) -> datetime:
    """An aware UTC datetime, exact to the microsecond."""
    return EPOCH + timedelta(microseconds=micros)


_DATES: dict[int, str] = {}  # day since the epoch: its date, as text
_STAMPS: dict[int, str] = {}  # event time: its `stamp`
_STAMPS_KEPT = 4096


def stamp(micros: int) -> str:
    """The time as PostgreSQL's timestamptz text (``2026-11-30 00:00:00.000000+00``), for the
    rows the fleet writer copies: cheaper than a datetime (`ts`) that psycopg then prints, and
    remembered for the times many events share (a ranking round's pools)."""
    text = _STAMPS.get(micros)
    if text is None:
        seconds, fraction = divmod(micros, 1_000_000)
        day, second = divmod(seconds, 86_400)
        date = _DATES.get(day)
        if date is None:
            d = EPOCH + timedelta(days=day)
            date = _DATES[day] = f"{d.year:04d}-{d.month:02d}-{d.day:02d}"
        hour, second = divmod(second, 3_600)
        minute, second = divmod(second, 60)
        text = f"{date} {hour:02d}:{minute:02d}:{second:02d}.{fraction:06d}+00"
        if len(_STAMPS) >= _STAMPS_KEPT:
            _STAMPS.clear()
        _STAMPS[micros] = text
    return text


def ts_or_none(micros: int | None) -> datetime | None:
    return None if micros is None else ts(micros)


def micros(moment: datetime) -> int:
    """Back to integer microseconds since the epoch."""
    delta = moment - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def iso(micros_: int) -> str:
    """ISO 8601 with microseconds and a Z: ``2026-11-02T00:00:00.000000Z``."""
    return ts(micros_).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
