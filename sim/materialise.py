"""The end of the demo: materialise both projections, then say what they hold: the savings
totals, and three `why` commands a person can paste.

Both projections are brought up to date in one fresh (spawned) process, from one read of the
history (`projections.catchup.run_projections`: decoding it is a third of each projection's
CPU, so it is done once): the demo's process never imports the stores' libraries (chdb's engine
alone maps about 250 MiB at import), and the child's memory goes back to the system when it
ends. The ledger's engine runs in a child of that child (`projections.ledger.apart`,
``spotcap-ledger``): the child reads, decodes and prices, the engine stores, and neither holds
the other's memory. The child opens the log and the codec through a picklable `Opener`, then
reads the savings totals from the ledger and the `why` examples from the fleet state. A process that
already holds the embedded ledger's path (chdb admits one per process, and no other process can
open it meanwhile: a test process sharing one path among its ledgers) projects the ledger
itself, on a thread, and the fleet state in a child.

The demo starts the child as soon as its log's topics exist (`Follower`): it follows the log
while the simulation writes it (`streams.merged.Following`: the same events in the same order
as one read of the finished log), so on two cores the projections' work overlaps the
simulation's instead of following it, and the demo ends soon after its last flush.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from projections.money import eur_string, eur_text
from projections.stores import StoreError, Stores
from schemas.codec import Codec
from sim.collector import fewer_collections
from streams.children import die_with_parent, name_process, pool_initializer
from streams.log import EventLog, LogError
from streams.merged import Progress

if TYPE_CHECKING:  # the catch-up's modules import psycopg and pyarrow: the children's alone
    from projections.catchup import ShowProgress

NO_PROJECTIONS = "or run the demo with --no-projections"
Which = Literal["fleet", "ledger"]  # as `projections.catchup.Which`
WHICH: tuple[Which, ...] = ("fleet", "ledger")
LABELS = {"fleet": "fleet state", "ledger": "ledger"}
# How long the demo waits for a child that ended without saying how (killed: out of memory)
# to have its last message read, once it is seen dead.
_LAST_WORD_S = 10.0

Opener = Callable[[], tuple[EventLog, Codec]]
"""Opens the log and makes the codec in a child process: picklable (a module-level function,
or a `functools.partial` of one), since the children are spawned."""


class ProjectionsError(RuntimeError):
    """The demo's projections cannot be checked or brought up to date; `hint` says what to do."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def check_region(stores: Stores) -> None:
    """Before the demo runs: the projections hold this region (or none), so that a run of
    another region is refused before it simulates, not after; ProjectionsError if not. The
    stores are opened in a process of its own (the ledger's chdb stays out of this one)."""
    if _ledger_held_here(stores):
        refused = _check_region(stores)
    else:
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(
            1, mp_context=spawn, initializer=pool_initializer,
            initargs=(os.getpid(), partial(name_process, "spotcap-check")),
        ) as pool:  # fmt: skip
            refused = pool.submit(_check_region, stores).result()
    if refused is not None:
        raise ProjectionsError(*refused)


def _check_region(stores: Stores) -> tuple[str, str] | None:
    """In the child: `check_region`'s refusal as (message, hint), or None."""
    from projections.ledger.store import LedgerError
    from projections.postgres.connection import FleetDatabaseError
    from projections.provenance import RegionMismatchError

    try:
        stores.check_region()
    except RegionMismatchError as error:
        return str(error), "run the demo of another region in a home of its own (--home)"
    except (StoreError, FleetDatabaseError, LedgerError) as error:
        return str(error), NO_PROJECTIONS
    return None


def materialise(
    opener: Opener,
    region: str,
    stores: Stores,
    *,
    rebuild: bool,
    show: ShowProgress | None = None,
) -> dict[str, Any]:
    """Bring both projections up to date (or rebuild them) in a process of their own, and
    report on them; ProjectionsError when a store or the log fails (or a
    child ends without a word). `show` gets one progress for both."""
    return _Projecting(opener, region, stores, rebuild=rebuild).result(show)


class LogWritten:
    """How far the demo has written its log (`streams.merged.Following`), shared with the
    projections' children that follow it: they are spawned with its two values."""

    def __init__(self) -> None:
        spawn = multiprocessing.get_context("spawn")
        self._below = spawn.Value("q", -1)
        self._complete = spawn.Value("b", 0)

    def watermark(self) -> int:
        return int(self._below.value)

    def complete(self) -> bool:
        return bool(self._complete.value)

    def flushed(self, below_us: int) -> None:
        self._below.value = below_us

    def finish(self) -> None:
        self._complete.value = 1


