"""The outbox relay as a service: what `spotcap run relay` runs (ADR-25).

Every `interval_s` it ships the fleet state's unsent capacity actions to ``<region>.audit``
through `postgres.outbox.OutboxRelay` (rounds of `batch_size`, each marked sent only once the
log acknowledged it) until none is pending. The log's producer is opened for a burst that has
something to send and closed after it: on the embedded log a producer holds the one writer
lock, and between bursts other commands can write. When the log cannot take the records (the
lock is held elsewhere, a broker is down) the burst is tried again at the next interval, the
actions still unsent. With `once`, it ships what is pending and returns.
"""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import dataclass

import psycopg

from projections.postgres.connection import Connection
from projections.postgres.outbox import OutboxRelay
from streams.deadletter import OnDemandProducer
from streams.log import EventLog, LogError
from streams.topics import region_topics, topic_name

log = logging.getLogger(__name__)

INTERVAL_S = 1.0
BATCH_SIZE = 500


@dataclass(frozen=True, slots=True)
class RelayReport:
    sent: int
    pending: int
    """Actions left unsent when the relay stopped."""


class RelayError(RuntimeError):
    """The relay cannot go on; the message says why (never a secret)."""


def run_relay(
    event_log: EventLog,
    conn: Connection,
    region: str,
    stop: threading.Event,
    *,
    once: bool = False,
    interval_s: float = INTERVAL_S,
    batch_size: int = BATCH_SIZE,
) -> RelayReport:
    """Relay the outbox of `conn` to the region's audit topic until `stop` is set (with
    `once`: until nothing is pending)."""
    topic = topic_name(region, "audit")
    event_log.apply_topics([spec for spec in region_topics(region) if spec.name == topic])
    sent = 0
    try:
        while not stop.is_set():
            try:
                shipped, pending = _burst(event_log, conn, topic, stop, batch_size)
            except LogError as error:
                if once:
                    raise RelayError(f"the audit topic {topic} did not take the actions: "
                                     f"{error}") from error  # fmt: skip
                log.warning("relay: %s; trying again in %.1f s", error, interval_s)
                stop.wait(interval_s)
                continue
            sent += shipped
            if shipped:
                log.info("relay: %d actions sent to %s, %d pending", shipped, topic, pending)
            if once and (pending == 0 or shipped == 0):
                break
            if pending == 0 or shipped == 0:
                stop.wait(interval_s)
        left = _pending(conn)
    except psycopg.Error as error:
        raise RelayError(f"the fleet-state database stopped answering: {error}") from error
    return RelayReport(sent, left)


def _burst(
    event_log: EventLog, conn: Connection, topic: str, stop: threading.Event, batch_size: int
) -> tuple[int, int]:
    """Rounds until nothing is pending (or a stop); (actions sent, actions still pending)."""
    sink = OnDemandProducer(event_log)  # opened at the first action of the burst
    relay = OutboxRelay(conn, sink, topic, batch_size=batch_size)
    shipped, pending = 0, -1
    try:
        while not stop.is_set():
            round_ = relay.relay_once()
            shipped += round_.sent
            pending = round_.pending
            if round_.sent == 0 or round_.pending == 0:
                break
    finally:
        sink.close()
        event_log.close()  # the embedded log's writer lock, taken by the sink, goes with it
    return shipped, pending if pending >= 0 else _pending(conn)


def _pending(conn: Connection) -> int:
    row = conn.execute("SELECT count(*) FROM outbox WHERE sent_at IS NULL").fetchone()
    return int(row[0]) if row else 0


def serve(
    event_log: EventLog,
    conn: Connection,
    region: str,
    *,
    once: bool = False,
    interval_s: float = INTERVAL_S,
    batch_size: int = BATCH_SIZE,
) -> RelayReport:
    """`run_relay` until SIGTERM or SIGINT (call it from the main thread); logs to stderr."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return run_relay(event_log, conn, region, stop, once=once, interval_s=interval_s,
                     batch_size=batch_size)  # fmt: skip
