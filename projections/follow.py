"""The projections as long-lived followers of the log: what `spotcap run projections` runs.

- **The fleet state** follows with the live processor (`catchup.fleet_processor`): the consumer
  group ``<region>.projection.fleet``, each partition sought on assignment to the offset stored
  with the rows (the group's own commits are only a fallback), batches written with their
  offsets in one transaction. On Kafka several followers share the partitions (the rows do not
  depend on order); a database that is down pauses the processor instead of failing it.
- **The ledger** follows in rounds: every `interval_s`, a catch-up (`catchup.catch_up`: the
  merged history, in event-time order, from the stored offsets to the end offsets of now), on a
  thread of its own so that a long round never keeps the fleet's consumer from polling. A
  consumer group cannot give it the event-time order across topics that pricing needs (a usage
  interval is priced by the rate cards in force before it), so one ledger follower runs per
  region. The ledger is opened for a round and closed after it: an embedded (chdb) ledger admits
  one process at a time, and between rounds the read side can open it.
  Given an `Opener`, the rounds run in a spawned child process that is replaced every
  `ROUNDS_PER_CHILD` rounds: chdb leaks each closed session's ClickHouse threads (each holding
  three open files under /proc/self/task, and their memory) for the life of the process, so a
  follower that opened the ledger every round in its own process grew without bound (issue
  27, docs/performance.md "Soak"); a child's leak ends with the child. The child ends with
  the follower, even one killed with SIGKILL (`streams.children`): an orphan would hold the
  ledger from the follower started in its place.

Both refuse a log that is not the one they were built from (`Writer.check_log`), as the
catch-up commands do. Before the region's topics exist (a region nothing has written yet)
they wait for them.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from projections.catchup import Which, catch_up, fleet_processor, open_writer
from projections.ledger.store import LedgerError, LedgerFolderError
from projections.ledger.writer import LEDGER_TOPICS
from projections.postgres.connection import FleetDatabaseError
from projections.postgres.writer import FLEET_TOPICS, FleetWriter
from projections.stores import Stores
from schemas.codec import Codec
from streams.children import pool_initializer
from streams.log import EventLog, UnknownTopicError
from streams.topics import topic_name

log = logging.getLogger(__name__)

INTERVAL_S = 2.0
ROUNDS_PER_CHILD = 10
"""Ledger rounds per child process (with an `Opener`): chdb's leak of a closed session's
threads (3-25 open files and a few MiB a round, more for bigger rounds) is bounded by this
many rounds; a new child costs ~1-1.5 s of CPU (Python, pyarrow and chdb imported, the ledger
opened), once every 20 s or more at the default interval (docs/performance.md, "Soak")."""
Opener = Callable[[], tuple[EventLog, Codec]]
"""Opens the log and makes the codec in the ledger's child process: picklable (a module-level
function, or a `functools.partial` of one), since the child is spawned."""
JOIN_TIMEOUT_S = 120.0
"""How long a stop waits for the ledger's round in flight (a round writes a batch of at most
`catchup.BATCH_EVENTS` events at a time, each in seconds)."""


@dataclass(frozen=True, slots=True)
class FollowReport:
    fleet_events: int
    """Records the fleet state's processor took from the log."""
    ledger_events: int
    ledger_rounds: int
    """Catch-up rounds of the ledger that applied at least one event."""
    unpriced: int
    """Events the ledger could not price (dead-lettered)."""

    def describe(self) -> str:
        """What the followers did, in one line (`spotcap run projections`' last)."""
        return (
            f"fleet state: {self.fleet_events} records taken; ledger: {self.ledger_events} "
            f"events in {self.ledger_rounds} rounds, {self.unpriced} unpriced"
        )


def follow(
    event_log: EventLog,
    codec: Codec,
    region: str,
    stores: Stores,
    which: Sequence[Which],
    *,
    stop: threading.Event,
    interval_s: float = INTERVAL_S,
    ledger_opener: Opener | None = None,
    rounds_per_child: int = ROUNDS_PER_CHILD,
) -> FollowReport:
    """Keep each projection of `which` up to date with the log until `stop` is set; then
    write and commit what the fleet's processor holds, finish the ledger's round, and return.
    With `ledger_opener`, the ledger's rounds run in a child process (replaced every
    `rounds_per_child` rounds) that opens the log with it; else in this process."""
    if not _wait_for_topics(event_log, region, which, stop, interval_s):
        return FollowReport(0, 0, 0, 0)
    ledger = _LedgerRounds(event_log, codec, region, stores, stop=stop, interval_s=interval_s,
                           opener=ledger_opener, rounds_per_child=rounds_per_child)  # fmt: skip
    thread = None
    if "ledger" in which:
        thread = threading.Thread(target=ledger.run, name="projection-ledger", daemon=True)
        thread.start()
    fleet_events = 0
    try:
        if "fleet" in which:
            fleet_events = _follow_fleet(event_log, codec, region, stores, stop)
        else:
            while not stop.wait(1.0):  # woken by a signal's handler, or the ledger's error
                pass
    finally:
        stop.set()
        if thread is not None:
            thread.join(JOIN_TIMEOUT_S)
    if ledger.error is not None:
        raise ledger.error
    return FollowReport(fleet_events, ledger.events, ledger.rounds, ledger.unpriced)


