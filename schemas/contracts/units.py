"""Units a contract may be written in: durations, sizes, money and interruption rates.

Each parser takes what YAML produced (an int, a float or a string) and returns the value in the
unit the field's name carries (``_s``, ``_bytes``, ``_eur_micros``, ``_per_h``). A value in a
unit it does not know raises `UnitError`, whose message says which units are accepted and whose
``fix`` shows an example, so a contract author can correct the file without reading code.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from decimal import Decimal, localcontext
from typing import Any


def as_written(value: Any) -> str:
    """`value` as a person wrote it in YAML, not as Python prints it: ``true``, ``2026-12-01``,
    ``'90 x'`` (never ``True`` or ``datetime.date(2026, 12, 1)``)."""
    if value is None:
        return "an empty value"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, (int, float, Decimal)):
        return str(value)
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


DURATION_UNITS_S = {"s": 1, "m": 60, "h": 3600}
SIZE_UNITS_BYTES = {
    "B": 1,
    "kB": 10**3,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}
RATE_UNITS_PER_H = {"h": Decimal(1), "day": Decimal(1) / Decimal(24)}
EUR_MICROS = 1_000_000

# Upper bounds of what a contract may declare. Every integer of a contract ends up in an Avro
# ``long`` (int64) or ``int`` (int32) of the ``contract_published`` event, so none may exceed
# int64; where a realistic limit is obvious it is much lower. `MAX_DIGITS` stops a number with
# thousands of digits before Python converts it (and refuses: int_max_str_digits).
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
MAX_VERSION = INT32_MAX
MAX_PRIORITY = INT32_MAX  # an Avro int in the event
MAX_VCPU = 10_000_000  # ten million vCPU: more than any region holds
MAX_DURATION_S = 366 * 86_400  # a year
MAX_SIZE_BYTES = 2**50  # 1 PiB, the final checkpoint of one instance
MAX_EUR_MICROS = 10**9 * EUR_MICROS  # EUR 1,000,000,000 a day
MAX_DIGITS = 30

# ASCII digits only: `\d` would also take other scripts' digits ('١٢٠') and '²'.
_DURATION_PART = re.compile(r"(\d+)\s*([a-zA-Z]+)", re.ASCII)
_DURATION = re.compile(r"^(?:\s*\d+\s*[a-zA-Z]+)+\s*$", re.ASCII)
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*$", re.ASCII)
_MONEY = re.compile(
    r"^\s*(?:(?:EUR|€)\s*(\d+(?:\.\d+)?)|(\d+(?:\.\d+)?)\s*(?:EUR|€))\s*$", re.ASCII
)
_NUMBER = re.compile(r"^\s*\d+(?:\.\d+)?\s*$", re.ASCII)
_WHOLE = re.compile(r"^\s*\d+\s*$", re.ASCII)
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:/|per)\s*([a-zA-Z]+)\s*$", re.ASCII)


class FixableError(ValueError):
    """A value a contract cannot hold; ``fix`` tells the author what to write instead."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


class UnitError(FixableError):
    """A value in an unknown unit or form; the message lists the accepted units."""


def _decimal(number: str, fix: str) -> Decimal:
    """An exact Decimal of an ASCII number of at most `MAX_DIGITS` digits."""
    if len(number.replace(".", "")) > MAX_DIGITS:
        raise UnitError(f"{number[:20]}... has more than {MAX_DIGITS} digits", fix)
    return Decimal(number)


def _exact_product(number: Decimal, scale: int | Decimal) -> Decimal:
    # The default context rounds to 28 digits: '1.0000000000000000000000000001 GiB' would pass.
    with localcontext(prec=4 * MAX_DIGITS):
        return number * scale


def _refuse_bool(value: object, what: str, fix: str) -> None:
    # YAML reads `yes`/`true` as a bool, and bool is an int in Python: never take it as a number.
    if isinstance(value, bool):
        raise UnitError(f"{as_written(value)} is a boolean, not {what}", fix)


