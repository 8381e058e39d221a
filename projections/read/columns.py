"""The read side's columns for people: for each query, the columns of its table (heading, row
key, how a value is written, right-aligned or not), with units and thousands separators
(`spotcap query`; `--json` gives the rows as they are)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC
from typing import Any

from projections.money import eur_text

Column = tuple[str, str, Callable[[Any], str], bool]  # label, key, format, right-aligned


def as_text(v: Any) -> str:
    return "" if v is None else str(v)


def as_int(v: Any) -> str:
    return "" if v is None else f"{v:,}"


def as_eur(v: Any) -> str:
    return "" if v is None else eur_text(int(v))


def as_time(v: Any) -> str:
    return "" if v is None else v.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def as_float(v: Any) -> str:
    return "" if v is None else f"{v:.4f}"


def as_yes(v: Any) -> str:
    return "" if v is None else ("yes" if v else "no")


PRICE: Column = ("€/vCPU-h", "price_per_vcpu_h_eur_micros",
                  lambda v: "" if v is None else f"€{v / 1e6:.4f}", True)  # fmt: skip
POOLS: Sequence[Column] = (
    ("rank", "rank", as_int, True), ("pool", "pool_id", as_text, False),
    ("hall", "hall", as_text, False), ("model", "purchase_model", as_text, False),
    ("score", "score", as_float, True), PRICE,
    ("forward vCPU", "forward_available_vcpu", as_int, True),
    ("capacity vCPU", "capacity_vcpu", as_int, True), ("excluded", "excluded", as_yes, False),
)  # fmt: skip
RANKINGS: Sequence[Column] = (
    ("at", "occurred_at", as_time, False), ("rank", "rank", as_int, True),
    ("pool", "pool_id", as_text, False), ("score", "score", as_float, True),
    ("available vCPU", "available_vcpu", as_int, True),
    ("interruptions/h", "observed_interruption_per_h", as_float, True),
    ("price", "price_per_vcpu_h_eur_micros", as_eur, True), ("inputs", "inputs", as_int, True),
)  # fmt: skip
EXCLUSIONS: Sequence[Column] = (
    ("excluded at", "excluded_at", as_time, False), ("pool", "pool_id", as_text, False),
    ("reason", "reason", as_text, False),
    ("observed/h", "observed_interruption_per_h", as_float, True),
    ("expected/h", "expected_interruption_per_h", as_float, True),
    ("reclaims", "reclaimed_instances", as_int, True),
    ("evidence", "evidence_event_ids", lambda v: f"{len(v or ()):,} events", True),
    ("readmitted at", "readmitted_at", as_time, False), ("event", "event_id", as_text, False),
)  # fmt: skip
INSTANCES: Sequence[Column] = (
    ("instance", "instance_id", as_text, False), ("state", "state", as_text, False),
    ("workload", "workload_id", as_text, False), ("pool", "pool_id", as_text, False),
    ("vCPU", "vcpu", as_int, True), ("launched", "launched_at", as_time, False),
    ("noticed", "noticed_at", as_time, False), ("drain", "drain_path", as_text, False),
    ("verified", "drain_verified", as_yes, False), ("lost", "lost_at", as_time, False),
)  # fmt: skip
WORKLOADS: Sequence[Column] = (
    ("workload", "workload_id", as_text, False), ("tier", "tier", as_text, False),
    ("owner", "owner", as_text, False), ("target vCPU", "target_vcpu", as_int, True),
    ("floor vCPU", "floor_vcpu", as_int, True), ("live vCPU", "live_vcpu", as_int, True),
    ("lost", "lost_instances", as_int, True), ("cap/day", "spend_cap_eur_micros", as_eur, True),
    ("approver", "approver", as_text, False),
)  # fmt: skip
LAG: Sequence[Column] = (
    ("projection", "projection", as_text, False), ("topic", "topic", as_text, False),
    ("partition", "partition", as_int, True), ("log end", "end_offset", as_int, True),
    ("applied up to", "next_offset", as_int, True), ("lag (records)", "lag", as_int, True),
)  # fmt: skip
