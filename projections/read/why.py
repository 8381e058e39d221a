"""`why`: for an instance, a workload or an event, the chain of causes in plain sentences,
oldest first, each with its time and event id (read from the fleet state's journal). For a
workload, with the ledger at hand, also each decision that launched capacity running beyond
what the workload's claims asked for, and what that surplus cost (the ledger's lines)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import dict_row

from projections.eventtime import iso
from projections.ledger.rule import SURPLUS
from projections.ledger.store import LedgerStore
from projections.money import eur_text
from projections.postgres.connection import Connection
from projections.read.rows import utc_text

Payload = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Step:
    at: datetime
    event_id: str
    event_type: str
    sentence: str


@dataclass(frozen=True, slots=True)
class Answer:
    kind: str  # "instance" | "workload" | "event"
    subject: str
    steps: list[Step]

    def as_json(self) -> dict[str, Any]:
        """The chain as `spotcap why --json` and the HTTP API give it."""
        return {
            "kind": self.kind,
            "subject": self.subject,
            "steps": [
                {"at": utc_text(s.at), "event_id": s.event_id, "event_type": s.event_type,
                 "sentence": s.sentence}
                for s in self.steps
            ],
        }  # fmt: skip


class NotFoundError(LookupError):
    """Nothing by that id in the fleet state; the message says what was looked for."""


def _wave(e: dict[str, Any]) -> str:
    corr = e.get("correlation_id")
    return f" (part of {corr})" if corr else ""


def _seconds(micros: int) -> str:
    return f"{micros / 1e6:,.0f} s"


def _launched(p: Payload, e: dict[str, Any]) -> str:
    return (f"{p['instance_id']} was launched in {p['pool_id']} ({p['vcpu']} {p['purchase_model']} "
            f"vCPU) for {p['workload_id']}")  # fmt: skip


def _advisory(p: Payload, e: dict[str, Any]) -> str:
    return (f"the provider advised that {p['instance_id']} in {p['pool_id']} may be reclaimed "
            f"at {iso(p['expected_reclaim_at'])}{_wave(e)}")  # fmt: skip


def _notice(p: Payload, e: dict[str, Any]) -> str:
    left = p["deadline_at"] - e["occurred_us"]
    return (f"a reclaim notice reached {p['instance_id']} through {p['source']}, "
            f"{_seconds(left)} before its deadline{_wave(e)}")  # fmt: skip


def _drain_started(p: Payload, e: dict[str, Any]) -> str:
    return (f"the agent started draining {p['instance_id']} through {p['path']} "
            f"(on the {p['trigger']}, budget {p['drain_budget_s']} s)")  # fmt: skip


def _drain_completed(p: Payload, e: dict[str, Any]) -> str:
    checks = "verified" if p["verified"] else "NOT verified"
    extra = ", over its budget" if p["overrun"] else ""
    local = ", after falling back to the local path" if p["fell_back_to_local"] else ""
    margin = p.get("deadline_margin_s")
    left = f", {margin:,.0f} s before the deadline" if margin is not None else ""
    return (f"the drain of {p['instance_id']} through {p['path']} finished in "
            f"{p['duration_s']:,.1f} s, {checks}{extra}{local}{left}")  # fmt: skip


def _checkpoint(p: Payload, e: dict[str, Any]) -> str:
    final = " (the final one, on the notice)" if p["final"] else ""
    return (f"{p['workload_id']} wrote checkpoint generation {p['generation']} from "
            f"{p['instance_id']} ({p['written_bytes'] / 1e9:,.2f} GB in {p['duration_s']:,.1f} s)"
            f"{final}")  # fmt: skip


def _lost(p: Payload, e: dict[str, Any]) -> str:
    notice = "after its notice" if p["with_notice"] else "without notice"
    return f"{p['instance_id']} was lost {notice} ({p['reason'].replace('_', ' ')}){_wave(e)}"


def _wasted(p: Payload, e: dict[str, Any]) -> str:
    hours = p["wasted_vcpu_s"] / 3600
    if hours == 0:
        return f"no work of {p['workload_id']} was lost with {p['instance_id']}"
    return (f"{hours:,.1f} vCPU-hours of {p['workload_id']}'s work on {p['instance_id']} were "
            "lost since its last checkpoint")  # fmt: skip


def _replacement(p: Payload, e: dict[str, Any]) -> str:
    if not p["vcpu"] and not p["allocations"]:
        why = (p.get("caps_reason") or "").removeprefix("not replaced: ")
        return f"{p['replaces_instance_id']} was not replaced: {why or 'nothing asked for it'}"
    avoid = p["excluded_pool_ids"]
    avoiding = f", avoiding {len(avoid)} excluded pools" if avoid else ""
    return (f"a replacement of {p['vcpu']} {p['purchase_model']} vCPU was requested for "
            f"{p['replaces_instance_id']}{avoiding}")  # fmt: skip


def _placement(p: Payload, e: dict[str, Any]) -> str:
    pools = len({a["pool_id"] for a in p["allocations"]})
    ranking = f", from ranking {p['ranking_id']}" if p.get("ranking_id") else ""
    unplaced = p.get("unplaced_vcpu", 0)
    if not pools:
        return (f"{p['workload_id']} asked for {p['requested_vcpu']:,} vCPU and none could be "
                f"placed: {unplaced:,} vCPU left to the fallback arbiter")  # fmt: skip
    left = f"; {unplaced:,} vCPU left to the fallback arbiter" if unplaced else ""
    return (f"{p['workload_id']} was placed: {p['requested_vcpu'] - unplaced:,} of "
            f"{p['requested_vcpu']:,} vCPU over {pools} pools (floor {p['floor_vcpu']:,} vCPU), "
            f"{eur_text(p['premium_per_h_eur_micros'])}/h over the price-first "
            f"plan{ranking}{left}")  # fmt: skip


def _name(value: str | None, missing: str) -> str:
    """A person's name, or what stands for it when there is none (never an empty name)."""
    return value.strip() if value and value.strip() else missing


