"""The served region's clock: sim time that runs at a declared speed-up of wall time.

    sim_us = sim_start_us + (wall_us - wall_start_us) * speed      (never past end_us)

This is the one place of the served cloud that reads the wall clock. Event time stays the
simulator's: every event is stamped with sim time, and what the region does on its own (rate
cards, waves, background reclaims) happens at the same sim times whatever the wall clock did;
only *when* an API call lands in sim time depends on the wall clock.

The anchor (`ClockAnchor`) is printed with the cloud's access, so a client on the same machine
computes the same sim time without asking (`SpeedClock.from_anchor`): the OpenStack adapter's
``clock`` then stamps its own events (launched, deleted) in the region's time. The wall source
is ``time.time_ns`` (CLOCK_REALTIME), the clock every process of the machine shares.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any


def wall_us() -> int:
    """Microseconds since the epoch, from the machine's real-time clock."""
    return time.time_ns() // 1_000


@dataclass(frozen=True, slots=True)
class ClockAnchor:
    """Where sim time and wall time meet, and how fast sim time runs."""

    sim_start_us: int
    wall_start_us: int
    speed: float
    """Sim seconds per wall second."""
    end_us: int
    """Sim time stands here: the end of the served days."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClockAnchor:
        return cls(
            sim_start_us=int(data["sim_start_us"]),
            wall_start_us=int(data["wall_start_us"]),
            speed=float(data["speed"]),
            end_us=int(data["end_us"]),
        )


class SpeedClock:
    """Sim time at `speed` sim seconds per wall second from `anchor`."""

    def __init__(self, anchor: ClockAnchor, wall: Callable[[], int] = wall_us) -> None:
        if not anchor.speed > 0:
            raise ValueError(f"speed {anchor.speed!r}: sim seconds per wall second, above 0")
        self.anchor = anchor
        self._wall = wall

    @classmethod
    def starting_now(
        cls, sim_start_us: int, speed: float, end_us: int, wall: Callable[[], int] = wall_us
    ) -> SpeedClock:
        return cls(ClockAnchor(sim_start_us, wall(), speed, end_us), wall)

    @classmethod
    def from_anchor(cls, data: Mapping[str, Any]) -> SpeedClock:
        """The clock of a served cloud, from the ``clock`` object of its access JSON."""
        return cls(ClockAnchor.from_dict(data))

    def now_us(self) -> int:
        a = self.anchor
        elapsed_us = max(0, self._wall() - a.wall_start_us)
        return min(a.end_us, a.sim_start_us + int(elapsed_us * a.speed))

    def wall_s_until(self, sim_us: int) -> float:
        """Wall seconds from now until sim time reaches `sim_us` (0 if it has)."""
        return max(0.0, (sim_us - self.now_us()) / 1e6 / self.anchor.speed)

    @property
    def ended(self) -> bool:
        return self.now_us() >= self.anchor.end_us
