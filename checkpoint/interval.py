"""The periodic checkpoint interval as a loss budget, not a habit (ADR-20); pure.

A loss costs the work done since the last checkpoint. When the notice comes and the final
checkpoint fits in it, nothing is lost, so the periodic checkpoint is insurance against the
losses that come without a usable notice only. Checkpoints every ``T`` seconds lose ``T / 2``
of work on average to each such loss, so at ``r`` of them per hour the work lost per hour is
``r x T / 2``.

* **The budget** is what the contract tolerates: at its own tolerated interruption rate
  ``tolerated_interruptions_per_h``, every loss without notice, and its declared
  ``checkpoint.periodic_interval_s``, it accepts ``L = rate x interval / 2`` seconds of work
  lost per hour (a t2 contract, 0.05/h and 60 minutes: 90 s an hour, 2.5 %).
* **The rate** is the pool's: the interruption rate the scorer observed for the pool the
  instance runs in (the figure the deciders rank and exclude by), times the share of those
  interruptions that come without notice, or whose final checkpoint would not fit the drain
  budget (then every one counts).
* **The interval** is ``T = 2 L / r``: the longest that keeps the expected loss within the
  budget on this pool; never longer than the contract's declared interval (the most work its
  owner accepts losing in one loss), and never shorter than the write takes ``1 / max_overhead``
  times (a checkpoint every 20 writes' time spends at most 5 % of the time writing). So on a
  pool no worse than the contract tolerates the declared interval stands, and on a worse one
  (a misbehaving pool, a wave, notices that stop coming) the interval shortens until the
  expected loss is back within the budget. When the floor wins, the budget cannot be met at
  that overhead, and the decision says so (``budget_met``).

docs/checkpoints.md works an example through and measures the loss on a simulated wave.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["MAX_INTERVAL_S", "IntervalDecision", "LossBudget", "PoolRisk", "periodic_interval"]

MAX_INTERVAL_S = 24 * 3600
"""Whatever the budget allows, a generation at least daily: retention counts in days too."""
HOUR_S = 3600.0


@dataclass(frozen=True, slots=True)
class LossBudget:
    """The work a contract tolerates losing: on average per hour of running, and at most in
    one loss (its declared interval; None: no such bound)."""

    loss_s_per_h: float
    declared_interval_s: float | None = None

    @classmethod
    def of_contract(
        cls, tolerated_interruptions_per_h: float, periodic_interval_s: int
    ) -> LossBudget:
        """The budget a contract declares: its tolerated rate times half its interval."""
        return cls(tolerated_interruptions_per_h * periodic_interval_s / 2, periodic_interval_s)

    @property
    def share(self) -> float:
        """The budget as a share of the work (90 s an hour: 0.025)."""
        return self.loss_s_per_h / HOUR_S


@dataclass(frozen=True, slots=True)
class PoolRisk:
    """The pool's observed interruption rate and the share that comes without notice."""

    interruptions_per_h: float
    no_notice_share: float = 1.0
    """1.0 when unknown: without a notice every loss costs work (ADR-05's safe floor)."""

    def __post_init__(self) -> None:
        if self.interruptions_per_h < 0 or not 0 <= self.no_notice_share <= 1:
            raise ValueError("a rate >= 0 and a share in [0, 1]")


@dataclass(frozen=True, slots=True)
class IntervalDecision:
    interval_s: float
    losing_interruptions_per_h: float
    """The rate of interruptions that cost work: r."""
    expected_loss_s_per_h: float
    """r x interval / 2 at the chosen interval."""
    budget_met: bool
    bound_by: str
    """``budget``, ``declared`` (the contract's interval), ``write overhead`` or ``maximum``."""


def periodic_interval(
    budget: LossBudget,
    pool: PoolRisk,
    *,
    write_s: float,
    final_fits: bool = True,
    max_overhead: float = 0.05,
    max_interval_s: float = MAX_INTERVAL_S,
) -> IntervalDecision:
    """The periodic interval that keeps the expected loss on `pool` within `budget`."""
    share = pool.no_notice_share if final_fits else 1.0
    rate = pool.interruptions_per_h * share
    floor_s = max(1.0, write_s / max_overhead)
    # (s of work per hour) / (losses per hour) = s of work per loss, twice
    wanted_s = 2 * budget.loss_s_per_h / rate if rate > 0 else math.inf
    declared_s = budget.declared_interval_s
    if declared_s is not None and declared_s <= max_interval_s:
        upper_s, upper_bound = float(declared_s), "declared"
    else:
        upper_s, upper_bound = float(max_interval_s), "maximum"
    interval_s, bound = (upper_s, upper_bound) if wanted_s > upper_s else (wanted_s, "budget")
    if interval_s < floor_s:
        interval_s, bound = floor_s, "write overhead"
    loss = rate * interval_s / 2
    return IntervalDecision(
        round(interval_s, 3), rate, loss, loss <= budget.loss_s_per_h + 1e-9, bound
    )