def _fallback(p: Payload, e: dict[str, Any]) -> str:
    head = f"fallback moved {p['vcpu']:,} vCPU of {p['workload_id']} to guaranteed capacity"
    spend, cap = eur_text(p["spend_eur_micros"]), eur_text(p["cap_eur_micros"])
    reason = _micros_to_euros(p["reason"])
    if p["kind"] == "floor_restore":
        return f"{head} to restore its floor, without asking (ADR-23): {reason}"
    if p["kind"] == "within_cap":
        return f"{head} within its cap: {spend} spent today of {cap} ({reason})"
    who = _name(p["approver"], "")
    if p.get("awaiting_approval"):
        paged = f"the approver {who} was paged" if who else "nobody was paged (no approver named)"
        return (f"{p['vcpu']:,} vCPU of {p['workload_id']} would take today's fallback spend "
                f"beyond its cap of {cap}: {paged}, and nothing is spent until the approver "
                f"answers ({reason})")  # fmt: skip
    approved = f"as {who} approved" if who else "as approved"
    return f"{head} beyond its cap {approved}: {spend} spent today against {cap} ({reason})"


def _withheld(p: Payload, e: dict[str, Any]) -> str:
    owner = _name(p["owner"], "its owner")
    if p.get("refused_approver") is not None:
        return (f"an approval of fallback for {p['workload_id']} by "
                f"{_name(p['refused_approver'], 'someone unnamed')} was refused: "
                f"{_micros_to_euros(p['reason'])}")  # fmt: skip
    cap = eur_text(p["cap_eur_micros"])
    would = p["would_cost_eur_micros"]
    # Nothing to price: no guaranteed pool of the work's families had room for it.
    beyond = (f"guaranteed capacity would cost {eur_text(would)} beyond its cap of {cap} a day"
              if would else f"no guaranteed capacity it can run on has room, its cap is {cap} "
              "a day")  # fmt: skip
    return (
        f"{p['vcpu']:,} vCPU of {p['workload_id']} wait on reclaimable capacity: {beyond} and "
        f"its contract names no approver, so nothing is spent and {owner} is told"
    )


def _review(p: Payload, e: dict[str, Any]) -> str:
    return (f"{_name(p['approver'], 'someone unnamed')} {p['outcome']} {p['vcpu']:,} vCPU and "
            f"{eur_text(p['approved_spend_eur_micros'])} of fallback for "
            f"{p['workload_id']}")  # fmt: skip


_MICROS = re.compile(r"(-?\d+) micro-EUR")


def _micros_to_euros(text: str) -> str:
    """A reason recorded before decisions spoke euros: its micro-euros in euros."""
    return _MICROS.sub(lambda m: eur_text(int(m.group(1))), text)


def _returned(p: Payload, e: dict[str, Any]) -> str:
    return (f"{p['vcpu']:,} vCPU of {p['workload_id']} returned to reclaimable capacity after "
            f"{p['dwell_s']:,} s on guaranteed")  # fmt: skip


def _excluded(p: Payload, e: dict[str, Any]) -> str:
    return (f"{p['pool_id']} was excluded ({p['reason']}): {p['reclaimed_instances']} reclaims, "
            f"{p['observed_interruption_per_h']:.3f}/h observed against "
            f"{p['expected_interruption_per_h']:.3f}/h expected, on "
            f"{len(p['evidence_event_ids'])} evidence events")  # fmt: skip


