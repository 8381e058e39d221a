"""The embedded ledger's engine in a process of its own (`projections.ledger.apart`): it writes
the ledger the in-process store writes, says ClickHouse's refusals as they are, lets go of the
path when stopped, and ends with the process that started it, even one killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from projections.ledger.apart import ApartStore, stop_all
from projections.ledger.store import ChdbStore, LedgerError
from projections.ledger.writer import LedgerWriter
from projections.stores import Stores
from tests.projection_support import ended, process_tree
from tests.test_ledger_writer import ledger_events, lines, write

WAIT_S = 120  # a spawned Python importing chdb on a loaded machine


def _dump(store: ApartStore | ChdbStore) -> dict[str, list[dict[str, object]]]:
    """The rows the writer leaves, table by table (the batches' numbering is the same)."""
    return {
        table: store.query(f"SELECT * EXCEPT batch FROM {table} FINAL ORDER BY ALL")
        for table in ("ledger_lines", "priced_facts")
    } | {
        table: store.query(f"SELECT * FROM {table} FINAL ORDER BY ALL")
        for table in ("events", "rate_cards", "rankings", "consumed_offsets")
    }


def test_the_ledger_written_apart_is_the_ledger_written_in_process(
    tmp_path: Path, ledger_store: ChdbStore
) -> None:
    events = ledger_events()
    apart = ApartStore(tmp_path / "ledger", "apart")
    try:
        write(LedgerWriter(apart), events, 2000)
        write(LedgerWriter(ledger_store), events, 2000)
        assert lines(apart)  # type: ignore[arg-type]
        assert _dump(apart) == _dump(ledger_store)
        # A restart on the apart store resumes from its offsets and prices nothing twice.
        again = LedgerWriter(apart)
        assert again.stored_offsets() == LedgerWriter(ledger_store).stored_offsets()
    finally:
        stop_all()


def test_a_refusal_is_clickhouses_own_text_and_the_store_goes_on(tmp_path: Path) -> None:
    store = ApartStore(tmp_path / "ledger", "refusing")
    try:
        with pytest.raises(LedgerError, match=r"UNKNOWN_TABLE|Unknown table"):
            store.query("SELECT * FROM no_such_table")
        assert store.query("SELECT 1 AS one") == [{"one": 1}]
        # A second database on the path shares the engine's process.
        other = ApartStore(tmp_path / "ledger", "other")
        assert other.describe().rsplit(" ", 1)[1] == store.describe().rsplit(" ", 1)[1]
    finally:
        stop_all()


def test_stopped_it_lets_go_of_the_path_for_another_process(tmp_path: Path) -> None:
    path = tmp_path / "ledger"
    store = ApartStore(path, "spotcap")
    store.command("CREATE TABLE t (a UInt64) ENGINE = MergeTree ORDER BY a")
    store.command("INSERT INTO t VALUES (7)")
    pid = store.describe().rsplit(" ", 1)[1]
    stop_all()
    assert ended(int(pid))
    # Another process opens the path (chdb admits one at a time) and finds the row.
    reopened = ApartStore(path, "spotcap")
    try:
        assert reopened.query("SELECT a FROM t") == [{"a": 7}]
    finally:
        stop_all()


def test_a_stores_ledger_apart_opens_the_engine_in_a_child(tmp_path: Path) -> None:
    env_path = os.environ.pop("SPOTCAP_CHDB_PATH", None)  # the home's own ledger path
    try:
        store = Stores(tmp_path, ledger_apart=True).open_ledger()
        assert isinstance(store, ApartStore)
        assert store.path == tmp_path / "ledger"
    finally:
        if env_path is not None:
            os.environ["SPOTCAP_CHDB_PATH"] = env_path
        stop_all()


def test_parts_merged_away_are_removed_without_a_burst_of_threads(tmp_path: Path) -> None:
    """Past 100 parts merged away at once ClickHouse removes them with up to 128 threads, which
    the engine then keeps idle; the ledger's tables have them removed by their cleanup alone."""
    store = ApartStore(tmp_path / "ledger", "spotcap")
    try:
        LedgerWriter(store)  # the ledger's tables
        pid = int(store.describe().rsplit(" ", 1)[1])
        store.command("SYSTEM STOP MERGES consumed_topics")
        for n in range(150):
            store.command(
                "INSERT INTO consumed_topics VALUES ('ledger', {t:String}, 'id', now64(6))",
                {"t": f"topic-{n}"},
            )
        store.command("SYSTEM START MERGES consumed_topics")
        store.command("OPTIMIZE TABLE consumed_topics FINAL")
        outdated = "SELECT count() AS n FROM system.parts WHERE table = 'consumed_topics'"
        deadline = time.monotonic() + WAIT_S  # the cleanup runs every 30 s or so
        while store.query(outdated + " AND NOT active")[0]["n"] and time.monotonic() < deadline:
            time.sleep(0.5)
        assert store.query(outdated + " AND NOT active")[0]["n"] == 0
        threads = len(os.listdir(f"/proc/{pid}/task"))
        assert threads < 60, f"the engine's process holds {threads} threads"
    finally:
        stop_all()


_HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from projections.ledger.apart import ApartStore
    store = ApartStore(Path(sys.argv[1]), "spotcap")
    print(store.describe().rsplit(" ", 1)[1], flush=True)
    time.sleep(600)
    """
)


def test_the_engines_process_ends_with_a_parent_killed_with_sigkill(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTCAP_")}
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_path / "ledger")],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert holder.stdout is not None
        child = int(holder.stdout.readline())
        assert child in process_tree(holder.pid)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=WAIT_S)
        deadline = time.monotonic() + WAIT_S
        while not ended(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ended(child), f"the engine's process {child} outlived its killed parent"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=WAIT_S)
