"""Codec throughput, events/s on one core: the spotcap codec against plain json and fastavro
without cached schemas, on the same events (a mix of every event type).

    .venv/bin/python bench/codec.py [--events N]
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fastavro

from bench.sample import sample_envelopes
from schemas.catalogue import envelope_schema
from schemas.codec import Codec
from schemas.events import Envelope


def _record(envelope: Envelope) -> dict[str, Any]:
    payload = envelope.payload
    return {
        **{f: getattr(envelope, f) for f in Envelope.HEAD},
        "payload": (payload.RECORD_NAME, payload.to_avro()),
    }


def _rate(label: str, count: int, work: Callable[[], object], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    rate = count / best
    print(f"  {label:<44} {rate:>11,.0f} events/s  ({best * 1e6 / count:6.2f} µs/event)")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=20_000)
    args = parser.parse_args()
    events = sample_envelopes(args.events)
    codec = Codec()
    encoded = [codec.encode(e) for e in events]
    size = sum(len(b) for b in encoded) / len(encoded)
    print(
        f"{args.events} events of {len({e.event_type for e in events})} types, "
        f"mean {size:.0f} bytes encoded (single-object encoding)"
    )

    print("encode")
    _rate(
        "spotcap codec (cached parse, no logical types)",
        len(events),
        lambda: [codec.encode(e) for e in events],
    )
    as_json = [json.dumps(_record_json(e)).encode() for e in events]
    _rate(
        "json.dumps of the same fields",
        len(events),
        lambda: [json.dumps(_record_json(e)).encode() for e in events],
    )
    raw_schema = envelope_schema()
    few = events[: max(200, len(events) // 50)]

    def uncached_encode() -> None:
        for e in few:
            fastavro.schemaless_writer(io.BytesIO(), fastavro.parse_schema(raw_schema), _record(e))

    _rate("fastavro, schema parsed per event", len(few), uncached_encode)

    print("decode")
    _rate(
        "spotcap codec (to typed envelopes)",
        len(events),
        lambda: [codec.decode(b) for b in encoded],
    )
    _rate(
        "json.loads of the same fields (to dicts)",
        len(events),
        lambda: [json.loads(b) for b in as_json],
    )

    def uncached_decode() -> None:
        for b in encoded[: len(few)]:
            fastavro.schemaless_reader(io.BytesIO(b[10:]), fastavro.parse_schema(raw_schema), None)

    _rate("fastavro, schema parsed per event", len(few), uncached_decode)
    print(f"json size for comparison: mean {sum(map(len, as_json)) / len(as_json):.0f} bytes")


def _record_json(envelope: Envelope) -> dict[str, Any]:
    record = _record(envelope)
    name, body = record["payload"]
    record["payload"] = {name: {k: v.hex() if isinstance(v, bytes) else v for k, v in body.items()}}
    return record


if __name__ == "__main__":
    main()
