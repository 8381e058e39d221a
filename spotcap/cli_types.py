"""Option types that refuse what click lets through: ``nan`` and ``inf`` as a number of days
(every comparison with ``nan`` is false, so a plain `click.FloatRange` accepts it), a port
outside 0..65535."""

from __future__ import annotations

import math
from typing import Any

import click


class FiniteFloatRange(click.FloatRange):
    """A `click.FloatRange` of finite numbers only."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value} is not a finite number; write one such as 7 or 0.5", param, ctx)
        return super().convert(number, param, ctx)


PORT = click.IntRange(0, 65535)

__all__ = ["PORT", "FiniteFloatRange"]
