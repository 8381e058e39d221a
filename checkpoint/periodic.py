"""When to checkpoint: every interval (ADR-20), and at once on a notice.

`Checkpointer` wraps a client for a loop of steps: ``due()`` says whether a generation is owed
(the interval has passed since the last one, or the agent sent a notice, or a signal asked for a
final checkpoint); ``save`` writes it, final when a notice asked for it. The loop stops after a
final checkpoint (``stopping``): the node is going away.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from checkpoint.channel import AgentChannel
from checkpoint.client import CheckpointClient, Generation, PartSource
from schemas.checkpoints import Failed

__all__ = ["Checkpointer"]


class Checkpointer:
    def __init__(
        self,
        client: CheckpointClient,
        interval_s: float | None,
        *,
        channel: AgentChannel | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.interval_s = interval_s
        self.channel = channel
        self._monotonic = monotonic
        self._last = monotonic()
        self._final = threading.Event()
        self._cause: str | None = None
        self.stopping = False
        self.saved: list[Generation] = []

    def request_final(self, cause: str | None = None) -> None:
        """Ask for a final checkpoint at the next step boundary (a signal handler may call
        this: it only sets a flag)."""
        self._cause = cause
        self._final.set()

    @property
    def final_requested(self) -> bool:
        return self._final.is_set() or (self.channel is not None and self.channel.noticed.is_set())

    def due(self) -> bool:
        if self.final_requested:
            return True
        if self.interval_s is None:
            return False
        return self._monotonic() - self._last >= self.interval_s

    def save(self, parts: Mapping[str, PartSource], *, step: int) -> Generation:
        final = self.final_requested
        cause = self._cause
        if final and self.channel is not None and self.channel.notice is not None:
            cause = self.channel.notice.cause_event_id
        try:
            generation = self.client.save(parts, step=step, final=final, cause_event_id=cause)
        except Exception as error:
            if final and self.client.reporter is not None:
                detail = f"{type(error).__name__}: {error}"[:200]
                self.client.reporter.report(Failed(self.client.unit_id, detail, cause))
            raise
        self._last = self._monotonic()
        self.saved.append(generation)
        if final:
            self.stopping = True
        return generation
