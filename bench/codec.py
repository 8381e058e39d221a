"""Codec throughput, events/s on one core: the spotcap codec against fastavro alone doing the
same work on the same events (a mix of every event type), and the ratio.

    .venv/bin/python bench/codec.py [--events N] [--rounds 5]

The bare reference (`bench/log_bare.py`'s helpers: fastavro and the standard library, no module
of spotcap's) starts and ends where the codec does, at typed envelopes (its own, made from the
schema; the same events): encode is `to_record` of the envelope, the single-object header and
fastavro's `schemaless_writer` with the envelope schema parsed once; decode is fastavro's
`schemaless_reader` of the body after the header (the same parsed schema, no resolution)
and `from_record` to a typed envelope. The codec does the same, and besides checks the
framing, looks the writer schema up by fingerprint and checks the event type against the
payload. Each round times both sides on every event, the side run first alternating; the
figures are the best round of each (CPU seconds of this process), the ratio the median of
the rounds' own ratios with its range. For scale: fastavro with the schema parsed per event
(what a caller that does not keep the parsed schema pays), and the size of the same events
as JSON.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fastavro

from bench import log_bare
from bench.sample import sample_envelopes
from schemas.catalogue import envelope_schema
from schemas.codec import Codec


def _cpu_s(work: Callable[[], object]) -> float:
    start = time.process_time()
    work()
    return time.process_time() - start


def _pair(
    label: str,
    count: int,
    project: Callable[[], object],
    bare: Callable[[], object],
    rounds: int,
) -> None:
    """Both sides `rounds` times, alternating which runs first; prints rates and ratios."""
    times: dict[str, list[float]] = {"project": [], "bare": []}
    for r in range(rounds):
        order = (("project", project), ("bare", bare))
        for side, work in order if r % 2 == 0 else reversed(order):
            times[side].append(_cpu_s(work))
    ratios = [b / p for p, b in zip(times["project"], times["bare"], strict=True)]
    best_p, best_b = min(times["project"]), min(times["bare"])
    print(
        f"  {label:<32} spotcap {count / best_p:>9,.0f}/s ({best_p * 1e6 / count:5.2f} µs)   "
        f"fastavro alone {count / best_b:>9,.0f}/s ({best_b * 1e6 / count:5.2f} µs)   "
        f"ratio {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
    )


def _once(label: str, count: int, work: Callable[[], object]) -> None:
    best = min(_cpu_s(work) for _ in range(3))
    print(f"  {label:<32} {count / best:>9,.0f}/s ({best * 1e6 / count:6.2f} µs)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    events = sample_envelopes(args.events)
    # The bare side's own envelopes of the same events (`bench/log_bare.py`), made untimed.
    plain = [log_bare.from_record(e.to_avro()) for e in events]
    codec = Codec()
    encoded = [codec.encode(e) for e in events]
    size = sum(len(b) for b in encoded) / len(encoded)
    print(
        f"{args.events} events of {len({e.event_type for e in events})} types, "
        f"mean {size:.0f} bytes encoded (single-object encoding); {args.rounds} rounds, "
        "CPU time, the side run first alternating"
    )
    schema, framing = log_bare.parsed_schema(), log_bare.header()
    write, read = fastavro.schemaless_writer, fastavro.schemaless_reader
    to_record, from_record = log_bare.to_record, log_bare.from_record

    def bare_encode() -> list[bytes]:
        out = []
        for envelope in plain:
            buffer = io.BytesIO()
            buffer.write(framing)
            write(buffer, schema, to_record(envelope))
            out.append(buffer.getvalue())
        return out

    def bare_decode() -> list[log_bare.Envelope]:
        out = []
        for data in encoded:
            stream = io.BytesIO(data)
            stream.seek(len(framing))
            record: Any = read(stream, schema, None, return_record_name=True)
            out.append(from_record(record))
        return out

    assert bare_encode() == encoded, "the bare encoder writes the codec's bytes"
    assert bare_decode() == plain, "and reads the same events back"
    _pair(
        "encode (envelope to bytes)",
        len(events),
        lambda: [codec.encode(e) for e in events],
        bare_encode,
        args.rounds,
    )
    _pair(
        "decode (bytes to envelope)",
        len(events),
        lambda: [codec.decode(b) for b in encoded],
        bare_decode,
        args.rounds,
    )

    print("for scale: fastavro with the schema parsed per event")
    raw_schema = envelope_schema()
    few = plain[: max(200, len(plain) // 50)]

    def uncached_encode() -> None:
        for e in few:
            fastavro.schemaless_writer(
                io.BytesIO(), fastavro.parse_schema(raw_schema), to_record(e)
            )

    def uncached_decode() -> None:
        for b in encoded[: len(few)]:
            fastavro.schemaless_reader(io.BytesIO(b[10:]), fastavro.parse_schema(raw_schema), None)

    _once("encode", len(few), uncached_encode)
    _once("decode", len(few), uncached_decode)
    as_json = [json.dumps(_record_json(e)).encode() for e in plain]
    print(f"json size for comparison: mean {sum(map(len, as_json)) / len(as_json):.0f} bytes")


def _record_json(envelope: log_bare.Envelope) -> dict[str, Any]:
    record = log_bare.to_record(envelope)
    name, body = record["payload"]
    record["payload"] = {name: {k: v.hex() if isinstance(v, bytes) else v for k, v in body.items()}}
    return record


if __name__ == "__main__":
    main()
