"""Money is integer micro-euros everywhere (never floats); these turn it into words and strings."""

from __future__ import annotations

from decimal import Decimal

MICROS_PER_EUR = 1_000_000


def eur_decimal(micros: int) -> Decimal:
    """Exact euros as a Decimal (six decimal places)."""
    return Decimal(micros).scaleb(-6)


def eur_string(micros: int) -> str:
    """Euros as a decimal string for machines (JSON): ``"1234.500000"``."""
    return f"{eur_decimal(micros):.6f}"


def eur_text(micros: int) -> str:
    """Euros for people, rounded to the cent with thousands separators: ``€1,234.50``."""
    cents = (abs(micros) + 5_000) // 10_000  # half up, on the magnitude
    sign = "-" if micros < 0 and cents else ""
    return f"{sign}€{cents // 100:,}.{cents % 100:02d}"
