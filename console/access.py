"""How the HTTP server reaches its stores: the fleet state, the ledger and the log.

The server outlives its stores' outages: a store that is down makes the requests that need it
answer 503 with a sentence naming the store and how to bring it back (`StoreUnavailableError`), and
the next request tries again. Nothing here starts a store: serving is read-only.

- **Fleet state (PostgreSQL).** A connection per request (a few milliseconds on one machine),
  its statements bounded by `statement_timeout_s`. The embedded server picks a new port at each
  start, so when a connection fails its address is read again from the home (at most every
  `recheck_s`), and a server started again by another command is found.
- **Ledger (ClickHouse).** Opened for each use and closed after it, one use at a time: chdb
  lets one process at a time hold an embedded ledger, so between requests `spotcap project`
  can write it. While another process holds it, the ledger's endpoints answer 503.
- **Log.** Opened once; end offsets are read under a lock.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from projections.ledger.store import LedgerError, LedgerFolderError, LedgerStore
from projections.postgres.connection import Connection, FleetDatabaseError, connect, redact
from projections.postgres.migrate import migrate
from projections.read.errors import fleet_unavailable_on_error
from projections.read.lag import end_offsets_of
from projections.stores import StoreError, Stores
from streams.log import EventLog

STATEMENT_TIMEOUT_S = 30
CONNECT_TIMEOUT_S = 5
RECHECK_S = 5.0


class StoreUnavailableError(RuntimeError):
    """A store the request needs is down; the message (one sentence) says which and how to
    bring it back. The server answers 503 with it."""

    def __init__(self, store: str, message: str) -> None:
        super().__init__(message)
        self.store = store


class ReadAccess:
    """The server's way to the `stores` of one region's home and to its log (opened on first
    use by `open_log`)."""

    def __init__(
        self,
        stores: Stores,
        region: str,
        open_log: Callable[[], EventLog],
        *,
        statement_timeout_s: int = STATEMENT_TIMEOUT_S,
        recheck_s: float = RECHECK_S,
    ) -> None:
        self.stores = stores
        self.region = region
        self._open_log = open_log
        self.statement_timeout_s = statement_timeout_s
        self.recheck_s = recheck_s
        self._dsn: str | None = stores.postgres_dsn
        self._checked_at = float("-inf")
        self._dsn_lock = threading.Lock()
        self._ledger_lock = threading.Lock()
        self._log_lock = threading.Lock()
        self._log: EventLog | None = None

    # -- start and stop ---------------------------------------------------------------------

    def prepare(self) -> str | None:
        """At start, as every command does: the embedded PostgreSQL started if it is not
        running, migrations applied. Returns None, or why the fleet state is not ready yet
        (the server starts anyway and answers 503 until it is)."""
        try:
            dsn = self.stores.fleet_dsn()
            with connect(dsn, connect_timeout_s=CONNECT_TIMEOUT_S) as conn:
                migrate(conn)
        except (StoreError, FleetDatabaseError) as error:
            return str(error)
        with self._dsn_lock:
            self._dsn = dsn
        return None

    def close(self) -> None:
        with self._log_lock:
            if self._log is not None:
                self._log.close()
                self._log = None

    # -- the fleet state --------------------------------------------------------------------

    def _fleet_down(self, why: str) -> StoreUnavailableError:
        if self.stores.postgres_dsn:
            fix = "check that it runs and that --postgres / SPOTCAP_POSTGRES_DSN names it"
        else:
            fix = (
                f"start it with `spotcap --home {self.stores.home} db migrate` "
                "(or any `spotcap query`)"
            )
        return StoreUnavailableError(
            "fleet",
            f"the fleet-state database ({self.stores.describe_fleet()}) is down ({why}): {fix}",
        )

    def _embedded_address(self) -> str | None:
        """The embedded server's address if it runs (read from its state file, no start)."""
        try:
            status = self.stores.embedded_postgres_status()
        except StoreError:
            return None
        address = status.get("address")
        return str(address) if status.get("running") and address else None

    def _connect(self) -> Connection:
        with self._dsn_lock:
            dsn = self._dsn
        if dsn is not None:
            try:
                return connect(dsn, connect_timeout_s=CONNECT_TIMEOUT_S)
            except FleetDatabaseError as error:
                if self.stores.postgres_dsn:
                    raise self._fleet_down(_cause(str(error))) from error
        # The embedded server: not started yet by this process, or it moved (a new port).
        with self._dsn_lock:
            if time.monotonic() - self._checked_at < self.recheck_s and self._dsn == dsn:
                raise self._fleet_down("not running")
            self._checked_at = time.monotonic()
            self._dsn = self._embedded_address()
            dsn = self._dsn
        if dsn is None:
            raise self._fleet_down("not running")
        try:
            return connect(dsn, connect_timeout_s=CONNECT_TIMEOUT_S)
        except FleetDatabaseError as error:
            raise self._fleet_down(_cause(str(error))) from error

    @contextmanager
    def fleet(self) -> Iterator[Connection]:
        """A connection for one request, closed after it."""
        conn = self._connect()
        try:
            with fleet_unavailable_on_error(self.stores.describe_fleet()):
                conn.execute(f"SET statement_timeout = '{int(self.statement_timeout_s)}s'")
                yield conn
        except FleetDatabaseError as error:  # the connection was lost or a statement timed out
            raise self._fleet_down(_cause(str(error))) from error
        finally:
            conn.close()

    # -- the ledger -------------------------------------------------------------------------

    def _ledger_down(self, error: LedgerError) -> StoreUnavailableError:
        if self.stores.clickhouse_url:
            where = f"ClickHouse at {redact(self.stores.clickhouse_url)}"
            return StoreUnavailableError(
                "ledger",
                f"the ledger ({where}) is down ({_cause(str(error))}): check that it runs and "
                "that --clickhouse / SPOTCAP_CLICKHOUSE_URL names it",
            )
        path, _ = self.stores.ledger_location()
        if isinstance(error, LedgerFolderError):
            return StoreUnavailableError("ledger", str(error))
        return StoreUnavailableError(
            "ledger",
            f"the embedded ledger at {path} cannot be opened now, most likely because another "
            "process holds it (a `spotcap project`, `rebuild` or `demo`; one process at a time "
            "can): try again when that command has finished",
        )

    @contextmanager
    def ledger(self) -> Iterator[LedgerStore]:
        """The ledger for one use, closed after it (one use at a time in this process)."""
        with self._ledger_lock:
            try:
                store = self.stores.open_ledger()
            except LedgerError as error:
                raise self._ledger_down(error) from error
            try:
                yield store
            except LedgerError as error:
                raise self._ledger_down(error) from error
            finally:
                store.close()

    # -- the log ----------------------------------------------------------------------------

    def end_offsets(self, topic: str) -> Mapping[int, int] | None:
        """`{partition: end offset}` of `topic`; None if the log cannot say (no such topic,
        or Kafka not answering: the log seam does not tell the two apart)."""
        with self._log_lock:
            if self._log is None:
                self._log = self._open_log()
            return end_offsets_of(self._log)(topic)


def _cause(message: str) -> str:
    """The part of a store's error worth repeating inside another sentence: its first clause."""
    first = message.strip().splitlines()[0] if message.strip() else "no answer"
    return re.split(r"; |\. ", first)[0].rstrip(".")
