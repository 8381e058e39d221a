"""How people write a time or a day in the read side's filters (`spotcap query --since`, the
API's ``since``, ``from`` and ``to``), shared by the command line and the HTTP API."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime

# RFC 3339 (and ISO 8601's extended form): a day, optionally a time, optionally an offset.
_DAY = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
_MOMENT = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}"
    r"(?:[Tt ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,6})?)?(?:[Zz]|[+-][0-9]{2}:[0-9]{2})?)?$"
)
MOMENT_FORMS = "2026-11-02 or 2026-11-02T14:00:00Z (UTC when no offset is given)"
DAY_FORM = "2026-11-02"


def parse_moment(text: str) -> datetime:
    """A time as people write it: ``2026-11-02``, ``2026-11-02T14:00``, ``...14:00:00Z``,
    ``...14:00:00+01:00``; UTC when no offset is given. ValueError otherwise."""
    if not _MOMENT.match(text):
        raise ValueError(f"{text!r} is not a date or time")
    moment = datetime.fromisoformat(text.upper())  # ValueError for 2026-02-30 and the like
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def parse_day(text: str) -> date:
    """A UTC day, ``2026-11-02``. ValueError otherwise."""
    if not _DAY.match(text):
        raise ValueError(f"{text!r} is not a day")
    return date.fromisoformat(text)


def check_span(first: date | None, last: date | None) -> None:
    """ValueError (one sentence) when the first day is after the last."""
    if first is not None and last is not None and first > last:
        raise ValueError(
            f"from {first.isoformat()} is after to {last.isoformat()}: give a first day on or "
            "before the last"
        )


class TimeInputError(ValueError):
    """A time or day option written in no form this reads, or a span the wrong way round: one
    sentence, and how to write it (`fix`, empty when the sentence says it)."""

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.fix = fix


def since_option(value: str | None) -> datetime | None:
    """``--since`` as a time (None when not given); TimeInputError names the forms read."""
    if value is None:
        return None
    try:
        return parse_moment(value)
    except ValueError:
        raise TimeInputError(
            f"--since {value!r} is not a date or time", f"write it as {MOMENT_FORMS}"
        ) from None


def day_options(first: str | None, last: str | None) -> tuple[date | None, date | None]:
    """``--from`` and ``--to`` as UTC days (None: open); TimeInputError for a day written in no
    form this reads, or a first day after the last."""
    days: list[date | None] = []
    for name, value in (("--from", first), ("--to", last)):
        try:
            days.append(None if value is None else parse_day(value))
        except ValueError:
            raise TimeInputError(
                f"{name} {value!r} is not a date", f"write it as {DAY_FORM}"
            ) from None
    try:
        check_span(days[0], days[1])
    except ValueError as error:
        raise TimeInputError(str(error)) from None
    return days[0], days[1]