def _readmitted(p: Payload, e: dict[str, Any]) -> str:
    return f"{p['pool_id']} was readmitted after {p['healthy_s']:,} s of health"


def _contract(p: Payload, e: dict[str, Any]) -> str:
    who = _name(p["approver"], "")
    approver = f"approver {who}" if who else "no approver, so nothing beyond the cap is spent"
    return (f"{p['workload_id']} published contract v{p['contract_version']} ({p['tier']}, "
            f"floor {p['floor_vcpu']:,} of {p['target_vcpu']:,} vCPU, drain budget "
            f"{p['drain_budget_s']} s, fallback cap {eur_text(p['spend_cap_eur_micros'])} a day, "
            f"{approver})")  # fmt: skip


def _deleted(p: Payload, e: dict[str, Any]) -> str:
    return (
        f"{p['instance_id']} was deleted by the {p['deleted_by']} ({p['principal']}): {p['reason']}"
    )


def _contract_refused(p: Payload, e: dict[str, Any]) -> str:
    stays = (f"version {p['in_force_version']} stays" if p.get("in_force_version") is not None
             else "no version is in force")  # fmt: skip
    signers = ", ".join(p["signers"]) or "nobody"
    return (f"version {p['contract_version']} of the contract of {p['workload_id']} was "
            f"refused, {stays} (signed by {signers}): {p['reason']}")  # fmt: skip


def _claim_opened(p: Payload, e: dict[str, Any]) -> str:
    return (f"{p['workload_id']} asked {p['scheduler']} cluster {p['cluster']} for "
            f"{p['requested_vcpu']:,} vCPU ({p['reason']})")  # fmt: skip


def _claim_closed(p: Payload, e: dict[str, Any]) -> str:
    return (f"the claim of {p['workload_id']} for {p['requested_vcpu']:,} vCPU ended "
            f"{p['outcome']} with {p['fulfilled_vcpu']:,} vCPU ({p['reason']})")  # fmt: skip


SENTENCES: dict[str, Callable[[Payload, dict[str, Any]], str]] = {
    "instance_launched": _launched,
    "advisory": _advisory,
    "notice_received": _notice,
    "drain_started": _drain_started,
    "drain_completed": _drain_completed,
    "checkpoint_written": _checkpoint,
    "instance_lost": _lost,
    "work_wasted": _wasted,
    "replacement_requested": _replacement,
    "placement_decided": _placement,
    "fallback_decided": _fallback,
    "fallback_withheld": _withheld,
    "fallback_reviewed": _review,
    "fallback_returned": _returned,
    "pool_excluded": _excluded,
    "pool_readmitted": _readmitted,
    "contract_published": _contract,
    "contract_refused": _contract_refused,
    "instance_deleted": _deleted,
    "capacity_claim_opened": _claim_opened,
    "capacity_claim_closed": _claim_closed,
}


def sentence(e: dict[str, Any]) -> str:
    payload = e["payload"] if isinstance(e["payload"], dict) else json.loads(e["payload"])
    make = SENTENCES.get(e["event_type"])
    if make is None:
        return f"{e['event_type'].replace('_', ' ')} ({e['key']})"
    return make(payload, e)


_COLUMNS = (
    "event_id::text AS event_id, event_type, occurred_at, key, causation_id::text AS causation_id,"
    " correlation_id, payload,"
    " (extract(epoch FROM occurred_at) * 1000000)::bigint AS occurred_us"
)


def _fetch(conn: Connection, where: str, params: Iterable[Any]) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return list(cur.execute(f"SELECT {_COLUMNS} FROM events WHERE {where}", list(params)))


def _ancestors(conn: Connection, event_ids: list[str], limit: int = 50) -> list[dict[str, Any]]:
    """The causes of `event_ids`, transitively (bounded)."""
    if not event_ids:
        return []
    query = (
        "WITH RECURSIVE up(event_id, depth) AS ("
        " SELECT causation_id, 1 FROM events WHERE event_id = ANY(%s::uuid[])"
        " AND causation_id IS NOT NULL"
        " UNION SELECT e.causation_id, up.depth + 1 FROM events e"
        " JOIN up ON e.event_id = up.event_id"
        " WHERE e.causation_id IS NOT NULL AND up.depth < %s)"
        f" SELECT {_COLUMNS} FROM events WHERE event_id IN (SELECT event_id FROM up)"
    )
    with conn.cursor(row_factory=dict_row) as cur:
        return list(cur.execute(query, [event_ids, limit]))


def _steps(rows: Iterable[dict[str, Any]]) -> list[Step]:
    seen: dict[str, dict[str, Any]] = {}
    for row in rows:
        seen.setdefault(row["event_id"], row)
    ordered = sorted(seen.values(), key=lambda r: (r["occurred_at"], r["event_id"]))
    return [Step(r["occurred_at"], r["event_id"], r["event_type"], sentence(r)) for r in ordered]


