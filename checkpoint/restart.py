"""Restart semantics, effects on completion, and quarantine (ADR-21).

A unit declares what happens when it starts again after a loss, as its contract does:

* ``resume``: from the newest complete generation;
* ``requeue``: the unit runs again from its start (an idempotent unit: a CI job, a file
  converted again), its checkpoints ignored;
* ``restart``: the same from the unit's point of view: nothing is carried over.

Effects (outputs others can see) are published only when the unit completes: `Attempt.complete`
runs the publishing function once, then marks the unit completed, so a unit started again after
completing publishes nothing twice and does no work (`Attempt.completed`).

A unit that fails `max_failures` times after restores is quarantined: a failure is an attempt
that raised (recorded by the context manager) or that vanished (started and never ended: killed
without a notice, or crashed hard). The quarantine is written in the bucket, so every later
start refuses at once with `UnitQuarantinedError`, and it is reported to the node's agent: the
platform stops paying for a unit that never finishes. An attempt that ends after a final
checkpoint (a notice) is an interruption, not a failure.

State: ``units/<unit>/state.json`` in the workload's bucket (the unit's own; one writer).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Literal

from checkpoint.client import CheckpointClient, Restored
from schemas.checkpoints import Quarantined

__all__ = ["Attempt", "RestartSemantics", "UnitQuarantinedError", "UnitRunner", "UnitState"]

log = logging.getLogger(__name__)

RestartSemantics = Literal["resume", "requeue", "restart"]


class UnitQuarantinedError(Exception):
    """The unit is quarantined and must not run again; says why."""


@dataclass(frozen=True, slots=True)
class UnitState:
    attempts: int = 0
    failures: int = 0
    running: bool = False
    """An attempt started and has not ended (if the next start finds this, it vanished)."""
    resumed: bool = False
    """The running attempt began from a restored generation."""
    completed: bool = False
    quarantined: bool = False
    detail: str = ""


class UnitRunner:
    """Starts attempts of one unit under its restart semantics."""

    def __init__(
        self,
        client: CheckpointClient,
        semantics: RestartSemantics,
        *,
        max_failures: int = 3,
    ) -> None:
        if max_failures < 1:
            raise ValueError("max_failures is at least 1")
        self.client = client
        self.semantics = semantics
        self.max_failures = max_failures
        self._key = f"units/{client.unit_id}/state.json"

    def state(self) -> UnitState:
        raw = self.client.bucket.get_bytes(self._key)
        return UnitState(**json.loads(raw)) if raw else UnitState()

    def _write(self, state: UnitState) -> None:
        self.client.bucket.put_bytes(self._key, json.dumps(asdict(state)).encode())

    def start(self, into: Path | None = None) -> Attempt:
        """A new attempt: restored from the newest generation under ``resume`` (None when there
        is none yet). Raises `UnitQuarantinedError` for a quarantined unit."""
        state = self.state()
        if state.quarantined:
            raise UnitQuarantinedError(f"unit {self.client.unit_id}: {state.detail}")
        if state.completed:
            return Attempt(self, state, None, completed=True)
        if state.running and state.resumed:
            state = replace(state, failures=state.failures + 1)
            log.warning(
                "unit %s: attempt %d vanished after a restore (failure %d of %d)",
                self.client.unit_id,
                state.attempts,
                state.failures,
                self.max_failures,
            )
        if state.failures >= self.max_failures:
            self._quarantine(state, f"failed {state.failures} times after restores")
        restored: Restored | None = None
        if self.semantics == "resume":
            restored = self.client.restore(into)
        state = replace(
            state, attempts=state.attempts + 1, running=True, resumed=restored is not None
        )
        self._write(state)
        return Attempt(self, state, restored)

    def _quarantine(self, state: UnitState, detail: str) -> None:
        self._write(replace(state, running=False, quarantined=True, detail=detail))
        reporter = self.client.reporter
        if reporter is not None:
            reporter.report(Quarantined(self.client.unit_id, state.failures, detail))
        raise UnitQuarantinedError(f"unit {self.client.unit_id}: {detail}")

    def _end(self, *, failed: str | None = None, completed: bool = False) -> None:
        state = replace(self.state(), running=False)
        if completed:
            state = replace(state, completed=True)
        elif failed is not None and state.resumed:
            state = replace(state, failures=state.failures + 1, detail=failed)
            if state.failures >= self.max_failures:
                self._quarantine(state, f"failed {state.failures} times after restores: {failed}")
        self._write(replace(state, resumed=False))


class Attempt:
    """One run of the unit; a context manager that records how it ended."""

    def __init__(
        self,
        runner: UnitRunner,
        state: UnitState,
        restored: Restored | None,
        *,
        completed: bool = False,
    ) -> None:
        self._runner = runner
        self.state = state
        self.restored = restored
        self.completed = completed
        """The unit completed in an earlier attempt: do nothing, publish nothing."""
        self._ended = completed

    @property
    def number(self) -> int:
        return self.state.attempts

    def complete(self, publish: Callable[[], None] | None = None) -> None:
        """The unit's work is done: publish its effects (once), then mark it completed."""
        if self.completed:
            return
        if publish is not None:
            publish()
        self._runner._end(completed=True)
        self.completed = self._ended = True

    def __enter__(self) -> Attempt:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._ended:
            return
        self._ended = True
        if error is not None and not isinstance(error, KeyboardInterrupt | SystemExit):
            self._runner._end(failed=f"{type(error).__name__}: {error}"[:200])
        else:
            self._runner._end()  # interrupted (a notice, a stop): not a failure
