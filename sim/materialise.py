"""The end of the demo: materialise both projections, then say what they hold: the savings
totals, and three `why` commands a person can paste.

Each projection is brought up to date in a fresh (spawned) process of its own, the two at once
(one per core): the demo's process never imports the stores' libraries (chdb's engine alone
maps about 250 MiB at import), and each child's memory goes back to the system when it ends.
The children open the log and the codec through a picklable `Opener`; each reads the history
itself (`projections.catchup.run_projections`), and the ledger's child reads the savings
totals, the fleet state's the `why` examples. A process that already holds the embedded
ledger's path (chdb admits one per process, and no other process can open it meanwhile: a test
process sharing one path among its ledgers) checks and projects the ledger itself, on a thread.
"""

from __future__ import annotations

import multiprocessing
import queue
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING, Any, Literal

from projections.money import eur_string, eur_text
from projections.stores import StoreError, Stores
from schemas.codec import Codec
from streams.log import EventLog, LogError
from streams.merged import Progress

if TYPE_CHECKING:  # the catch-up's modules import psycopg and pyarrow: the children's alone
    from projections.catchup import ShowProgress

NO_PROJECTIONS = "or run the demo with --no-projections"
Which = Literal["fleet", "ledger"]  # as `projections.catchup.Which`
WHICH: tuple[Which, ...] = ("fleet", "ledger")
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
        with ProcessPoolExecutor(1, mp_context=spawn) as pool:
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
    """Bring both projections up to date (or rebuild them), each in a process of its own, the
    two at once, and report on them; ProjectionsError when a store or the log fails (or a
    child ends without a word). `show` gets one progress for both."""
    spawn = multiprocessing.get_context("spawn")
    messages: Any = spawn.Queue()
    children: dict[Which, Any] = {}
    for which in WHICH:
        here = which == "ledger" and _ledger_held_here(stores)
        children[which] = (threading.Thread if here else spawn.Process)(
            target=_project,
            args=(opener, region, stores, which),
            kwargs={"rebuild": rebuild, "messages": messages},
            name=f"spotcap-project-{which}",
        )
    for child in children.values():
        child.start()
    try:
        done = _gather(children, messages, show)
    finally:
        for child in children.values():
            if child.is_alive() and isinstance(child, multiprocessing.process.BaseProcess):
                child.terminate()
            child.join()
    fleet, ledger = done["fleet"], done["ledger"]
    total = ledger["savings"]
    return {
        "projections": [done[which]["run"] for which in WHICH],
        "savings_eur": {name: eur_string(micros) for name, micros in total.items()},
        "savings_micros": total,
        "why_examples": fleet["why_examples"],
    }


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
                raise ProjectionsError(f"the {which} projection failed: {body}", NO_PROJECTIONS)
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


def _project(
    opener: Opener, region: str, stores: Stores, which: Which, *, rebuild: bool, messages: Any
) -> None:
    """In the child: one projection brought up to date, then what the demo says of it."""
    from projections.catchup import run_projections
    from projections.ledger.store import LedgerError
    from projections.postgres.connection import FleetDatabaseError

    try:
        log, codec = opener()
        try:
            runs = run_projections(
                log, codec, region, stores, (which,), fresh=rebuild, show=_relay(which, messages)
            )
        finally:
            log.close()
        r = runs[0]
        body: dict[str, Any] = {
            "run": {
                "projection": r.projection,
                "events": r.events,
                "seconds": round(r.seconds, 3),
                "unpriced": r.unpriced,
            }
        }
        if which == "ledger":
            body["savings"] = _savings(stores)
        else:
            body["why_examples"] = _why_examples(stores)
    except (StoreError, FleetDatabaseError, LedgerError, LogError) as error:
        messages.put(("failed", which, str(error)))
    except BaseException:
        messages.put(("failed", which, traceback.format_exc(limit=-3)))
        raise
    else:
        messages.put(("done", which, body))


def _ledger_held_here(stores: Stores) -> bool:
    """Whether this process holds the embedded ledger's chdb path (looked up without importing
    the ledger's modules: a process that never imported them holds nothing)."""
    module = sys.modules.get("projections.ledger.store")
    if module is None or stores.clickhouse_url:
        return False
    held = module.chdb_path_held()
    return held is not None and held == stores.ledger_location()[0].resolve()


def _relay(which: Which, messages: Any) -> ShowProgress:
    """The child's progress, sent to the demo's process (at most every 20,000 records)."""
    from contextlib import nullcontext

    last = [-1]

    def send(progress: Progress) -> None:
        if progress.records_read - last[0] >= 20_000 or progress.fraction == 1.0:
            last[0] = progress.records_read
            messages.put(("progress", which, (progress.records_read, progress.records_total or 0)))

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
    lines = [
        f"net saving {eur_text(money['net_saving'])} of a {eur_text(money['counterfactual'])} "
        f"counterfactual ({share:.1%}), after {eur_text(money['cost'])} of costs; per workload: "
        f"spotcap{home_args} report savings"
    ]
    if report["why_examples"]:
        lines.append("ask why something happened:")
        lines.extend(
            f"  {command.replace('spotcap', 'spotcap' + home_args, 1)}"
            for command in report["why_examples"]
        )
    return lines