def parse_duration_s(value: object) -> int:
    """Whole seconds from ``90``, ``"90s"``, ``"5m"``, ``"1h30m"`` (units: s, m, h)."""
    accepted = "accepted units: s, m, h (e.g. 90s, 5m, 1h30m) or a whole number of seconds"
    fix = "write a duration such as 90 (seconds), 90s or 5m"
    _refuse_bool(value, "a duration", fix)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        raise UnitError(f"{as_written(value)} is not a whole number of seconds; {accepted}", fix)
    if isinstance(value, str):
        text = value.strip()
        if _WHOLE.match(text):
            return int(_decimal(text, fix))
        if _DURATION.match(text):
            total = 0
            for number, unit in _DURATION_PART.findall(text):
                if unit not in DURATION_UNITS_S:
                    raise UnitError(
                        f"{as_written(value)}: unknown duration unit {unit!r}; {accepted}", fix
                    )
                total += int(_decimal(number, fix)) * DURATION_UNITS_S[unit]
            return total
    raise UnitError(f"{as_written(value)} is not a duration; {accepted}", fix)


def parse_size_bytes(value: object) -> int:
    """Bytes from ``2147483648`` or ``"2 GiB"`` (SI kB..TB, binary KiB..TiB)."""
    accepted = "accepted units: " + ", ".join(SIZE_UNITS_BYTES) + " or a whole number of bytes"
    fix = "write a size such as 2 GiB, 500 MB or a number of bytes"
    _refuse_bool(value, "a size", fix)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        match = _SIZE.match(value)
        if match:
            number, unit = match.groups()
            if unit not in SIZE_UNITS_BYTES:
                raise UnitError(f"{as_written(value)}: unknown size unit {unit!r}; {accepted}", fix)
            size = _exact_product(_decimal(number, fix), SIZE_UNITS_BYTES[unit])
            if size != size.to_integral_value():
                raise UnitError(f"{as_written(value)} is not a whole number of bytes", fix)
            return int(size)
        if _WHOLE.match(value):
            return int(_decimal(value.strip(), fix))
    raise UnitError(f"{as_written(value)} is not a size; {accepted}", fix)


def parse_eur_micros(value: object) -> int:
    """Micro-euros from ``120500000`` or ``"EUR 120.50"`` (also ``"120.50 EUR"``, ``"€120.50"``).

    A bare decimal number is refused: 120.5 could mean euros or micro-euros, and money is never
    a float (STYLE.md).
    """
    fix = 'write the amount as a string such as "EUR 120.50", or as whole micro-euros (120500000)'
    _refuse_bool(value, "an amount of money", fix)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        raise UnitError(
            f"{as_written(value)} is ambiguous: money is written in euros with its currency or "
            "as whole micro-euros, never as a bare decimal number",
            fix,
        )
    if isinstance(value, str):
        match = _MONEY.match(value)
        if match:
            amount = _decimal(match.group(1) or match.group(2), fix)
            micros = _exact_product(amount, EUR_MICROS)
            if micros != micros.to_integral_value():
                raise UnitError(f"{as_written(value)} has more than 6 decimal places", fix)
            return int(micros)
    raise UnitError(f"{as_written(value)} is not an amount of money; accepted: EUR <amount>", fix)


def parse_rate_per_h(value: object) -> float:
    """Interruptions per instance-hour from ``0.05``, ``"0.05/h"`` or ``"1.2/day"``."""
    accepted = "accepted units: /h, /day (e.g. 0.05/h, 1/day) or a number per hour"
    fix = "write a rate such as 0.05 (per instance-hour), 0.05/h or 1/day"
    _refuse_bool(value, "a rate", fix)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        match = _RATE.match(value)
        if match:
            number, unit = match.groups()
            if unit not in RATE_UNITS_PER_H:
                raise UnitError(f"{as_written(value)}: unknown rate unit {unit!r}; {accepted}", fix)
            return float(_decimal(number, fix) * RATE_UNITS_PER_H[unit])
        if _NUMBER.match(value):
            return float(_decimal(value.strip(), fix))
    raise UnitError(f"{as_written(value)} is not a rate; {accepted}", fix)


def format_bytes(size_bytes: int) -> str:
    """``2147483648`` -> ``"2 GiB"``; for messages."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        scale = SIZE_UNITS_BYTES[unit]
        if size_bytes >= scale:
            value = size_bytes / scale
            return f"{value:.1f} {unit}".replace(".0 ", " ")
    return f"{size_bytes} B"


def format_eur(micros: int) -> str:
    """``120500000`` -> ``"EUR 120.50"``; for messages."""
    return f"EUR {Decimal(micros) / EUR_MICROS:,.2f}"