def why_instance(conn: Connection, instance_id: str) -> Answer:
    own = _fetch(
        conn,
        "event_id IN (SELECT event_id FROM instance_events WHERE instance_id = %s)",
        [instance_id],
    )
    if not own:
        raise NotFoundError(f"no instance {instance_id!r} in the fleet state")
    # What caused its launch (a placement, a replacement and the notice behind it), and what its
    # replacement became (the instance launched for it).
    causes = _ancestors(
        conn, [r["event_id"] for r in own if r["event_type"] == "instance_launched"]
    )
    replacements = [r["event_id"] for r in own if r["event_type"] == "replacement_requested"]
    successors = _fetch(
        conn, "causation_id = ANY(%s::uuid[]) AND event_type = 'instance_launched'", [replacements]
    )
    return Answer("instance", instance_id, _steps([*causes, *own, *successors]))


def why_workload(
    conn: Connection, workload_id: str, limit: int = 200, ledger: LedgerStore | None = None
) -> Answer:
    rows = _fetch(
        conn,
        "key = %s AND event_type IN ('contract_published', 'contract_refused',"
        " 'placement_decided',"
        " 'fallback_decided', 'fallback_reviewed', 'fallback_returned', 'fallback_withheld',"
        " 'replacement_requested')"
        " ORDER BY occurred_at DESC LIMIT %s",
        [workload_id, limit],
    )
    if not rows:
        raise NotFoundError(f"no workload {workload_id!r} in the fleet state")
    steps = _steps(rows)
    if ledger is not None:
        steps = sorted([*steps, *_surplus(conn, ledger, workload_id)],
                       key=lambda s: (s.at, s.event_id))  # fmt: skip
    return Answer("workload", workload_id, steps)


def _surplus(conn: Connection, ledger: LedgerStore, workload_id: str, top: int = 10) -> list[Step]:
    """The decisions whose launches ran most beyond what the workload's claims asked for."""
    rows = ledger.query(
        "SELECT decided_by, sum(quantity) AS q, sum(amount_eur_micros) AS a FROM ledger_lines"
        f" FINAL WHERE workload_id = {{w:String}} AND cause = '{SURPLUS}' AND decided_by != ''"
        " GROUP BY decided_by ORDER BY a DESC, decided_by LIMIT {n:UInt32}",
        {"w": workload_id, "n": top},
    )
    by_id = {str(r["decided_by"]): r for r in rows}
    if not by_id:
        return []
    decisions = _fetch(conn, "event_id = ANY(%s::uuid[])", [list(by_id)])
    out = []
    for d in decisions:
        r = by_id[d["event_id"]]
        what = _DECISION.get(d["event_type"], d["event_type"].replace("_", " "))
        sentence = (
            f"this {what} launched capacity that ran {float(r['q']):,.1f} vCPU-hours beyond what "
            f"{workload_id}'s open claims asked for: {eur_text(int(r['a']))} of surplus"
        )
        out.append(Step(d["occurred_at"], d["event_id"], "surplus", sentence))
    return out


_DECISION = {
    "placement_decided": "placement",
    "replacement_requested": "replacement",
    "fallback_decided": "fallback",
}


def why_event(conn: Connection, event_id: str) -> Answer:
    rows = _fetch(conn, "event_id = %s::uuid", [event_id])
    if not rows:
        raise NotFoundError(f"no event {event_id} in the fleet state's journal")
    causes = _ancestors(conn, [event_id])
    effects = _fetch(conn, "causation_id = %s::uuid", [event_id])
    return Answer("event", event_id, _steps([*causes, *rows, *effects]))


def why(conn: Connection, ident: str, ledger: LedgerStore | None = None) -> Answer:
    """The chain for an event id, an instance id or a workload id (tried in that order); with
    the `ledger`, a workload's chain names the decisions behind its surplus."""
    try:
        uuid.UUID(ident)
    except ValueError:
        pass
    else:
        try:
            return why_event(conn, ident)
        except NotFoundError:
            pass
    known = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM instances WHERE instance_id = %s)", (ident,)
    ).fetchone()
    if known and known[0]:
        return why_instance(conn, ident)
    try:
        return why_workload(conn, ident, ledger=ledger)  # with or without a published contract
    except NotFoundError:
        pass
    raise nothing_called(ident)


def nothing_called(ident: str) -> NotFoundError:
    """What `why` answers when `ident` names nothing (also to whom it names nothing of theirs)."""
    return NotFoundError(
        f"nothing called {ident!r} in the fleet state: give an event id, an instance id or a "
        "workload id (see `spotcap query instances` and `spotcap query workloads`)"
    )