def _follow_fleet(
    event_log: EventLog, codec: Codec, region: str, stores: Stores, stop: threading.Event
) -> int:
    conn = stores.open_fleet()
    try:
        processor = fleet_processor(event_log, codec, region, FleetWriter(conn))
        log.info("fleet state: following %s", event_log.describe())
        lost = False
        try:
            while not stop.is_set():
                processor.run_once()
                # A database that did not take a batch pauses the processor (it retries); one
                # that went away took the connection with it, and nothing retried on it can
                # succeed: stop, so that a supervisor starts the follower again.
                if conn.closed:
                    lost = True
                    raise FleetDatabaseError(
                        f"the fleet-state database ({stores.describe_fleet()}) closed the "
                        "connection (restarted or stopped); start the follower again once it "
                        "answers: it resumes from the offsets stored with the rows"
                    )
        finally:
            if lost:
                processor.terminate()  # nothing held can be written; the next run reads it again
            else:
                processor.close()  # the chain's last batch written and committed
        return processor.processed
    finally:
        conn.close()


class _LedgerRounds:
    """The ledger's follower: a catch-up round every interval, on its own thread (in a child
    process with an opener)."""

    def __init__(self, event_log: EventLog, codec: Codec, region: str, stores: Stores, *,
                 stop: threading.Event, interval_s: float, opener: Opener | None = None,
                 rounds_per_child: int = ROUNDS_PER_CHILD) -> None:  # fmt: skip
        self.event_log, self.codec, self.region = event_log, codec, region
        self.stores, self.stop, self.interval_s = stores, stop, interval_s
        self.opener, self.rounds_per_child = opener, rounds_per_child
        self.events = self.rounds = self.unpriced = 0
        self.error: BaseException | None = None
        self.held = False  # the embedded ledger was held by another process at the last round
        self._child: ProcessPoolExecutor | None = None

    def run(self) -> None:
        log.info("ledger: following %s every %.1f s", self.event_log.describe(), self.interval_s)
        try:
            while not self.stop.is_set():
                self.round()
                self.stop.wait(self.interval_s)
        except BaseException as error:  # the follower stops and says why, from the main thread
            self.error = error
            self.stop.set()
        finally:
            self.close()

    def close(self) -> None:
        """Stop the child process, if any (after its round in flight)."""
        if self._child is not None:
            self._child.shutdown(wait=True)
            self._child = None

    def round(self) -> None:
        if self.opener is None:
            outcome = _round(self.event_log, self.codec, self.region, self.stores)
        else:
            if self._child is None:
                self._child = ProcessPoolExecutor(
                    1,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=pool_initializer,
                    initargs=(os.getpid(), _child_signals),
                    max_tasks_per_child=self.rounds_per_child,
                )
            outcome = self._child.submit(_child_round, self.opener, self.region,
                                         self.stores).result()  # fmt: skip
        if isinstance(outcome, str):  # another process reads it now (an embedded ledger)
            if not self.held:
                log.warning("ledger: %s; trying again every %.1f s", outcome, self.interval_s)
            self.held = True
            return
        if self.held:
            log.info("ledger: open again; following")
        self.held = False
        events, unpriced = outcome
        if events:
            self.events += events
            self.rounds += 1
            self.unpriced += unpriced
            log.info("ledger: %d events applied (%d unpriced)", events, unpriced)


def _round(event_log: EventLog, codec: Codec, region: str, stores: Stores) -> tuple[int, int] | str:
    """One catch-up round of the ledger: (events applied, unpriced), or why the ledger could
    not be opened (another process holds it)."""
    try:
        writer = open_writer(stores, "ledger")
    except LedgerFolderError:
        raise
    except LedgerError as error:
        return str(error)
    try:
        report = catch_up(event_log, codec, region, writer)
    finally:
        assert writer.ledger is not None
        writer.ledger.store.close()
    return report.events, report.unpriced


_opened: tuple[EventLog, Codec] | None = None
"""The ledger's child process: the log and codec it opened at its first round."""


def _child_round(opener: Opener, region: str, stores: Stores) -> tuple[int, int] | str:
    """`_round` in the ledger's child process (the log opened once per child: it goes with
    the child)."""
    global _opened  # noqa: PLW0603 - one log per child process, for its rounds
    if _opened is None:
        _opened = opener()
    return _round(*_opened, region, stores)


def _child_signals() -> None:
    """The child leaves SIGTERM and SIGINT to its parent, which stops it between rounds (a
    Ctrl-C reaches the whole process group)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _wait_for_topics(
    event_log: EventLog, region: str, which: Sequence[Which], stop: threading.Event,
    interval_s: float,
) -> bool:  # fmt: skip
    """Wait until the topics the projections read exist; False if stopped first."""
    wanted = sorted({topic_name(region, t) for w in which
                     for t in (FLEET_TOPICS if w == "fleet" else LEDGER_TOPICS)})  # fmt: skip
    said = False
    while not stop.is_set():
        missing = [t for t in wanted if not _exists(event_log, t)]
        if not missing:
            return True
        if not said:
            log.info("waiting for the region's topics (%s missing)", ", ".join(missing))
            said = True
        stop.wait(interval_s)
    return False


def _exists(event_log: EventLog, topic: str) -> bool:
    try:
        event_log.partitions_for(topic)
    except UnknownTopicError:
        return False
    return True


def serve(
    event_log: EventLog,
    codec: Codec,
    region: str,
    stores: Stores,
    which: Sequence[Which],
    *,
    interval_s: float = INTERVAL_S,
    ledger_opener: Opener | None = None,
) -> FollowReport:
    """`follow` until SIGTERM or SIGINT (call it from the main thread); logs to stderr."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return follow(event_log, codec, region, stores, which, stop=stop, interval_s=interval_s,
                  ledger_opener=ledger_opener)  # fmt: skip
