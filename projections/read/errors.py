"""What a read does when the fleet-state database goes away in the middle of it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from projections.postgres.connection import FleetUnavailableError


@contextmanager
def fleet_unavailable_on_error(where: str) -> Iterator[None]:
    """Turn a lost connection, a server shutting down or a statement over its time limit into
    `FleetUnavailableError` naming `where` (the database, for the message)."""
    try:
        yield
    except (psycopg.OperationalError, psycopg.InterfaceError) as error:
        text = str(error).strip()
        first = text.splitlines()[0] if text else type(error).__name__
        message = f"the fleet-state database at {where} failed: {first}"
        raise FleetUnavailableError(message) from error
