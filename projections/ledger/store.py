"""The ledger store seam: ClickHouse in-process (chdb) or a ClickHouse server
(clickhouse-connect), with the same DDL and SQL.

Both speak Arrow: inserts are Arrow IPC streams (``FORMAT ArrowStream``), query results come back
as Arrow and are turned into rows of Python values. Each store works inside one database, so
the SQL names tables without a database.

chdb admits one data path per process: a second path in the same process fails. `ChdbStore`
keeps one session per process and refuses another path with a sentence that says so; several
isolated ledgers in one process (tests) share one path with one database each.
"""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

_DATABASE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class LedgerError(RuntimeError):
    """The ledger store cannot do what was asked; the message says why and how to fix it."""


def check_database_name(database: str) -> str:
    if not _DATABASE.match(database):
        raise LedgerError(
            f"ClickHouse database name {database!r} is not usable: use letters, digits, '_'"
        )
    return database


def arrow_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def arrow_rows(data: bytes) -> list[dict[str, Any]]:
    if not data:
        return []
    return list(pa.ipc.open_stream(data).read_all().to_pylist())


def arrow_table(data: bytes) -> pa.Table | None:
    """The Arrow table of a query's ArrowStream bytes; None when there are none (no rows)."""
    if not data:
        return None
    return pa.ipc.open_stream(data).read_all()


