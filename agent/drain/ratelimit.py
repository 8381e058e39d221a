"""A token bucket shared by one node's eviction workers (its own client-side limit, ADR-14)."""

from __future__ import annotations

import threading
import time


class TokenBucket:
    """`rate_per_s` tokens a second, at most `burst` saved up; thread-safe."""

    def __init__(self, rate_per_s: float, burst: int) -> None:
        self._rate = rate_per_s
        self._burst = max(1, burst)
        self._tokens = float(self._burst)
        self._stamp = time.monotonic()
        self._lock = threading.Lock()

    def acquire(self, timeout_s: float) -> bool:
        """Take one token, waiting at most `timeout_s`; False if none came in time."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                now = time.monotonic()
                self._tokens = min(self._burst, self._tokens + (now - self._stamp) * self._rate)
                self._stamp = now
                if self._tokens >= 1:
                    self._tokens -= 1
                    return True
                wait_s = (1 - self._tokens) / self._rate
            if now + wait_s > deadline:
                return False
            time.sleep(wait_s)
