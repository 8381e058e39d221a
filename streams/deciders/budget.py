"""The regional token budget for mutating provider calls (ADR-12), in event time, in integers.

A token bucket that holds at most `burst` tokens and refills at `rate_per_s` (10 mutating
calls a second by default, scaled down by the recovery ratio after an outage or a breaker).
`take` never refuses: a call that finds the bucket empty *reserves* its token and is told how
long to wait, so the calls a bucket grants never exceed ``burst + rate x time`` over any
stretch of event time, and queued calls go out in order. Tokens are counted in millionths
(`UNIT`) with integer arithmetic and refills rounded down, so a replay grants the same
instants and rounding can only slow the budget, never exceed it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

UNIT = 1_000_000  # one token, in the bucket's integer units


@dataclass(frozen=True, slots=True)
class Grant:
    """When a call may go out (`not_before_us`), and the bucket's figures when it asked."""

    not_before_us: int
    tokens_before: float
    queued: int

    def delay_us(self, at_us: int) -> int:
        return self.not_before_us - at_us


@dataclass(frozen=True, slots=True)
class TokenBucket:
    """Tokens (in `UNIT`s; negative while calls are queued) as of `last_us`."""

    burst: int
    units: int
    last_us: int

    @classmethod
    def full(cls, burst: int, at_us: int) -> TokenBucket:
        return cls(burst, burst * UNIT, at_us)

    def refilled(self, at_us: int, rate_per_s: float, ratio: float = 1.0) -> TokenBucket:
        """The bucket at `at_us` (earlier times count as `last_us`); while the budget runs at
        `ratio` of itself, so does the bucket's size (a recovering budget has no full burst)."""
        limit = max(1, math.floor(self.burst * ratio)) * UNIT
        gained = math.floor(max(0, at_us - self.last_us) * rate_per_s)
        # rate tokens/s = rate units/us (UNIT units per token, 10^6 us per s)
        units = min(limit, self.units + gained)
        return TokenBucket(self.burst, units, max(at_us, self.last_us))

    def take(self, at_us: int, rate_per_s: float, ratio: float = 1.0) -> tuple[TokenBucket, Grant]:
        """Take one token at `at_us`; returns the bucket after and when the call may go."""
        bucket = self.refilled(at_us, rate_per_s, ratio)
        now_us = max(at_us, bucket.last_us)
        before = bucket.units / UNIT
        units = bucket.units - UNIT
        wait_us = 0 if units >= 0 else math.ceil(-units / rate_per_s)
        queued = 0 if units >= 0 else math.ceil(-units / UNIT)
        after = TokenBucket(bucket.burst, units, bucket.last_us)
        return after, Grant(now_us + wait_us, before, queued)
