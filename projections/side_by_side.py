"""Both projections caught up side by side: the fleet state in a process of its own, the ledger
in this one, each reading and decoding the history for itself.

One process that reads the history once for both is bound by its Python, one thread at a time:
decoding an event and preparing it for both writers took about 50 µs of one core, so a 30-day
rebuild (4.6 M events of history) took 333-339 s while the second core mostly waited
(docs/performance.md, "Bulk paths"). Here each process decodes the history itself (about 16 µs
an event more in all) and the two run on both cores: the ledger's Python (decoding and pricing)
sets the pace, and the fleet state's, with PostgreSQL's backend, runs beside it.

What a rebuild or catch-up leaves is the same as reading once for both: each projection stores
its offsets with its rows (a kill of either process leaves a projection that the next run
completes from them), and the ledger's reading dead-letters an undecodable record once, for both
projections (``projection/fleet+ledger``), as one reading did; the fleet state's reading skips
it (both read the same records: they start from the same offsets). The child ends with this
process (`streams.children.die_with_parent`); an error in it is raised here.

Who calls it: `projections.catchup.run_projections`, for both projections starting from the
same offsets, given an opener of the log (the command line's `spotcap rebuild` and `project`).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from projections.catchup import (
    RunReport,
    ShowProgress,
    Writer,
    catch_up_together,
    open_writer,
)
from projections.stores import Stores
from schemas.codec import Codec
from streams.children import die_with_parent, name_process
from streams.log import EventLog
from streams.merged import Progress

Opener = Callable[[], tuple[EventLog, Codec]]
"""Opens the log and makes the codec in the child: picklable (a module-level function or a
`functools.partial` of one), since the child is spawned."""
CHILD_NAME = "spotcap-fleet"
_LAST_WORD_S = 10.0  # a child seen dead: how long its last message may take to arrive
_PROGRESS_EVERY_S = 1.0
_STOP_S = 30.0  # a child told to stop (an error here): how long it has before it is killed


class FleetProcessError(RuntimeError):
    """The fleet state's process failed with an error that could not be carried here as
    itself; the message holds its traceback."""


def catch_up_side_by_side(
    log: EventLog,
    codec: Codec,
    region: str,
    stores: Stores,
    writers: Sequence[Writer],
    *,
    opener: Opener,
    show: ShowProgress,
) -> list[RunReport]:
    """Catch up `writers` (the fleet state and the ledger, from the same stored offsets): the
    fleet state in a spawned child that opens the log with `opener`, the ledger here; the
    reports in the writers' order, the progress of both summed to `show`."""
    fleet = [w for w in writers if w.which == "fleet"]
    here = [w for w in writers if w.which != "fleet"]
    assert len(fleet) == 1 and here, "side by side: the fleet state and the ledger"
    for writer in writers:  # a log that is not the projections' is refused before any start
        writer.check_log(log, region)
    which = [w.which for w in writers]
    # The child connects to the server this process found (not starting the embedded one).
    child = _Child(opener, region, replace(stores, postgres_dsn=stores.fleet_dsn()))
    try:
        with show(which) as on_progress:

            def progress(p: Progress) -> None:
                child.poll()
                on_progress(child.with_progress(p))

            ours = catch_up_together(
                log, codec, region, here, on_progress=progress, letters_for=which
            )
            theirs = child.result(lambda: on_progress(child.with_progress()))
    finally:
        child.stop()
    by_name = {r.projection: r for r in [theirs, *ours]}
    return [by_name[w.which] for w in writers]


class _Child:
    """The fleet state's process, and what it has said: its progress, its report."""

    def __init__(self, opener: Opener, region: str, stores: Stores) -> None:
        spawn = multiprocessing.get_context("spawn")
        self._conn, child_end = spawn.Pipe(duplex=False)
        self._process = spawn.Process(
            target=_fleet,
            args=(os.getpid(), child_end, opener, region, stores),
            name=CHILD_NAME,
            daemon=True,
        )
        self._process.start()
        child_end.close()
        self._progress: Progress | None = None
        self._ours: Progress | None = None
        self._report: RunReport | None = None

    def poll(self, timeout_s: float = 0.0) -> None:
        """Read what the child has said (waiting up to `timeout_s` for a first message);
        raise its error if it failed."""
        while self._report is None and self._conn.poll(timeout_s):
            timeout_s = 0.0
            try:
                kind, body = self._conn.recv()
            except (EOFError, OSError):
                return
            if kind == "progress":
                self._progress = body
            elif kind == "done":
                self._report = body
            else:
                raise _error(body)

    def with_progress(self, ours: Progress | None = None) -> Progress:
        """Our reading's progress (the last given, when None) and the child's, summed."""
        self._ours = ours or self._ours
        parts = [p for p in (self._ours, self._progress) if p is not None]
        totals = [p.records_total for p in parts]
        return Progress(
            sum(p.records_read for p in parts),
            None if None in totals else sum(t or 0 for t in totals),
            sum(p.events_read for p in parts),
            sum(p.undecodable for p in parts),
        )

    def result(self, on_progress: Callable[[], None]) -> RunReport:
        """Wait for the child's report (as long as it lives and a little after)."""
        dead_since: float | None = None
        while self._report is None:
            self.poll(1.0)
            on_progress()
            if self._report is not None or self._process.is_alive():
                continue
            dead_since = dead_since or time.monotonic()
            if time.monotonic() - dead_since > _LAST_WORD_S:
                raise FleetProcessError(
                    f"the process rebuilding the fleet state (pid {self._process.pid}) ended "
                    f"with exit code {self._process.exitcode} and no result (killed, out of "
                    "memory?); run the command again"
                )
        return self._report

    def stop(self) -> None:
        """End the child if it still runs (an error here: its offsets are stored with its
        rows, so the next run goes on from them)."""
        if self._process.is_alive():
            self._process.terminate()
        self._process.join(_STOP_S)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._conn.close()


def _error(body: tuple[bytes | None, str]) -> BaseException:
    """The child's error as itself if it could be carried, else with its traceback."""
    pickled, text = body
    if pickled is not None:
        error: BaseException = pickle.loads(pickled)
        return error
    return FleetProcessError(f"the fleet state's process failed: {text}")


def _fleet(parent_pid: int, conn: Any, opener: Opener, region: str, stores: Stores) -> None:
    """In the child: the fleet state brought up to the log's end; its progress, then its
    report or its error, sent to the parent."""
    die_with_parent(parent_pid)
    name_process(CHILD_NAME)
    try:
        log, codec = opener()
        sent = [0.0]

        def progress(p: Progress) -> None:  # at most a message a second: the pipe stays short
            if time.monotonic() - sent[0] >= _PROGRESS_EVERY_S:
                conn.send(("progress", p))
                sent[0] = time.monotonic()

        try:
            writer = open_writer(stores, "fleet")
            (report,) = catch_up_together(
                log, codec, region, [writer], on_progress=progress, letters_for=()
            )
        finally:
            log.close()
        conn.send(("done", report))
    except Exception as error:
        text = "".join(traceback.format_exception(error))
        pickled: bytes | None = None
        try:
            pickled = pickle.dumps(error)
            pickle.loads(pickled)  # an error whose class cannot be rebuilt goes as text
        except Exception:
            pickled = None
        conn.send(("failed", (pickled, text)))
