"""Connections to the fleet-state database: one schema holds every table of a deployment."""

from __future__ import annotations

import re
from typing import Any, TypeAlias

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

DEFAULT_SCHEMA = "spotcap"
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

Connection: TypeAlias = psycopg.Connection[tuple[Any, ...]]


class FleetDatabaseError(RuntimeError):
    """The fleet-state database cannot be used; the message says why and how to fix it."""


class FleetUnavailableError(FleetDatabaseError):
    """The database did not take a batch now (down, restarting, a statement over its time
    limit); nothing of the batch was written, and it may be offered again."""


def check_schema_name(schema: str) -> str:
    if not _SCHEMA_NAME.match(schema):
        raise FleetDatabaseError(
            f"schema name {schema!r} is not usable: use lower-case letters, digits and '_'"
        )
    return schema


KEEPALIVES: dict[str, int] = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
    "tcp_user_timeout": 60_000,
}
"""libpq's TCP settings unless the DSN sets its own: a server whose host went away (no RST, a
link that drops everything) ends the connection within about a minute, with an error the
follower exits on, instead of a read that waits forever (Linux's defaults: two hours of
silence before the first probe, and retransmissions for about fifteen minutes)."""


def connect(dsn: str, schema: str = DEFAULT_SCHEMA, *, connect_timeout_s: int = 10) -> Connection:
    """An autocommit connection whose search path is `schema` (work runs in explicit
    transactions: ``with conn.transaction(): ...``), with TCP keepalives (`KEEPALIVES`)."""
    check_schema_name(schema)
    try:
        given = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:  # its sentence may quote the string, password and all
        raise FleetDatabaseError(
            "--postgres / SPOTCAP_POSTGRES_DSN is not a PostgreSQL connection string: write it "
            "as postgresql://USER:PASSWORD@HOST:PORT/DATABASE or key=value pairs"
        ) from None
    tcp = {k: v for k, v in KEEPALIVES.items() if k not in given}
    try:
        conn = psycopg.connect(
            make_conninfo(dsn, **tcp), autocommit=True, connect_timeout=connect_timeout_s
        )
    except psycopg.OperationalError as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise FleetDatabaseError(
            f"cannot connect to PostgreSQL at {redact(dsn)}: {first}; check --postgres / "
            "SPOTCAP_POSTGRES_DSN, or leave both unset for the embedded server"
        ) from error
    conn.execute(f"SET search_path TO {schema}, public")
    return conn


def redact(dsn: str) -> str:
    """The DSN without its password, for messages."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", re.sub(r"password=\S+", "password=***", dsn))
