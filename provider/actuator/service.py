"""The actuator as a service (`spotcap run actuator`): it follows a region's log and carries out
the guard's orders through a provider, on Kafka or on the embedded log.

One actuator runs per region: its state folder is locked (``flock``) while it runs, and a
second one on the same folder is refused with a sentence. The state folder holds:

* ``book.json``: the book (`provider.actuator.book.OrderBook`) and the log positions it has
  folded, with the log's topic identities (a replaced log is refused, not followed from the
  wrong place), written atomically every `snapshot_every_s` and on stop;
* ``journal``: the orders started and not known done (`provider.actuator.actuator.Journal`).

On start the actuator reads the log from the book's positions to the end the log had then,
*before* it acts: every answer already written is known, and `Actuator.recover` asks the provider
about the orders started before a crash. Then it follows the log: it folds what arrives, carries
out each order when its time (the provider's clock) has come, and writes what the provider
publishes (its answers, and its feeds' facts).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from provider.actuator.actuator import MAX_AGE_S, ActionAuthority, Actuator, Counts, Journal
from provider.actuator.book import OrderBook
from provider.base import CapacityProvider
from schemas.codec import Codec
from schemas.events import Envelope
from streams.log import EventLog, LogError, TopicPartition
from streams.merged import MergedHistory
from streams.topics import region_topics, topic_name
from streams.writer import EventWriter

log = logging.getLogger("spotcap.actuator")

TOPICS = ("market", "demand", "lifecycle", "decisions")
"""What the book folds: pools (market), claims (demand), lifecycle facts, decisions and orders."""
BOOK_VERSION = 1


class ActuatorStateError(RuntimeError):
    """The state folder cannot be used: held by another actuator, from another log or region,
    or unreadable. The message says which and what to do."""


@dataclass(frozen=True, slots=True)
class ActuatorOptions:
    memory: int = 200_000
    """Claims and causes remembered (the book's bound)."""
    snapshot_every_s: float = 10.0
    poll_s: float = 0.5
    """Longest wait for the log when nothing is due."""
    max_age_s: float = MAX_AGE_S
    authority: ActionAuthority | None = None
    """The capacity authority asked before every call (ADR-29); None: the provider's own."""
    agent_version: str | None = None
    """The node agent release new launches boot with, stamped on each (ADR-32; None: no tag).
    Existing nodes keep theirs: a new agent reaches only new launches."""
    follower: FactFollower | None = None
    """Told every event the actuator folds, then drained each step: the node revoker
    (`provider.nodes.Revoker`, ADR-31) revokes deleted and lost instances' certificates."""


class FactFollower(Protocol):
    def observe(self, envelope: Envelope) -> None: ...

    def drain(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Progress:
    """A progress line's figures."""

    events: int
    open_orders: int
    counts: Counts
    caught_up: bool

    def describe(self) -> str:
        """The actuator's progress line."""
        c = self.counts
        return (
            f"actuator: {self.events:,} events read, {self.open_orders:,} orders open; "
            f"launched {c.launched:,}, deleted {c.deleted:,}, "
            f"failed {c.failed:,}, refused {c.refused:,}"
        )


class ActuatorState:
    """The actuator's state folder of one region (see the module's doc)."""

    def __init__(self, folder: Path, region: str) -> None:
        self.folder = folder
        self.region = region
        self.book_path = folder / "book.json"
        self.journal_path = folder / "journal"
        self._lock: IO[str] | None = None

    @contextmanager
    def held(self) -> Iterator[ActuatorState]:
        """Hold the folder's lock while the block runs."""
        self.folder.mkdir(parents=True, exist_ok=True)
        lock = (self.folder / "lock").open("a+", encoding="utf-8")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise ActuatorStateError(
                f"another actuator holds {self.folder}: one actuator runs per region; stop "
                "the other one (or give this one its own --state folder for another region)"
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        self._lock = lock
        try:
            yield self
        finally:
            self._lock = None
            lock.close()

    def load(
        self, topic_ids: dict[str, str | None], memory: int
    ) -> tuple[OrderBook | None, dict[TopicPartition, int]]:
        """The stored book and positions (None and none on a first start)."""
        if not self.book_path.exists():
            return None, {}
        try:
            data = json.loads(self.book_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise ActuatorStateError(
                f"{self.book_path} cannot be read ({error}); remove the state folder to "
                "start over from the log's beginning"
            ) from error
        if data.get("version") != BOOK_VERSION or data.get("region") != self.region:
            raise ActuatorStateError(
                f"{self.book_path} is the state of region {data.get('region')!r} (version "
                f"{data.get('version')}), not of region {self.region!r}; give each region "
                "its own --state folder"
            )
        stored: dict[str, str | None] = data["topic_ids"]
        for name, now in topic_ids.items():
            then = stored.get(name)
            if then is not None and now is not None and then != now:
                raise ActuatorStateError(
                    f"topic {name} was replaced since the actuator last ran (its identity was "
                    f"{then}, it is {now}): the stored positions are of another log; remove "
                    f"{self.folder} to start over from the new log's beginning"
                )
        positions = {(t, int(p)): int(o) for t, p, o in data["positions"]}
        return OrderBook.restore(data["book"], memory), positions

    def save(
        self,
        book: OrderBook,
        positions: dict[TopicPartition, int],
        topic_ids: dict[str, str | None],
    ) -> None:
        data: dict[str, Any] = {
            "version": BOOK_VERSION,
            "region": self.region,
            "topic_ids": topic_ids,
            "positions": [[t, p, o] for (t, p), o in sorted(positions.items())],
            "book": book.snapshot(),
        }
        tmp = self.book_path.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as out:
            json.dump(data, out, separators=(",", ":"))
            out.flush()
            os.fsync(out.fileno())
        tmp.replace(self.book_path)


class ActuatorService:
    """One region's actuator, opened (``with``) and stepped; `run_actuator` loops it."""

    def __init__(
        self,
        log_: EventLog,
        codec: Codec,
        provider: CapacityProvider,
        state_folder: Path,
        *,
        orchestrator_id: str,
        options: ActuatorOptions | None = None,
        side_events: list[Envelope] | None = None,
    ) -> None:
        """`side_events`: events others append (the regional budget's, on the provider's
        calls), written to the log with the actuator's own."""
        self.options = options or ActuatorOptions()
        self.side_events = side_events if side_events is not None else []
        self.log = log_
        self.codec = codec
        self.provider = provider
        self.orchestrator_id = orchestrator_id
        self.state = ActuatorState(state_folder, provider.region)
        self.events = 0
        self.caught_up = False
        self.on_step: Callable[[str], None] | None = None  # the actuator's steps (crash tests)
        self._stack = ExitStack()

    def __enter__(self) -> ActuatorService:
        with ExitStack() as stack:
            stack.enter_context(self.state.held())
            self._open(stack)
            self._stack = stack.pop_all()
        return self

    def _open(self, stack: ExitStack) -> None:
        region = self.provider.region
        log_ = self.log
        names = [topic_name(region, t) for t in TOPICS]
        wanted = {*names, topic_name(region, "schemas")}
        log_.apply_topics([spec for spec in region_topics(region) if spec.name in wanted])
        self.topic_ids = {name: log_.topic_id(name) for name in names}
        book, positions = self.state.load(self.topic_ids, self.options.memory)
        self.book = book or OrderBook(
            self.orchestrator_id, self.options.memory, agent_version=self.options.agent_version
        )
        if self.book.orchestrator_id != self.orchestrator_id:
            raise ActuatorStateError(
                f"{self.state.book_path} holds the orders of orchestrator "
                f"{self.book.orchestrator_id!r}, not {self.orchestrator_id!r}; give each "
                "orchestrator its own --state folder"
            )
        self.ends = {(n, p): end for n in names for p, end in log_.end_offsets(n).items()}
        self.journal = Journal(self.state.journal_path)
        stack.callback(self.journal.close)
        self.writer = EventWriter(log_, self.codec, region, flush_every=1 << 30)
        stack.callback(self.writer.close)
        self.actuator = Actuator(
            self.provider,
            self.book,
            self.journal,
            self.writer.write,
            self.writer.flush,
            max_age_s=self.options.max_age_s,
            on_step=self.on_step,
            authority=self.options.authority,
        )
        self.history = MergedHistory(log_, self.codec, region, TOPICS, until=None, start=positions)
        stack.callback(self.history.close)
        stack.callback(self._last_save)
        self._saved_at = time.monotonic()
        self._wait_s = self.options.poll_s

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    @property
    def counts(self) -> Counts:
        return self.actuator.counts

    def progress(self) -> Progress:
        return Progress(self.events, self.book.open_orders, self.counts, self.caught_up)

    def step(self) -> bool:
        """Fold what the log has (waiting at most until the next order is due), carry out
        what is due once caught up, snapshot when it is time; True when it snapshotted."""
        follower = self.options.follower
        for decoded in self.history.read(2000, timeout_s=self._wait_s):
            self.book.observe(decoded.envelope)
            if follower is not None:
                follower.observe(decoded.envelope)
            self.events += 1
        if follower is not None:
            follower.drain()
        if self.options.authority is not None:  # renews before the lease ends, reads included
            self.options.authority.keep_fresh()
        if not self.caught_up and self.history.reached(self.ends):
            self.caught_up = True
            self.actuator.recover()
            log.info("actuator of %s caught up after %d events", self.provider.region, self.events)
        if self.caught_up:
            self.actuator.act()
            self.actuator.pump()
        while self.side_events:
            self.writer.write(self.side_events.pop(0))
        self.writer.flush()
        self._wait_s = (
            self.options.poll_s  # the authority's backoff, not the orders, says when
            if self.actuator.waiting is not None
            else _wait_s(self.book, self.provider, self.options.poll_s, self.caught_up)
        )
        if time.monotonic() - self._saved_at < self.options.snapshot_every_s:
            return False
        self.save()
        return True

    def save(self) -> None:
        """Write what is pending to the log, then the book and its positions."""
        self.writer.flush()
        self.state.save(self.book, self.history.resume_positions(), self.topic_ids)
        self.journal.compact()
        self._saved_at = time.monotonic()

    def _last_save(self) -> None:
        try:
            self.save()
        except LogError as error:  # the state on disk is the last one written: still safe
            log.warning("actuator stopped without a last snapshot: %s", error)


def run_actuator(
    log_: EventLog,
    codec: Codec,
    provider: CapacityProvider,
    state_folder: Path,
    *,
    orchestrator_id: str,
    should_stop: Callable[[], bool],
    options: ActuatorOptions | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    side_events: list[Envelope] | None = None,
) -> Counts:
    """Follow the provider's region's log and carry out its orders until `should_stop` says
    so (see the module's doc); `on_progress` hears after each snapshot. `LogError` when the
    log fails; `ActuatorStateError` when the state folder cannot be used."""
    service = ActuatorService(
        log_,
        codec,
        provider,
        state_folder,
        orchestrator_id=orchestrator_id,
        options=options,
        side_events=side_events,
    )
    with service:
        while not should_stop():
            if service.step() and on_progress is not None:
                on_progress(service.progress())
    return service.counts


def _wait_s(book: OrderBook, provider: CapacityProvider, poll_s: float, caught_up: bool) -> float:
    """How long to wait for the log: until the next order is due, at most `poll_s`."""
    due = book.next_due_us()
    if not caught_up or due is None:
        return poll_s
    return max(0.0, min(poll_s, (due - provider.now_us()) / 1_000_000))
