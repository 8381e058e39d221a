"""Dead letters with a cap on their ratio: a processor that would dead-letter most of its input
(a broken producer, a bad release) stops with a named error instead of emptying its topic into
the dead-letter topic."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from streams.deadletter import DeadLetters
from streams.log import Record


class DeadLetterRatioExceeded(RuntimeError):  # noqa: N818 (the name says what happened)
    """More of the recent input failed than the policy allows; the input that crossed the
    line was not dead-lettered and its position not committed."""


@dataclass(frozen=True, slots=True)
class DeadLetterPolicy:
    """At most `max_ratio` of the last `window` inputs may be dead-lettered. Until
    `min_inputs` have been seen the ratio is taken over `min_inputs`, so a processor whose
    first inputs all fail stops after ``max_ratio * min_inputs`` dead letters, not later."""

    max_ratio: float = 0.05
    window: int = 10_000
    min_inputs: int = 200

    def __post_init__(self) -> None:
        if not 0 <= self.max_ratio <= 1:
            raise ValueError(f"max_ratio {self.max_ratio} is not between 0 and 1")
        if self.window < 1 or self.min_inputs < 1:
            raise ValueError("window and min_inputs must be at least 1")


class DeadLetterGuard:
    """Counts inputs and dead letters over a sliding window; sends dead letters while the
    ratio stays under the policy's cap.

    For each input: `check` (may raise) before the input is handed on, `send` once the chain
    has taken it, `seen` when the chain's first step is done with it.
    """

    def __init__(self, dead_letters: DeadLetters, policy: DeadLetterPolicy) -> None:
        self.dead_letters = dead_letters
        self.policy = policy
        self._recent: deque[bool] = deque()  # per input of the window: dead-lettered?
        self._dead = 0  # dead letters in the window
        self._current_dead = False
        self.inputs = 0

    def check(self, record: Record, error: Exception) -> None:
        """Raise `DeadLetterRatioExceeded` if dead-lettering `record` would pass the cap."""
        dead = self._dead + 1
        inputs = max(len(self._recent) + 1, self.policy.min_inputs)
        if dead / inputs > self.policy.max_ratio:
            raise DeadLetterRatioExceeded(
                f"{dead:,} of the last {len(self._recent) + 1:,} inputs failed (the cap is "
                f"{self.policy.max_ratio:.1%} of at least {self.policy.min_inputs:,}); stopped "
                f"at {record.origin}: {error}. Fix the cause (the dead-letter topic "
                f"{self.dead_letters.topic} holds the others) and restart: processing resumes "
                "at this input"
            ) from error

    def send(self, record: Record, error: Exception) -> None:
        """Queue the dead letter for the current input (delivered by `flush`)."""
        self.dead_letters.send(record, error)
        self._dead += 1
        self._current_dead = True

    def seen(self) -> None:
        """The current input has been taken by the chain."""
        self.inputs += 1
        self._recent.append(self._current_dead)
        self._current_dead = False
        if len(self._recent) > self.policy.window and self._recent.popleft():
            self._dead -= 1

    def flush(self, timeout_s: float) -> None:
        """Deliver the queued dead letters (before any position past them is committed)."""
        self.dead_letters.flush(timeout_s)