class Follower:
    """Both projections following the demo's log while it is written (`sim.demo.LogFollower`):
    `start` once the log's topics exist, then `flushed` after each flush, `complete` after the
    last; `result` reports as `materialise` does. Should the demo's events ever come out of
    event-time order (`disordered`), the children stop and `result` rebuilds both projections
    from the finished log instead. `stop` ends the children (a demo that failed)."""

    def __init__(self, opener: Opener, region: str, stores: Stores, *, rebuild: bool) -> None:
        self._args = (opener, region, stores)
        self._rebuild = rebuild
        self._written = LogWritten()
        self._projecting: _Projecting | None = None
        self._disordered = False

    def start(self) -> None:
        self._projecting = _Projecting(*self._args, rebuild=self._rebuild, following=self._written)

    def flushed(self, below_us: int) -> None:
        self._written.flushed(below_us)

    def disordered(self) -> None:
        self._disordered = True
        self.stop()

    def complete(self) -> None:
        self._written.finish()

    def result(self, show: ShowProgress | None = None) -> dict[str, Any]:
        if self._disordered or self._projecting is None:
            return materialise(*self._args, rebuild=self._disordered or self._rebuild, show=show)
        return self._projecting.result(show)

    def stop(self) -> None:
        self._written.finish()  # a child on a thread cannot be ended: it reads to the end
        if self._projecting is not None:
            self._projecting.stop()


class _Projecting:
    """Both projections being brought up to date in a process of their own (the ledger on a
    thread where this process holds its path, the fleet state then in a process of its own);
    following a log still written with `following`."""

    def __init__(
        self,
        opener: Opener,
        region: str,
        stores: Stores,
        *,
        rebuild: bool,
        following: LogWritten | None = None,
    ) -> None:
        spawn = multiprocessing.get_context("spawn")
        self.messages: Any = spawn.Queue()
        self.children: dict[Which, Any] = {}
        here = _ledger_held_here(stores)
        if not here:  # chdb's engine in a child of the child (`projections.ledger.apart`)
            stores = replace(stores, ledger_apart=True)
        for group in (("fleet",), ("ledger",)) if here else (WHICH,):
            on_thread = here and group == ("ledger",)
            child = (threading.Thread if on_thread else spawn.Process)(
                target=_project if on_thread else partial(_project_apart, os.getpid()),
                args=(opener, region, stores, group),
                kwargs={"rebuild": rebuild, "messages": self.messages, "following": following},
                name=f"spotcap-project-{'-'.join(group)}",
            )
            self.children.update(dict.fromkeys(group, child))
        for child in set(self.children.values()):
            child.start()

    def result(self, show: ShowProgress | None) -> dict[str, Any]:
        try:
            done = _gather(self.children, self.messages, show)
        finally:
            self.stop()
        fleet, ledger = done["fleet"], done["ledger"]
        total = ledger["savings"]
        return {
            "projections": [done[which]["run"] for which in WHICH],
            "savings_eur": {name: eur_string(micros) for name, micros in total.items()},
            "savings_micros": total,
            "why_examples": fleet["why_examples"],
        }

    def stop(self) -> None:
        for child in set(self.children.values()):
            if child.is_alive() and isinstance(child, multiprocessing.process.BaseProcess):
                child.terminate()
            child.join()


def _gather(
    children: dict[Which, Any], messages: Any, show: ShowProgress | None
) -> dict[Which, dict[str, Any]]:
    """The children's results as they say them; their progress, summed, to `show`."""
    done: dict[Which, dict[str, Any]] = {}
    read: dict[Which, tuple[int, int]] = {}
    dead_since: dict[Which, float] = {}
    with (show or _silent)(WHICH) as on_progress:
        while len(done) < len(children):
            try:
                kind, which, body = messages.get(timeout=1.0)
            except queue.Empty:
                _check_alive(children, done, dead_since)
                continue
            if kind == "progress":
                read[which] = body
                records = sum(r for r, _ in read.values())
                total = sum(t for _, t in read.values()) if len(read) == len(children) else None
                on_progress(Progress(records, total, records, 0))
            elif kind == "done":
                done[which] = body
            else:
                names = " and ".join(LABELS[w] for w in which)
                raise ProjectionsError(f"projecting the {names} failed: {body}", NO_PROJECTIONS)
    return done


def _check_alive(
    children: dict[Which, Any], done: dict[Which, Any], dead_since: dict[Which, float]
) -> None:
    """A child that ended without saying so (its last message had `_LAST_WORD_S` to arrive)."""
    import time

    for which, child in children.items():
        if which in done or child.is_alive():
            continue
        since = dead_since.setdefault(which, time.monotonic())
        if time.monotonic() - since > _LAST_WORD_S:
            code = getattr(child, "exitcode", None)
            raise ProjectionsError(
                f"the process projecting the {which} ended with exit code {code} "
                "and no result (killed, out of memory?)",
                "run `spotcap project` to bring the projections up to date, " + NO_PROJECTIONS,
            )


def _project_apart(parent_pid: int, *args: Any, **kwargs: Any) -> None:
    """`_project` in a child process, which ends with its parent (the demo, even killed), and
    ends the ledger's engine's process it started (which also ends with it)."""
    die_with_parent(parent_pid)
    try:
        _project(*args, **kwargs)
    finally:
        apart = sys.modules.get("projections.ledger.apart")
        if apart is not None:
            apart.stop_all()


