"""Time as the agent sees it: the notice's deadline is compared with this clock, never a constant.

`WallClock` in production; `ScaledClock` runs event time faster than the wall (the accelerated
12-hour run without a control plane, fed by `spotcap notices serve --speed`).
"""

from __future__ import annotations

import json
import time
from typing import Protocol


class Clock(Protocol):
    def now_us(self) -> int:
        """Microseconds since the epoch, UTC, in the time notices are stamped in."""
        ...

    @property
    def speed(self) -> float:
        """Event seconds per wall second (1 on a real node)."""
        ...


class WallClock:
    speed = 1.0

    def now_us(self) -> int:
        return time.time_ns() // 1_000


class ScaledClock:
    """Event time that starts at `origin_us` now and runs `speed` times faster than the wall."""

    def __init__(self, origin_us: int, speed: float) -> None:
        self._origin_us = origin_us
        self._start_s = time.monotonic()
        self.speed = speed

    def now_us(self) -> int:
        return self._origin_us + int((time.monotonic() - self._start_s) * self.speed * 1e6)

    def restart(self) -> None:
        """Event time is `origin_us` again from now (when the scaled feed starts)."""
        self._start_s = time.monotonic()


class AnchoredClock:
    """Event time of a region whose clock runs `speed` times faster than the machine's
    real-time clock from an anchor (a served cloud's, `spotcap demo --live`): the same sim time
    every process of the machine computes, so notices' deadlines compare as the cloud's."""

    def __init__(self, sim_start_us: int, wall_start_us: int, speed: float) -> None:
        self._sim_start_us = sim_start_us
        self._wall_start_us = wall_start_us
        self.speed = speed

    @classmethod
    def from_file(cls, path: str) -> AnchoredClock:
        """From a JSON file with ``sim_start_us``, ``wall_start_us`` and ``speed``."""
        with open(path, encoding="utf-8") as handle:
            anchor = json.load(handle)
        return cls(int(anchor["sim_start_us"]), int(anchor["wall_start_us"]),
                   float(anchor["speed"]))  # fmt: skip

    def now_us(self) -> int:
        elapsed_us = max(0, time.time_ns() // 1_000 - self._wall_start_us)
        return self._sim_start_us + int(elapsed_us * self.speed)
