"""What every drain path is given and gives back."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

from agent.clock import Clock
from agent.records import Recorder
from schemas.events import DrainPath, DrainTrigger, RestartSemantics


@dataclass(frozen=True, slots=True)
class DrainRequest:
    """One drain: the instance, the contract fields from the bundle, and the notice's deadline."""

    instance_id: str
    workload_id: str
    trigger: DrainTrigger
    cause_event_id: str
    """The notice (or advisory) whose deadline this is; the drain's event ids derive from it."""
    deadline_at_us: int
    drain_budget_s: float
    checkpoint_method: str
    restart_semantics: RestartSemantics


class Deadline:
    """Time left before the notice deadline, minus the safety margin, in wall seconds.

    The deadline is in the notices' time (event time); the clock's speed converts it to the
    wall seconds that timeouts and sleeps are measured in.
    """

    def __init__(self, clock: Clock, deadline_at_us: int, margin_s: float) -> None:
        self._clock = clock
        self.deadline_at_us = deadline_at_us
        self._margin_s = margin_s

    def left_s(self) -> float:
        """Wall seconds left before the deadline less the margin (negative when past)."""
        event_left_s = (self.deadline_at_us - self._clock.now_us()) / 1e6 - self._margin_s
        return event_left_s / self._clock.speed

    def expired(self) -> bool:
        return self.left_s() <= 0

    def cap(self, seconds: float) -> float:
        """`seconds`, but no later than the deadline (never below zero)."""
        return max(0.0, min(seconds, self.left_s()))


@dataclass(slots=True)
class DrainContext:
    """Handed to a drain path: the request, its deadline, where to record, and a signal mark."""

    request: DrainRequest
    deadline: Deadline
    recorder: Recorder
    drain_started_id: str
    first_signal_mono_s: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def mark_signal(self) -> None:
        """The first drain signal went out (taint accepted, process signalled, node drained)."""
        with self._lock:
            if self.first_signal_mono_s is None:
                self.first_signal_mono_s = time.monotonic()


@dataclass(frozen=True, slots=True)
class DrainResult:
    path: DrainPath
    """The path that finished the drain (``local`` when the scheduler did not answer)."""
    verified: bool
    fell_back_to_local: bool
    detail: str = ""
    signalled_jobs: int = 0
    """Jobs or processes that received the checkpoint signal (USR1, TERM)."""


class DrainPathImpl(Protocol):
    """One way of draining a node."""

    name: DrainPath

    def drain(self, ctx: DrainContext) -> DrainResult:
        """Drain and verify; runs in a worker thread, returns before the deadline."""
        ...
