"""Writes to the spool from its own thread, so that a slow or full disk never delays a drain.

`submit` only queues the envelope, and wakes no thread: the writer thread sleeps until the
process's one gather timer (`GatherTimer`) says `gather_s` (1 s) have passed since the first
event of a batch, so that the drain that queued it, and every other drain of a wave on the
machine, reaches its signal first; then it encodes and appends what came as one batch (one
fsync). `flush` and `close` cut that wait short. (A writer thread woken by every first event
took the interpreter from the drains and the event loops in a wave: with many agents in one
process, as in `bench/agent.py`, one such wake per notice.) A drain signal never waits for
the spool: the spool keeps the agent's record of what it did, and a crash before the write
repeats the steps with the same event ids (`agent.records`) when the metadata poll finds the
notice again.

When the disk refuses (full, read-only, gone), the error is logged and counted, the lines wait
in memory and are retried every `retry_s`; usage samples waiting longest are dropped first when
that backlog grows past `backlog_max`, everything else waits for the disk.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable

from agent.spool import DROPPABLE, LineEncoder, Spool
from schemas.events import Envelope

log = logging.getLogger(__name__)


class GatherTimer:
    """One thread per process that sets each event it is given once its time has come.

    The spool writers of every agent in the process share it: a writer registers the end of its
    gathering time with `after` (no thread is woken unless that end is the earliest waiting), and
    the timer wakes that writer then."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: list[tuple[float, int, threading.Event]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        """A forked child has none of the parent's threads: the next `after` starts one."""
        self._cond = threading.Condition()
        self._due.clear()
        self._thread = None

    def after(self, delay_s: float, event: threading.Event) -> None:
        """Set `event` `delay_s` seconds from now."""
        due = time.monotonic() + delay_s
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="spool-gather", daemon=True)
                self._thread.start()
            heapq.heappush(self._due, (due, next(self._order), event))
            if self._due[0][2] is event:  # the earliest now: the timer's wait gets shorter
                self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while True:
                if not self._due:
                    self._cond.wait()
                    continue
                left = self._due[0][0] - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                heapq.heappop(self._due)[2].set()


GATHER = GatherTimer()


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
        timer: GatherTimer = GATHER,
    ) -> None:
        self.spool = spool
        self._encoder = LineEncoder()
        self._incoming: list[Envelope] = []
        self._backlog: deque[tuple[bytes, bool]] = deque()
        self._retry_s = retry_s
        self._backlog_max = backlog_max
        self._gather_s = gather_s
        self._timer = timer
        self._on_error = on_error
        self._on_written = on_written
        self._idle = threading.Event()
        self._idle.set()
        self._now = threading.Event()
        """Set when the writer thread should write: the gathering time is up, `flush`, `close`."""
        self._gathering = False
        self._stopping = False
        self._pending = 0
        self._lock = threading.Lock()
        self.errors = 0
        self.last_error: OSError | None = None
        self.written = 0
        self.backlog_dropped = 0
        self._thread = threading.Thread(target=self._run, name="spool-writer", daemon=True)
        self._thread.start()

    def submit(self, envelope: Envelope) -> None:
        """Queue one event; never blocks, never raises for a disk problem, wakes no thread."""
        with self._lock:
            self._pending += 1
            if self._idle.is_set():  # set and cleared only under the lock
                self._idle.clear()
            self._incoming.append(envelope)
            first, self._gathering = not self._gathering, True
        if first:
            if self._gather_s > 0:
                self._timer.after(self._gather_s, self._now)
            else:
                self._now.set()

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
        self._stopping = True
        self._now.set()
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self.spool.close()

    def _run(self) -> None:
        while True:
            # Asleep until the gathering time is up (or flush, close); while lines wait for a
            # disk that refused them, retried every `retry_s`.
            self._now.wait(self._retry_s if self._backlog else None)
            self._now.clear()
            stopping = self._stopping
            with self._lock:
                batch, self._incoming = self._incoming, []
                self._gathering = False
            for entry in batch:
                try:
                    line = self._encoder.line(entry)
                except Exception:  # an event that cannot be encoded must not stop the spool
                    log.exception("cannot encode %s %s", entry.event_type, entry.event_id)
                    continue
                self._backlog.append((line, entry.event_type in DROPPABLE))
            self._trim_backlog()
            self._write()
            with self._lock:
                self._pending -= len(batch)
                if self._pending == 0 and not self._backlog:
                    self._idle.set()
            if stopping:
                return

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
