"""The month's capacity actions for the archive (ADR-25): the audit topic's records, kept apart
from the telemetry, exported with the month as ``audit.jsonl``.

The outbox relay (`projections.relay`) puts one JSON record per capacity action on
``<region>.audit``, keyed by its action id, each naming the identity that caused it. A relay
that crashed before marking a batch sent sends it again with the same ids, so the archive keeps
each action once (the first record of its id), in the order of (occurred_at, action_id): one
canonical JSON line each. The month's file is append-only by construction: it is written once,
under Object Lock, and its SHA-256 is in the signed manifest.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from replay.archive.storage import ArchiveError
from streams.log import EventLog, UnknownTopicError
from streams.topics import topic_name

READ_TIMEOUT_S = 300.0


def month_of(record: dict[str, Any]) -> str:
    """``YYYY-MM`` of the record's ``occurred_at`` (ISO 8601, UTC)."""
    at = datetime.fromisoformat(str(record["occurred_at"]).replace("Z", "+00:00"))
    return f"{at.year:04d}-{at.month:02d}"


def audit_lines(records: Iterable[dict[str, Any]], month: str) -> bytes:
    """The month's records, once per action id, ordered, one canonical JSON line each."""
    kept: dict[str, dict[str, Any]] = {}
    for record in records:
        if month_of(record) == month:
            kept.setdefault(str(record["action_id"]), record)
    ordered = sorted(kept.values(), key=lambda r: (str(r["occurred_at"]), str(r["action_id"])))
    return b"".join(
        json.dumps(r, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"
        for r in ordered
    )


def read_audit(
    log: EventLog, region: str, timeout_s: float = READ_TIMEOUT_S
) -> list[dict[str, Any]]:
    """Every record on the region's audit topic, to the end it had when the call began (none
    when the topic does not exist: nothing was relayed)."""
    topic = topic_name(region, "audit")
    try:
        ends = log.end_offsets(topic)
    except UnknownTopicError:
        return []
    if not any(ends.values()):
        return []
    consumer = log.consumer(f"spotcap-archive-audit-{uuid.uuid4().hex[:12]}", [topic])
    positions = dict.fromkeys(ends, 0)
    found: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while any(positions[p] < end for p, end in ends.items()):
            left = deadline - time.monotonic()
            if left <= 0:
                raise ArchiveError(
                    f"the audit topic {topic} was read to {sum(positions.values()):,} of "
                    f"{sum(ends.values()):,} records in {timeout_s:g} s; is the log reachable?"
                )
            for record in consumer.poll(max_records=5000, timeout_s=min(1.0, left)):
                positions[record.partition] = max(positions[record.partition], record.offset + 1)
                if record.value:
                    found.append(json.loads(record.value))
    finally:
        consumer.close()
    return found
