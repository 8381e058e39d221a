"""The embedded ledger's engine (chdb) in a process of its own, behind the `LedgerStore` seam.

chdb's engine is most of a ledger writer's memory: its library maps about 200 MiB at import,
and its inserts, merges and queries take tens of MiB more, with spikes past 100 MiB
(docs/performance.md, "The demo"). A process that also reads and decodes the history, prices it
and keeps the fleet state cannot then stay within 400 MiB. `ApartStore` runs the engine in a
spawned child (``spotcap-ledger``) that holds the ledger's path, and speaks to it over a pipe in
the store's own terms: Arrow IPC stream bytes in for an insert (what `ChdbStore` hands chdb
anyway), ArrowStream bytes out for a query, ClickHouse's refusal as a `LedgerError`'s text.

One child per data path per process, shared by every `ApartStore` of this process on that path
(chdb admits one process on a path; one database per store, as in-process). The child ends
with its parent (`streams.children.die_with_parent`), when its pipe closes, or at `stop_all`.
Who calls it: `projections.stores.Stores.open_ledger` for a `Stores` made with
``ledger_apart=True`` (the demo's projections' child).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from projections.ledger.store import ChdbStore, LedgerError, arrow_bytes, arrow_rows, arrow_table
from streams.children import die_with_parent, name_process

CHILD_NAME = "spotcap-ledger"
_START_S = 300.0  # chdb's import and a ledger's loading: seconds on a loaded machine
_STOP_S = 60.0  # a last insert's parts and the engine's shutdown

_lock = threading.Lock()
_served: dict[Path, _Server] = {}


class _Server:
    """The child holding one data path, and the pipe to it (one request at a time)."""

    def __init__(self, path: Path) -> None:
        spawn = multiprocessing.get_context("spawn")
        self.path = path
        self._conn, child_end = spawn.Pipe()
        self._process = spawn.Process(
            target=_serve, args=(os.getpid(), child_end, str(path)), name=CHILD_NAME, daemon=True
        )
        self._process.start()
        child_end.close()
        self._lock = threading.Lock()
        try:
            started = self._conn.poll(_START_S)
            if started:
                self._answer()
        except (EOFError, OSError):
            started = False
        if not started:
            self.stop()
            raise LedgerError(
                f"the embedded ledger's process for {path} did not start within {_START_S:.0f} "
                f"s (exit code {self._process.exitcode}); is the machine out of memory?"
            )

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def call(self, *request: Any) -> Any:
        with self._lock:
            try:
                self._conn.send(request)
                return self._answer()
            except (EOFError, OSError, BrokenPipeError) as error:
                raise LedgerError(
                    f"the embedded ledger's process for {self.path} (pid {self.pid}) ended "
                    f"(exit code {self._process.exitcode}): {error}; run the command again"
                ) from error

    def _answer(self) -> Any:
        kind, body = self._conn.recv()
        if kind == "error":
            raise LedgerError(body)
        return body

    def alive(self) -> bool:
        return self._process.is_alive()

    def stop(self) -> None:
        """Close the pipe (the child closes its stores and ends) and wait for it."""
        with self._lock:
            self._conn.close()
        self._process.join(_STOP_S)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()


def _server(path: Path) -> _Server:
    path = path.resolve()
    with _lock:
        server = _served.get(path)
        if server is None or not server.alive():
            server = _served[path] = _Server(path)
        return server


def stop_all() -> None:
    """End every ledger child of this process (each closes its stores first)."""
    with _lock:
        servers = list(_served.values())
        _served.clear()
    for server in servers:
        server.stop()


class ApartStore:
    """The embedded ledger at `path`, database `database`, in the path's child process."""

    def __init__(self, path: Path, database: str = "spotcap") -> None:
        self.path = path
        self._server = _server(path)
        self.database = self._server.call("open", database)

    def command(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        self._server.call("command", self.database, sql, dict(params) if params else None)

    def insert(self, table: str, data: pa.Table) -> None:
        if data.num_rows:
            self._server.call("insert", self.database, table, arrow_bytes(data))

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        return arrow_rows(self._query(sql, params))

    def query_table(self, sql: str, params: Mapping[str, Any] | None = None) -> pa.Table | None:
        return arrow_table(self._query(sql, params))

    def _query(self, sql: str, params: Mapping[str, Any] | None) -> bytes:
        data: bytes = self._server.call(
            "query", self.database, sql, dict(params) if params else None
        )
        return data

    def describe(self) -> str:
        return (
            f"embedded ClickHouse (chdb) at {self.path}, database {self.database}, in process "
            f"{self._server.pid}"
        )

    def close(self) -> None:
        """Nothing to let go of here: the child holds the path until `stop_all` (or this
        process) ends it."""


def _serve(parent_pid: int, conn: Any, path: str) -> None:
    """In the child: answer requests until the pipe closes; each database's store opened on
    first use."""
    die_with_parent(parent_pid)
    name_process(CHILD_NAME)
    stores: dict[str, ChdbStore] = {}
    conn.send(("ok", None))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            break
        try:
            conn.send(("ok", _handle(stores, Path(path), *request)))
        except LedgerError as error:
            conn.send(("error", str(error)))
    for store in stores.values():
        store.close()


def _handle(stores: dict[str, ChdbStore], path: Path, op: str, database: str, *args: Any) -> Any:
    store = stores.get(database)
    if store is None:
        store = stores[database] = ChdbStore(path, database)
    if op == "open":
        return store.database
    if op == "command":
        store.command(*args)
        return None
    if op == "insert":
        store.insert_arrow(*args)
        return None
    if op == "query":
        return store.query_bytes(*args)
    raise LedgerError(f"the embedded ledger's process got an unknown request {op!r}")
