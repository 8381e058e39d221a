"""The embedded shipper: an agent's spool into the event log, what Vector does in production.

It is the one module of the agent that imports the log (`streams.EventWriter`): the agent's own
modules (intake, drains, the spool) never do, so a node acts without it; the shipper runs beside
the agent (`spotcap agent run --ship`) or alone (`spotcap agent ship`). Semantics, as Vector's
file source to Kafka with acks=all:

- at least once: lines are written and the producer flushed (acknowledged) before the read
  position is saved (``shipped.json`` in the spool folder, written atomically and fsync'd); a
  crash in between ships those lines again, and consumers de-duplicate by ``event_id``;
- each line's Avro JSON form is read with the writer schema its fingerprint names (this build's
  or a released one) and resolved to the current one, as the codec does for any record;
- a line that cannot be read goes to the region's dead-letter topic with its reason and its
  place (``spool:<folder>/<segment>`` at the byte offset), and shipping goes on.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.spool import ShippedPosition, SpoolLine, read_lines, segment_name
from schemas.avro_json import AvroJsonError, AvroJsonForm
from schemas.codec import Codec, released_schemas, schema_fingerprint
from schemas.errors import CodecError
from schemas.events import Envelope
from streams.deadletter import DeadLetters
from streams.log import EventLog, Record
from streams.writer import EventWriter


class SpoolLineError(ValueError):
    """A spool line that cannot be turned into an event; says why."""


@dataclass(slots=True)
class ShipCounts:
    shipped: int = 0
    dead_lettered: int = 0
    batches: int = 0
    by_type: dict[str, int] = field(default_factory=dict)


class SpoolDecoder:
    """Spool lines back to envelopes, whichever known schema wrote them."""

    def __init__(self, codec: Codec) -> None:
        self._codec = codec
        self._forms: dict[int, AvroJsonForm] = {}
        for schema in (codec.schema, *released_schemas()):
            self._forms.setdefault(schema_fingerprint(schema), AvroJsonForm(schema))

    def envelope(self, record: dict[str, Any]) -> Envelope:
        try:
            fingerprint = int(str(record["fingerprint"]), 16)
            form = self._forms[fingerprint]
        except (KeyError, ValueError) as error:
            raise SpoolLineError(
                f"writer schema fingerprint {record.get('fingerprint')!r} is not one this build "
                "knows: upgrade spotcap or add the schema to schemas/released/"
            ) from error
        try:
            return self._codec.decode(form.single_object(record["event"]))
        except (KeyError, AvroJsonError, CodecError) as error:
            raise SpoolLineError(f"the event does not read as Avro JSON: {error}") from error


class SpoolShipper:
    """Ships one spool folder into `log`, region `region`."""

    def __init__(
        self, spool_dir: Path, log: EventLog, codec: Codec, region: str, batch: int = 500
    ) -> None:
        self.spool_dir = Path(spool_dir)
        self._writer = EventWriter(log, codec, region, flush_every=10**9)
        self._dead_producer = log.producer()
        self._dead = DeadLetters(self._dead_producer, codec, region, "spool-shipper")
        self._decoder = SpoolDecoder(codec)
        self._region = region
        self._batch = batch
        self.counts = ShipCounts()

    def ship_once(self) -> ShipCounts:
        """Ship every whole line written so far; returns the counts of this call."""
        before = (self.counts.shipped, self.counts.dead_lettered, self.counts.batches)
        position = ShippedPosition.load(self.spool_dir)
        pending: ShippedPosition | None = None
        in_batch = 0
        for line, inode in read_lines(self.spool_dir, position):
            self._ship_line(line)
            pending = ShippedPosition(line.segment, line.end_offset, inode)
            in_batch += 1
            if in_batch >= self._batch:
                self._commit(pending)
                in_batch, pending = 0, None
        if pending is not None:
            self._commit(pending)
        return ShipCounts(
            self.counts.shipped - before[0],
            self.counts.dead_lettered - before[1],
            self.counts.batches - before[2],
        )

    def close(self) -> None:
        self._writer.close()
        self._dead_producer.close()

    def _ship_line(self, line: SpoolLine) -> None:
        record = line.record
        try:
            envelope = self._decoder.envelope(record)
            if envelope.region != self._region:
                raise SpoolLineError(
                    f"event of region {envelope.region!r} in a spool shipped to {self._region!r}"
                )
        except SpoolLineError as error:
            raw = json.dumps(record, separators=(",", ":")).encode()
            self._dead.send(
                Record(
                    topic=f"spool:{self.spool_dir.name}/{segment_name(line.segment)}",
                    partition=0,
                    offset=line.end_offset,
                    key=str(record.get("key", "")).encode() or None,
                    value=raw,
                    timestamp_ms=time.time_ns() // 1_000_000,
                ),
                error,
            )
            self.counts.dead_lettered += 1
            return
        self._writer.write(envelope)
        self.counts.shipped += 1
        self.counts.by_type[envelope.event_type] = (
            self.counts.by_type.get(envelope.event_type, 0) + 1
        )

    def _commit(self, position: ShippedPosition) -> None:
        # Acknowledged first (acks=all on Kafka, fsync on the embedded log), position after.
        self._writer.flush()
        self._dead_producer.flush()
        position.save(self.spool_dir)
        self.counts.batches += 1


def ship_until(
    shipper: SpoolShipper, stop: threading.Event, interval_s: float = 1.0, retry_s: float = 5.0
) -> None:
    """Ship every `interval_s` until `stop` is set. A failure (the log away) is logged and tried
    again after `retry_s`: the spool keeps every line meanwhile."""
    while not stop.is_set():
        try:
            shipper.ship_once()
        except Exception:
            logging.getLogger(__name__).exception("shipping the spool failed; retrying in 5 s")
            stop.wait(retry_s)
        stop.wait(interval_s)


def ship_beside(
    spool_dir: Path, open_log: Callable[[], EventLog], codec: Codec, region: str
) -> Callable[[threading.Event], None]:
    """The embedded shipper as a thread's work beside the agent (`agent.service.run_until_stopped`):
    it opens the log, ships until its event is set, then closes the shipper and the log."""

    def ship(stop: threading.Event) -> None:
        log = open_log()
        shipper = SpoolShipper(spool_dir, log, codec, region)
        try:
            ship_until(shipper, stop)
        finally:
            shipper.close()
            log.close()

    return ship
