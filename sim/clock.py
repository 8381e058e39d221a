"""Sim time and the event heap: the simulation never reads the wall clock.

Time is integer microseconds since the Unix epoch, starting at `EPOCH_US` (Monday
2026-11-02T00:00Z) unless configured otherwise. Actions scheduled for the same microsecond run
in the order they were scheduled, so a run is a pure function of its seed; an action scheduled
with `late=True` runs after every ordinary action of its microsecond (a deadline that an
action due at the same instant still meets), and one with `last=True` after every ordinary and
late action of its microsecond, even those scheduled after it (the orchestrator settling an
instant once everything that happens in it is known).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

EPOCH_US = 1_793_577_600_000_000  # 2026-11-02T00:00:00Z, a Monday
SECOND_US = 1_000_000
MINUTE_US = 60 * SECOND_US
HOUR_US = 60 * MINUTE_US
DAY_US = 24 * HOUR_US

Action = Callable[[], None]
# Late actions sort after every ordinary one of their microsecond: their sequence numbers start
# here (a run schedules far fewer than 2**62 actions), which keeps heap entries 3-tuples.
_LATE_SEQ = 1 << 62
_LAST_SEQ = 1 << 63  # after every late action too (a run schedules far fewer than 2**62)


class Scheduler:
    """A heap of timed actions and the current sim time.

    `on_step`, when set, runs after each action (the orchestrator's host acts there on what
    the action published, before the next action runs).
    """

    def __init__(self, start_us: int) -> None:
        self.now_us = start_us
        self._heap: list[tuple[int, int, Action]] = []
        self._seq = 0
        self.on_step: Action | None = None

    def at(self, when_us: int, action: Action, *, late: bool = False, last: bool = False) -> None:
        """Run `action` at `when_us` (never earlier than now)."""
        self._seq += 1
        seq = self._seq + (_LAST_SEQ if last else _LATE_SEQ if late else 0)
        heapq.heappush(self._heap, (max(when_us, self.now_us), seq, action))

    def after(self, delay_us: int, action: Action) -> None:
        self.at(self.now_us + delay_us, action)

    def every(self, first_us: int, period_us: int, action: Action) -> None:
        """Run `action` at `first_us` and every `period_us` after it."""

        def tick() -> None:
            action()
            self.after(period_us, tick)

        self.at(first_us, tick)

    def run_until(self, until_us: int) -> None:
        """Run every action due before `until_us`; time then stands at `until_us`."""
        heap, pop = self._heap, heapq.heappop
        on_step = self.on_step
        while heap and heap[0][0] < until_us:
            when_us, _, action = pop(heap)
            self.now_us = when_us
            action()
            if on_step is not None:
                on_step()
        self.now_us = max(self.now_us, until_us)

    @property
    def pending(self) -> int:
        return len(self._heap)

    @property
    def next_due_us(self) -> int | None:
        """When the next scheduled action is due (None: nothing is scheduled)."""
        return self._heap[0][0] if self._heap else None
