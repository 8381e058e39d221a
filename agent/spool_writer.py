"""Writes to the spool from its own thread, so that a slow or full disk never delays a drain.

`submit` only queues the envelope; the thread waits `gather_s` (1 s) after the first event so
that the drain that queued it, and every other drain of a wave on the machine, reaches its
signal first, then encodes and appends what came as one batch (one fsync). `flush` and `close`
cut that wait short. A drain signal never waits for the spool: the spool keeps the agent's
record of what it did, and a crash before the write repeats the steps with the same event ids
(`agent.records`) when the metadata poll finds the notice again.

When the disk refuses (full, read-only, gone), the error is logged and counted, the lines wait
in memory and are retried every `retry_s`; usage samples waiting longest are dropped first when
that backlog grows past `backlog_max`, everything else waits for the disk.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable

from agent.spool import DROPPABLE, LineEncoder, Spool
from schemas.events import Envelope

log = logging.getLogger(__name__)

_STOP = object()


class SpoolWriter:
    def __init__(
        self,
        spool: Spool,
        *,
        retry_s: float = 1.0,
        backlog_max: int = 10_000,
        gather_s: float = 1.0,
        on_error: Callable[[OSError], None] | None = None,
        on_written: Callable[[Spool, int], None] | None = None,
    ) -> None:
        self.spool = spool
        self._encoder = LineEncoder()
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._backlog: deque[tuple[bytes, bool]] = deque()
        self._retry_s = retry_s
        self._backlog_max = backlog_max
        self._gather_s = gather_s
        self._on_error = on_error
        self._on_written = on_written
        self._idle = threading.Event()
        self._idle.set()
        self._now = threading.Event()
        """Set by `flush` and `close`: write what waits without gathering more."""
        self._pending = 0
        self._lock = threading.Lock()
        self.errors = 0
        self.last_error: OSError | None = None
        self.written = 0
        self.backlog_dropped = 0
        self._thread = threading.Thread(target=self._run, name="spool-writer", daemon=True)
        self._thread.start()

    def submit(self, envelope: Envelope) -> None:
        """Queue one event; never blocks, never raises for a disk problem."""
        with self._lock:
            self._pending += 1
            self._idle.clear()
        self._queue.put(envelope)

    def flush(self, timeout_s: float) -> bool:
        """True once everything submitted is on disk; False if not within `timeout_s`."""
        if self._idle.is_set():
            return True
        self._now.set()
        return self._idle.wait(timeout_s)

    @property
    def backlog(self) -> int:
        return len(self._backlog)

    def close(self, timeout_s: float = 5.0) -> None:
        """Write what can be written within `timeout_s`, then stop and close the spool."""
        self._queue.put(_STOP)
        self._now.set()
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self.spool.close()

    def _run(self) -> None:
        stopping = False
        while not stopping:
            timeout = self._retry_s if self._backlog else None
            try:
                item = self._queue.get(timeout=timeout)
            except queue.Empty:
                item = None
            if item is not None and item is not _STOP and self._gather_s:
                # Let the drains that queued this (and the wave around them) reach their
                # signals first, and take what they queue next in the same batch: one fsync.
                self._now.wait(self._gather_s)
            self._now.clear()
            batch = [item] if item is not None else []
            while True:  # take whatever else is queued: one fsync for all of it
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            taken = 0
            for entry in batch:
                if entry is _STOP:
                    stopping = True
                    continue
                assert isinstance(entry, Envelope)
                taken += 1
                try:
                    line = self._encoder.line(entry)
                except Exception:  # an event that cannot be encoded must not stop the spool
                    log.exception("cannot encode %s %s", entry.event_type, entry.event_id)
                    continue
                self._backlog.append((line, entry.event_type in DROPPABLE))
            self._trim_backlog()
            self._write()
            with self._lock:
                self._pending -= taken
                if self._pending == 0 and not self._backlog:
                    self._idle.set()

    def _trim_backlog(self) -> None:
        while len(self._backlog) > self._backlog_max:
            for i, (_, droppable) in enumerate(self._backlog):
                if droppable:
                    del self._backlog[i]
                    self.backlog_dropped += 1
                    break
            else:
                return

    def _write(self) -> None:
        if not self._backlog:
            return
        lines = list(self._backlog)
        try:
            self.spool.append(lines)
        except OSError as error:
            self.errors += 1
            self.last_error = error
            if self.errors == 1 or self.errors % 100 == 0:
                log.error(
                    "spool write failed (%s); %d lines wait in memory, the drain goes on",
                    error,
                    len(lines),
                )
            if self._on_error is not None:
                self._on_error(error)
            time.sleep(0)  # let the drain threads run; the retry waits on the queue
            return
        self._backlog.clear()
        self.written += len(lines)
        if self._on_written is not None:
            self._on_written(self.spool, len(lines))
