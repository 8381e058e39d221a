"""Observed interruption in event time: exposure (instance-hours) and reclamations over windows.

`Exposure` integrates a pool's live instance count over event time exactly, in integer
instance-microseconds, so a window's instance-hours are the same on every replay. `poisson_tail`
is the probability of at least k events where lambda are expected: the exclusion watcher
compares observed reclamation with its expectation through it, so a pool is not excluded for
ordinary bad luck (ADR-07).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

US_PER_H = 3_600_000_000


@dataclass(frozen=True, slots=True)
class Exposure:
    """A live count over event time and its running integral, kept back to `horizon_us`.

    `points` are (at_us, integral up to at_us, count from at_us on), oldest first; the first
    point is at or before the start of the longest window asked about.
    """

    horizon_us: int
    points: tuple[tuple[int, int, int], ...] = ()

    @property
    def count(self) -> int:
        return self.points[-1][2] if self.points else 0

    @property
    def last_us(self) -> int | None:
        return self.points[-1][0] if self.points else None

    def integral_at(self, at_us: int) -> int:
        """Instance-microseconds from the first point to `at_us` (count held after the last)."""
        total = 0
        for point_us, integral, count in reversed(self.points):
            if point_us <= at_us:
                return integral + count * (at_us - point_us)
        return total

    def set_count(self, at_us: int, count: int) -> Exposure:
        """The count becomes `count` at `at_us` (an earlier time is taken as the latest)."""
        if not self.points:
            return Exposure(self.horizon_us, ((at_us, 0, count),))
        last_us, integral, last_count = self.points[-1]
        at_us = max(at_us, last_us)
        if count == last_count:
            return self
        integral += last_count * (at_us - last_us)
        points = self.points[:-1] if at_us == last_us else self.points
        return Exposure(self.horizon_us, _prune((*points, (at_us, integral, count)), at_us, self))

    def instance_h(self, start_us: int, end_us: int) -> float:
        """Instance-hours in [start_us, end_us]."""
        if end_us <= start_us or not self.points:
            return 0.0
        return (self.integral_at(end_us) - self.integral_at(start_us)) / US_PER_H


def _prune(
    points: tuple[tuple[int, int, int], ...], now_us: int, exposure: Exposure
) -> tuple[tuple[int, int, int], ...]:
    """Drop points no window can need: keep the last one at or before now - horizon."""
    cutoff = now_us - exposure.horizon_us
    first = 0
    for index, (point_us, _, _) in enumerate(points):
        if point_us <= cutoff:
            first = index
        else:
            break
    return points[first:]


def poisson_tail(k: int, expected: float) -> float:
    """P(X >= k) for X ~ Poisson(expected), summed from k upwards (accurate when tiny)."""
    if k <= 0:
        return 1.0
    if expected <= 0.0:
        return 0.0
    log_expected = math.log(expected)
    total = 0.0
    i = k
    while True:
        term = math.exp(-expected + i * log_expected - math.lgamma(i + 1))
        total += term
        if i > expected and term <= total * 1e-16:
            return min(1.0, total)
        i += 1
