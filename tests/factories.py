"""Small builders of real events for tests."""

from __future__ import annotations

import json
from typing import Any

from schemas import events
from schemas.catalogue import envelope_schema, event_type, full_name, non_null, python_fields
from schemas.events import Envelope, NoticeReceived, Payload, RateCard
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


def _example_value(
    type_: Any, name: str, seed: int, named: dict[str, Any], namespace: str | None = None
) -> Any:
    """A deterministic value of Avro type `type_` for the field `name` (named types are
    registered in `named` where the schema defines them, and looked up where it names them)."""
    if isinstance(type_, str):
        if type_ in named:
            return _example_value(named[type_], name, seed, named, namespace)
        primitives: dict[str, Any] = {
            "boolean": seed % 2 == 0,
            "int": 7 + seed,
            "long": T0_US + seed if name.endswith("_at") else 1_000 + seed,
            "float": 0.5 + seed,
            "double": 0.25 + seed,
            "bytes": f"{name}-{seed}".encode(),
            "string": f"{name}-{seed}",
        }
        return primitives[type_]
    if isinstance(type_, list):
        return _example_value(non_null(type_), name, seed, named, namespace)
    kind = type_["type"]
    if type_.get("logicalType") == "uuid":
        return derived_event_id(f"factories/{name}/{seed}", "example")
    if kind == "array":
        items = type_["items"]
        return tuple(_example_value(items, name, seed + i, named, namespace) for i in range(2))
    if kind == "map":
        values = type_["values"]
        return {f"{name}-{k}": _example_value(values, name, seed + k, named) for k in range(2)}
    if kind == "enum":
        named[full_name(type_, namespace)] = type_
        symbols: list[str] = type_["symbols"]
        return symbols[seed % len(symbols)]
    if kind == "record":
        record_name = full_name(type_, namespace)
        named[record_name] = type_
        inner_ns = record_name.rpartition(".")[0]
        cls = getattr(events, record_name.rpartition(".")[2])
        return cls(
            **{
                fd["name"]: _example_value(fd["type"], fd["name"], seed, named, inner_ns)
                for fd in python_fields(type_)
            }
        )
    return _example_value(kind, name, seed, named, namespace)


def example_payload(name: str, seed: int = 0) -> Payload:
    """A payload of event type `name` with every field filled (optional ones too; arrays and
    maps with two entries); the same `seed` gives an equal payload."""
    payload: Payload = _example_value(dict(event_type(name).schema), name, seed, {})
    return payload


def example_envelope(name: str, seed: int = 0, region: str = "test") -> Envelope:
    """`example_payload(name, seed)` in an envelope keyed as its event type says."""
    payload = example_payload(name, seed)
    key = getattr(payload, payload.KEY, region)
    occurred_at = T0_US + seed * 1_000_000
    return Envelope(
        event_id=derived_event_id(f"test/{region}/{name}/{seed}", name),
        event_type=payload.EVENT_TYPE,
        occurred_at=occurred_at,
        recorded_at=occurred_at + 1_000,
        region=region,
        key=key if isinstance(key, str) else region,
        causation_id=None,
        correlation_id=f"corr-{seed}",
        producer="tests",
        payload=payload,
    )


def rate_card(region: str, pool: int, seq: int = 0, at_us: int | None = None) -> Envelope:
    """A rate card for pool `pool` (a market event), at `at_us` or the `seq`-th second."""
    pool_id = f"pool-{pool:03d}"
    occurred_at = T0_US + seq * 1_000_000 if at_us is None else at_us
    return Envelope(
        event_id=derived_event_id(f"test/{region}/{pool_id}/{seq}/{occurred_at}", "rate_card"),
        event_type="rate_card",
        occurred_at=occurred_at,
        recorded_at=occurred_at + 1_000,
        region=region,
        key=pool_id,
        causation_id=None,
        correlation_id=None,
        producer="tests",
        payload=RateCard(
            pool_id=pool_id,
            purchase_model="reclaimable",
            price_per_vcpu_h_eur_micros=10_000 + seq,
            guaranteed_price_per_vcpu_h_eur_micros=40_000,
            valid_from_at=occurred_at,
            valid_until_at=occurred_at + 300_000_000,
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
