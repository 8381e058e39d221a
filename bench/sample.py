"""Deterministic sample events of every type, for benchmarks (seeded; no hypothesis)."""

from __future__ import annotations

import random
import string
import uuid
from collections.abc import Mapping
from functools import cache
from typing import Any

from schemas.catalogue import envelope_schema, event_types
from schemas.events import EVENT_CLASSES, Envelope

T0_US = 1_796_000_000_000_000


def _value(schema: Any, rng: random.Random, name: str) -> Any:
    if isinstance(schema, list):  # a union: mostly the non-null branch
        branches = [b for b in schema if b != "null"]
        return None if not branches or rng.random() < 0.2 else _value(branches[0], rng, name)
    if isinstance(schema, str):
        named = _named_types().get(schema)  # a record or enum defined once, used by name
        return _primitive(schema, rng, name) if named is None else _value(named, rng, name)
    kind = schema["type"]
    if kind == "record":
        return {f["name"]: _value(f["type"], rng, f["name"]) for f in schema["fields"]}
    if kind == "enum":
        return rng.choice(schema["symbols"])
    if kind == "array":
        return [_value(schema["items"], rng, name) for _ in range(rng.randint(1, 8))]
    if kind == "map":
        return {f"k{i}": _value(schema["values"], rng, name) for i in range(rng.randint(1, 4))}
    if schema.get("logicalType") == "uuid":
        return str(uuid.UUID(int=rng.getrandbits(128)))
    if schema.get("logicalType", "").startswith("timestamp"):
        return T0_US + rng.randint(0, 86_400_000_000)
    return _primitive(kind, rng, name)


@cache
def _named_types() -> dict[str, Any]:
    """Every named type of the envelope schema by its full name (and its short name)."""
    found: dict[str, Any] = {}

    def walk(node: Any, namespace: str) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item, namespace)
        elif isinstance(node, dict):
            if node.get("type") in ("record", "enum", "fixed") and "name" in node:
                full = (
                    node["name"]
                    if "." in node["name"]
                    else f"{node.get('namespace', namespace)}.{node['name']}"
                )
                namespace = full.rpartition(".")[0]
                found.setdefault(full, node)
                found.setdefault(full.rpartition(".")[2], node)
            for value in node.values():
                walk(value, namespace)

    walk(envelope_schema(), "")
    return found


def _primitive(kind: str, rng: random.Random, name: str) -> Any:
    if kind in ("long", "int"):
        return rng.randint(0, 10_000_000 if kind == "long" else 100_000)
    if kind in ("double", "float"):
        return rng.random() * 1000
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "bytes":
        return rng.randbytes(rng.randint(16, 256))
    if kind == "string":
        if name.endswith("_id"):
            return f"{name[:-3]}-{rng.randint(0, 99_999):05d}"
        return "".join(rng.choices(string.ascii_lowercase, k=rng.randint(4, 24)))
    raise ValueError(f"unexpected Avro type {kind}")


def sample_envelopes(count: int, seed: int = 1) -> list[Envelope]:
    """`count` envelopes cycling over every event type, reproducible from `seed`."""
    rng = random.Random(seed)
    types = event_types()
    out = []
    for i in range(count):
        kind = types[i % len(types)]
        body: Mapping[str, Any] = _value(dict(kind.schema), rng, kind.name)
        occurred = T0_US + i * 1000
        out.append(
            Envelope(
                event_id=str(uuid.UUID(int=rng.getrandbits(128))),
                event_type=kind.name,
                occurred_at=occurred,
                recorded_at=occurred + 500,
                region="bench",
                key=f"i-{i % 5000:05d}",
                causation_id=None if i % 3 else str(uuid.UUID(int=rng.getrandbits(128))),
                correlation_id=None if i % 5 else f"wave-{i % 11}",
                producer="bench",
                payload=EVENT_CLASSES[kind.name].from_avro(body),
            )
        )
    return out
