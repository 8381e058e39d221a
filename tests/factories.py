"""Small builders of real events for tests."""

from __future__ import annotations

import json
from typing import Any

from schemas.catalogue import envelope_schema
from schemas.events import Envelope, NoticeReceived
from schemas.ids import derived_event_id

T0_US = 1_796_000_000_000_000  # 2026-11-30, inside every retention window


def notice(region: str, instance: int, seq: int = 0) -> Envelope:
    """A notice for instance `instance`, the `seq`-th event about it (deterministic id)."""
    instance_id = f"i-{instance:05d}"
    occurred_at = T0_US + seq * 1_000_000
    return Envelope(
        event_id=derived_event_id(f"test/{region}/{instance_id}/{seq}", "notice_received"),
        event_type="notice_received",
        occurred_at=occurred_at,
        recorded_at=occurred_at + 1_000,
        region=region,
        key=instance_id,
        causation_id=None,
        correlation_id=f"wave-{seq % 3}",
        producer="tests",
        payload=NoticeReceived(
            instance_id=instance_id,
            pool_id=f"pool-{instance % 7}",
            workload_id=f"wl-{instance % 5}",
            deadline_at=occurred_at + 120_000_000,
            source="nats",
        ),
    )


def evolved_envelope_schema() -> dict[str, Any]:
    """The envelope as a newer release might have it: NoticeReceived with an extra optional
    field (a compatible change)."""
    schema: dict[str, Any] = json.loads(json.dumps(envelope_schema()))

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("name") == "NoticeReceived":
                node["fields"].append(
                    {"name": "hall", "type": ["null", "string"], "default": None, "doc": "Hall."}
                )
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(schema)
    return schema