class LedgerStore(Protocol):
    """What the ledger needs from ClickHouse."""

    database: str

    def command(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        """Run a statement that returns nothing (DDL, ALTER, ...)."""

    def insert(self, table: str, data: pa.Table) -> None:
        """Insert an Arrow table into `table` (of this store's database)."""

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Rows of a SELECT as dicts; `{name:Type}` placeholders are bound from `params`."""
        ...

    def query_table(self, sql: str, params: Mapping[str, Any] | None = None) -> pa.Table | None:
        """The rows of a SELECT as an Arrow table, as ClickHouse gives them (None: no rows);
        for readers of many rows that want columns, not dicts."""
        ...

    def describe(self) -> str:
        """Where the store is, for messages."""
        ...

    def close(self) -> None: ...


# -- chdb ------------------------------------------------------------------------------------

_chdb_lock = threading.Lock()
_chdb_path: Path | None = None


def chdb_path_held() -> Path | None:
    """The embedded ledger's data path this process has opened (chdb admits one per process and
    another process cannot open it meanwhile), or None."""
    return _chdb_path


def _chdb_session(path: Path) -> Any:
    """A chdb session on `path`; refuses a second path in this process (chdb's own rule)."""
    global _chdb_path  # noqa: PLW0603 - chdb itself holds one embedded server per process
    try:
        import chdb.session
    except ImportError as error:
        raise LedgerError(
            "the embedded ledger needs chdb: pip install 'spotcap[servers]' (or configure a "
            "ClickHouse server with --clickhouse / SPOTCAP_CLICKHOUSE_URL)"
        ) from error
    path = path.resolve()
    with _chdb_lock:
        if _chdb_path is not None and _chdb_path != path:
            raise LedgerError(
                f"this process already holds the embedded ledger at {_chdb_path}; chdb admits "
                f"one data path per process, so {path} cannot be opened here: run it in "
                "another process, or share one path with one database per ledger"
            )
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # a read-only or unwritable home
            raise LedgerFolderError(
                f"the embedded ledger's folder {path} cannot be made: "
                f"{error.strerror or error}; choose a writable --home, or configure a ClickHouse "
                "server with --clickhouse / SPOTCAP_CLICKHOUSE_URL"
            ) from error
        try:
            session: Any = chdb.session.Session(str(path))  # type: ignore[no-untyped-call]
        except Exception as error:  # chdb raises RuntimeError with ClickHouse's text
            raise LedgerError(
                f"cannot open the embedded ledger at {path}: {error}; another process may hold "
                "it (only one process at a time can open an embedded ledger)"
            ) from error
        _chdb_path = path
        return session


class LedgerFolderError(LedgerError):
    """The embedded ledger's folder cannot be made (a read-only or unwritable home)."""


class ChdbStore:
    """The embedded ledger: ClickHouse's engine in this process, data under `path`."""

    def __init__(self, path: Path, database: str = "spotcap") -> None:
        self.path = path
        self.database = check_database_name(database)
        self._session = _chdb_session(path)
        self._run(f"CREATE DATABASE IF NOT EXISTS {self.database}")
        self._run(f"USE {self.database}")

    def _run(self, sql: str, fmt: str = "CSV", params: Mapping[str, Any] | None = None) -> Any:
        try:
            return self._session.query(sql, fmt, params=dict(params) if params else None)
        except Exception as error:
            raise LedgerError(f"ClickHouse (embedded, {self.path}) refused: {error}") from error

    def command(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        self._run(sql, params=params)

    def insert(self, table: str, data: pa.Table) -> None:
        if data.num_rows:
            self.insert_arrow(table, arrow_bytes(data))

    def insert_arrow(self, table: str, stream: bytes) -> None:
        """Insert an Arrow IPC stream's rows into `table`."""
        try:
            with self._session.send_insert(f"INSERT INTO {table}", "ArrowStream") as inserter:
                inserter.append(stream)
                inserter.finish()
        except Exception as error:
            raise LedgerError(
                f"ClickHouse (embedded) refused an insert into {table}: {error}"
            ) from error

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        return arrow_rows(self.query_bytes(sql, params))

    def query_table(self, sql: str, params: Mapping[str, Any] | None = None) -> pa.Table | None:
        return arrow_table(self.query_bytes(sql, params))

    def query_bytes(self, sql: str, params: Mapping[str, Any] | None = None) -> bytes:
        """A SELECT's rows as ArrowStream bytes (empty: no rows)."""
        data: bytes = self._run(sql, "ArrowStream", params).bytes()
        return data

    def describe(self) -> str:
        return f"embedded ClickHouse (chdb) at {self.path}, database {self.database}"

    def close(self) -> None:
        """Close this store's session. Other sessions on the path in this process go on; when
        the last one closes, chdb lets go of the path, and another process can open it (the
        HTTP server holds the ledger only while a request reads it)."""
        self._session.close()


# -- ClickHouse server -------------------------------------------------------------------------


class ServerStore:
    """A ClickHouse server through clickhouse-connect (HTTP), e.g. ``http://host:8123``."""

    def __init__(self, url: str, database: str = "spotcap", *, connect_timeout_s: int = 10) -> None:
        import clickhouse_connect
        from clickhouse_connect.driver.exceptions import ClickHouseError

        self.url = url
        self.database = check_database_name(database)
        self._errors: tuple[type[BaseException], ...] = (ClickHouseError, OSError)
        try:
            admin = clickhouse_connect.get_client(dsn=url, connect_timeout=connect_timeout_s)
            admin.command(f"CREATE DATABASE IF NOT EXISTS {self.database}")
            admin.close()
            self._client = clickhouse_connect.get_client(
                dsn=url, database=self.database, connect_timeout=connect_timeout_s
            )
        except self._errors as error:
            raise LedgerError(
                f"cannot reach ClickHouse at {_redact(url)}: {error}; check --clickhouse / "
                "SPOTCAP_CLICKHOUSE_URL, or leave both unset for the embedded ledger"
            ) from error

    def command(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        try:
            self._client.command(sql, parameters=dict(params) if params else None)
        except self._errors as error:
            raise LedgerError(f"ClickHouse at {_redact(self.url)} refused: {error}") from error

    def insert(self, table: str, data: pa.Table) -> None:
        if data.num_rows == 0:
            return
        try:
            self._client.raw_insert(table, insert_block=arrow_bytes(data), fmt="ArrowStream")
        except self._errors as error:
            raise LedgerError(f"ClickHouse refused an insert into {table}: {error}") from error

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        try:
            data = self._client.raw_query(
                sql, parameters=dict(params) if params else None, fmt="ArrowStream"
            )
        except self._errors as error:
            raise LedgerError(f"ClickHouse at {_redact(self.url)} refused: {error}") from error
        return arrow_rows(data)

    def query_table(self, sql: str, params: Mapping[str, Any] | None = None) -> pa.Table | None:
        try:
            data = self._client.raw_query(
                sql, parameters=dict(params) if params else None, fmt="ArrowStream"
            )
        except self._errors as error:
            raise LedgerError(f"ClickHouse at {_redact(self.url)} refused: {error}") from error
        return arrow_table(data)

    def describe(self) -> str:
        return f"ClickHouse at {_redact(self.url)}, database {self.database}"

    def close(self) -> None:
        self._client.close()


def _redact(url: str) -> str:
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def table_names(store: LedgerStore) -> Sequence[str]:
    rows = store.query(
        "SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name"
    )
    return [str(r["name"]) for r in rows]