def _project(
    opener: Opener,
    region: str,
    stores: Stores,
    group: tuple[Which, ...],
    *,
    rebuild: bool,
    messages: Any,
    following: LogWritten | None = None,
) -> None:
    """In the child: the projections of `group` brought up to date (both from one read of the
    history when they start from the same offsets), then what the demo says of each."""
    from projections.catchup import run_projections
    from projections.ledger.store import LedgerError
    from projections.postgres.connection import FleetDatabaseError

    if threading.current_thread() is threading.main_thread():
        name_process("spotcap-project")
    try:
        log, codec = opener()
        try:
            show = _relay(group, messages)
            with fewer_collections():
                runs = run_projections(
                    log, codec, region, stores, group, fresh=rebuild, show=show,
                    following=following,
                )  # fmt: skip
        finally:
            log.close()
        bodies: list[tuple[str, dict[str, Any]]] = []
        for r in runs:
            body: dict[str, Any] = {
                "run": {
                    "projection": r.projection,
                    "events": r.events,
                    "seconds": round(r.seconds, 3),
                    "unpriced": r.unpriced,
                }
            }
            if r.projection == "ledger":
                body["savings"] = _savings(stores)
            else:
                body["why_examples"] = _why_examples(stores)
            bodies.append((r.projection, body))
    except (StoreError, FleetDatabaseError, LedgerError, LogError) as error:
        messages.put(("failed", group, str(error)))
    except BaseException:
        messages.put(("failed", group, traceback.format_exc(limit=-3)))
        raise
    else:
        for which, body in bodies:
            messages.put(("done", which, body))


def _ledger_held_here(stores: Stores) -> bool:
    """Whether this process holds the embedded ledger's chdb path (looked up without importing
    the ledger's modules: a process that never imported them holds nothing)."""
    module = sys.modules.get("projections.ledger.store")
    if module is None or stores.clickhouse_url:
        return False
    held = module.chdb_path_held()
    return held is not None and held == stores.ledger_location()[0].resolve()


def _relay(group: tuple[Which, ...], messages: Any) -> ShowProgress:
    """The child's progress, sent to the demo's process (at most every 20,000 records), for
    each projection of `group` (they read the history together)."""
    from contextlib import nullcontext

    last = [-1]

    def send(progress: Progress) -> None:
        if progress.records_read - last[0] >= 20_000 or progress.fraction == 1.0:
            last[0] = progress.records_read
            for which in group:
                read = (progress.records_read, progress.records_total or 0)
                messages.put(("progress", which, read))

    def show(_: Sequence[Which]) -> Any:
        return nullcontext(send)

    return show


def _savings(stores: Stores) -> dict[str, int]:
    from projections.read.savings import savings

    total = savings(stores.open_ledger()).total
    return {
        "counterfactual": total.counterfactual,
        "cost": total.cost,
        "net_saving": total.net_saving,
    }


def _why_examples(stores: Stores) -> list[str]:
    conn = stores.open_fleet()
    examples: list[str] = []
    lost = conn.execute(
        "SELECT instance_id, notice_event_id::text FROM instances WHERE state IN ('lost',"
        " 'replaced') ORDER BY (notice_event_id IS NULL), (drain_started_event_id IS NULL),"
        " lost_at, instance_id LIMIT 1"
    ).fetchone()
    if lost:
        examples.append(f"spotcap why {lost[0]}")
    escalated = conn.execute(
        "SELECT event_id::text FROM fallbacks WHERE kind = 'escalated' ORDER BY occurred_at LIMIT 1"
    ).fetchone()
    if escalated:
        examples.append(f"spotcap why {escalated[0]}")
    elif lost and lost[1]:
        examples.append(f"spotcap why {lost[1]}")
    workload = conn.execute(
        "SELECT workload_id FROM instances WHERE state IN ('lost', 'replaced')"
        " GROUP BY workload_id ORDER BY count(*) DESC, workload_id LIMIT 1"
    ).fetchone()
    if workload:
        examples.append(f"spotcap why {workload[0]}")
    conn.close()
    return examples


def _silent(_: Sequence[Which]) -> Any:
    from contextlib import nullcontext

    return nullcontext(lambda _: None)


def projection_lines(report: dict[str, Any], home_args: str) -> list[str]:
    """What `materialise`'s report says to a person: the savings sentence, then the `why`
    commands to paste, each with `home_args` (`` --home H --region R``) after ``spotcap``."""
    money = report["savings_micros"]
    share = money["net_saving"] / money["counterfactual"] if money["counterfactual"] else 0.0
    # Short lines, each command on its own: a person reads them at 80 columns.
    lines = [
        f"net saving {eur_text(money['net_saving'])}: {share:.1%} of a "
        f"{eur_text(money['counterfactual'])} counterfactual,",
        f"  after {eur_text(money['cost'])} of costs; per workload:",
        f"  spotcap{home_args} report savings",
    ]
    if report["why_examples"]:
        lines.append("ask why something happened:")
        lines.extend(
            f"  {command.replace('spotcap', 'spotcap' + home_args, 1)}"
            for command in report["why_examples"]
        )
    return lines
