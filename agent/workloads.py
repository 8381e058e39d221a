"""The agent's end of the checkpoint channel: the workloads on this node, told of a notice and
waited for (ADR-18, ADR-20; the wire model is `schemas.checkpoints`).

The agent listens on a Unix socket (``[checkpoint] socket``); each checkpoint client on the node
connects, says hello, and is welcomed with the bundle's checkpoint fields. Every generation a
client publishes arrives as ``written`` and is recorded as ``checkpoint_written`` with the
client's own figures (bytes, seconds, generation), so the ledger prices what was really
written. On a notice the drainer calls `final_checkpoint` before it drains: every connected
unit is sent the notice, and the agent waits, within the contract's drain budget and the
notice's deadline, for each to answer ``written`` (final) or ``failed``; the outcome says
whether the final checkpoint was made (drain verification). A unit that is quarantined
(``quarantined``) is logged as an error: the unit will not run again.

Connections are served by one thread each (a node runs a handful of units); nothing here blocks
intake or the drain thread for longer than the bounded wait.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agent.checkpoint import CheckpointReport
from agent.drain.base import Deadline, DrainRequest
from agent.records import Recorder
from contracts.bundles import Bundle
from schemas.checkpoints import (
    ChannelFormatError,
    Failed,
    Hello,
    NoticeToWorkload,
    Quarantined,
    Welcome,
    Written,
    decode,
    encode,
)
from schemas.events import CheckpointWritten

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Unit:
    hello: Hello
    sock: socket.socket
    answers: dict[str, Written | Failed] = field(default_factory=dict)
    """The answer to each notice (by its cause event id)."""


class WorkloadChannel:
    def __init__(
        self,
        path: Path,
        recorder: Recorder,
        instance_id: str,
        bundle: Callable[[], Bundle | None],
    ) -> None:
        self.path = path
        self._recorder = recorder
        self._instance_id = instance_id
        self._bundle = bundle
        self._units: dict[int, _Unit] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._server: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self.written: list[Written] = []

    def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # a socket left by an agent that died
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(self.path))
        os.chmod(self.path, 0o660)
        server.listen(16)
        self._server = server
        self._thread = threading.Thread(target=self._accept, name="checkpoint-channel", daemon=True)
        self._thread.start()
        log.info("checkpoint channel on %s", self.path)

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_RDWR)
            server.close()
        with self._lock:
            units = list(self._units.values())
            self._units.clear()
        for unit in units:
            with contextlib.suppress(OSError):
                unit.sock.shutdown(socket.SHUT_RDWR)
            unit.sock.close()
        if self._thread is not None:
            self._thread.join(2.0)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def connected(self) -> list[Hello]:
        with self._lock:
            return [u.hello for u in self._units.values()]

    # -- serving ----------------------------------------------------------------------------

    def _accept(self) -> None:
        while self._server is not None:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        reader = conn.makefile("rb")
        unit: _Unit | None = None
        try:
            first = decode(reader.readline())
            if not isinstance(first, Hello):
                raise ChannelFormatError(f"expected hello, got {first.TYPE}")
            bundle = self._bundle()
            welcome = Welcome(
                self._instance_id,
                bundle.workload_id if bundle else None,
                bundle.checkpoint_method if bundle else None,
                bundle.drain_budget_s if bundle else None,
                bundle.restart_semantics if bundle else None,
            )
            # Welcomed and known in one step: a notice that comes as soon as the unit has its
            # welcome finds it (the drain waits for its final checkpoint), and never reaches it
            # before the welcome.
            with self._lock:
                conn.sendall(encode(welcome))
                unit = _Unit(first, conn)
                self._units[conn.fileno()] = unit
            log.info(
                "unit %s of %s checkpoints through the agent", first.unit_id, first.workload_id
            )
            for line in iter(reader.readline, b""):
                self._handle(unit, decode(line))
        except (OSError, ValueError) as error:  # ChannelFormatError is a ValueError
            log.warning("checkpoint channel: %s", error)
        finally:
            with self._lock:
                if unit is not None:
                    self._units.pop(conn.fileno(), None)
                self._changed.notify_all()
            conn.close()

    def _handle(self, unit: _Unit, message: object) -> None:
        if isinstance(message, Written):
            self._record(unit, message)
            if message.final and message.cause_event_id:
                self._answer(unit, message.cause_event_id, message)
        elif isinstance(message, Failed):
            log.error("unit %s: final checkpoint failed: %s", message.unit_id, message.detail)
            if message.cause_event_id:
                self._answer(unit, message.cause_event_id, message)
        elif isinstance(message, Quarantined):
            log.error(
                "unit %s of %s quarantined after %d failures after restores: %s",
                message.unit_id,
                unit.hello.workload_id,
                message.failed_restores,
                message.detail,
            )
        else:
            log.warning("checkpoint channel: unexpected %s from a unit", type(message).__name__)

    def _answer(self, unit: _Unit, cause: str, message: Written | Failed) -> None:
        with self._lock:
            unit.answers[cause] = message
            self._changed.notify_all()

    def _record(self, unit: _Unit, written: Written) -> None:
        cause = written.cause_event_id or f"{self._instance_id}/{unit.hello.workload_id}"
        self._recorder.record(
            CheckpointWritten(
                instance_id=self._instance_id,
                workload_id=unit.hello.workload_id,
                generation=written.generation,
                written_bytes=written.written_bytes,
                duration_s=round(written.duration_s, 6),
                final=written.final,
            ),
            cause=cause,
            discriminator=f"{written.unit_id}/{written.generation}",
            causation_id=written.cause_event_id,
        )
        with self._lock:
            self.written.append(written)

    # -- a notice ---------------------------------------------------------------------------

    def final_checkpoint(
        self, request: DrainRequest, deadline: Deadline, timeout_s: float
    ) -> CheckpointReport | None:
        """Tell every connected unit of the notice and wait for their final checkpoints;
        None when no unit is connected."""
        with self._lock:
            units = list(self._units.values())
        if not units:
            return None
        started = time.monotonic()
        wait_s = deadline.cap(min(timeout_s, request.drain_budget_s))
        notice = NoticeToWorkload(request.cause_event_id, request.deadline_at_us, round(wait_s, 3))
        told = []
        for unit in units:
            try:
                unit.sock.sendall(encode(notice))
                told.append(unit)
            except OSError as error:
                log.warning("unit %s not told of the notice: %s", unit.hello.unit_id, error)
        cause = request.cause_event_id
        end = started + wait_s
        with self._lock:
            while any(cause not in u.answers for u in told if u.sock.fileno() != -1):
                left = end - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            answers = [u.answers.get(cause) for u in told]
        duration_s = time.monotonic() - started
        written = [a for a in answers if isinstance(a, Written)]
        failed = [a for a in answers if isinstance(a, Failed)]
        if len(written) == len(units):
            total = sum(w.written_bytes for w in written)
            detail = ", ".join(f"{w.unit_id} generation {w.generation}" for w in written)
            return CheckpointReport("written", duration_s, f"{detail}; {total} bytes")
        if failed:
            why = "; ".join(f"{f.unit_id}: {f.detail}" for f in failed)[:200]
            return CheckpointReport("failed", duration_s, why)
        missing = [u.hello.unit_id for u, a in zip(told, answers, strict=True) if a is None]
        return CheckpointReport(
            "timed_out",
            duration_s,
            f"{len(written)} of {len(units)} units wrote within {wait_s:.1f} s; "
            f"not: {', '.join(missing[:5])}",
        )
