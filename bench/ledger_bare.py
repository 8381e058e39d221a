"""The ledger's pricing written plainly over fastavro's dicts, for the bare loop of
`bench/projections.py`: the recorded rule's lines, what was priced (`priced_facts`) and what
was refused (`late_facts`), with none of the ledger's modules (the rule's figures are copied
here as constants).

What it does as the ledger does (`projections/ledger/pricer.py`, `pricing.py`, `rates.py`,
`demand.py`): rate cards as a step function per pool (integrals of price and guaranteed
price from a prefix sum), usage cut by what the workload's open claims asked for (oldest
launch first) and by UTC day, waste at the card in force, checkpoints, the reservations'
idle floor by the hour, cards and reservations past the allowed lateness refused, late cards
and late demand facts re-pricing what they touch into correction lines. What it leaves out,
as a bench from an empty ledger over one or two days needs none of it: the store (nothing is
read back; everything priced is held), the horizons (nothing is forgotten), and copies of an
event are left out by id (the ledger looks for them within an hour of event time).
"""

from __future__ import annotations

import bisect
import uuid
from hashlib import sha1
from itertools import pairwise
from typing import Any

HOUR_US = 3_600_000_000
DAY_US = 86_400_000_000
NEVER = 1 << 62
LAST = (1 << 62, "\uffff")
RULE = "recorded"
SPEND = {"reclaimable": "reclaimable_spend", "committed": "floor_spend",
         "guaranteed": "fallback_spend"}  # fmt: skip
AGENT_MILLI, CONTROL_PLANE, Q_H, Q_S = 20, 200, 1_000_000, 1_000
CKPT_MICROS, CKPT_DAYS, ALLOWED_S = 20_000, 7, 3600
PLATFORM = "(platform)"
NO_DEMAND: dict[str, Any] = {"claims": {}, "instances": {}}
FACTS = {"rate_card", "usage_interval", "work_wasted", "checkpoint_written",
         "instance_launched", "instance_lost", "instance_deleted", "capacity_claim_opened",
         "capacity_released", "reservation_committed"}  # fmt: skip
_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "urn:spotcap:events").bytes

Line = tuple[Any, ...]  # a `ledger_lines` row but its batch
# A priced item: [event dict, pool, from_us, to_us, pieces, decided_by, (topic, partition, offset)]
Item = list[Any]


def line_id(cause: str, event_type: str, discriminator: str) -> str:
    """uuid5 of the events' namespace (the id of an hour of a reservation's idle floor)."""
    digest = bytearray(sha1(_NAMESPACE + f"{cause}/{event_type}/{discriminator}".encode()).digest())
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    return str(uuid.UUID(bytes=bytes(digest[:16])))


def half_even(n: int, d: int) -> int:
    q, r = divmod(n, d)
    return q + 1 if 2 * r > d or (2 * r == d and q % 2 == 1) else q


class Book:
    """Per pool: the cards sorted, their starts and the integrals up to each start."""

    def __init__(self) -> None:
        self.cards: dict[str, list[tuple[Any, ...]]] = {}
        self.cum: dict[str, list[tuple[int, int]]] = {}

    def _sums(self, pool: str) -> None:
        cards, cum = self.cards[pool], [(0, 0)]
        for p, c in pairwise(cards):
            d = c[0] - p[0]
            cum.append((cum[-1][0] + d * p[4], cum[-1][1] + d * p[5]))
        self.cum[pool] = cum

    def add(self, pool: str, row: tuple[Any, ...]) -> None:
        cards = self.cards.setdefault(pool, [])
        if cards and row < cards[-1]:
            bisect.insort(cards, row)
            self._sums(pool)
            return
        cards.append(row)
        if len(cards) == 1:
            self.cum[pool] = [(0, 0)]
        else:
            p, (a, b) = cards[-2], self.cum[pool][-1]
            d = row[0] - p[0]
            self.cum[pool].append((a + d * p[4], b + d * p[5]))

    def remove(self, pool: str, row: tuple[Any, ...]) -> None:
        self.cards[pool].remove(row)
        self._sums(pool)

    def integral(self, pool: str, at: int) -> tuple[int, int]:
        cards = self.cards[pool]
        i = max(bisect.bisect_right(cards, (at, *LAST)) - 1, 0)
        c, (a, b) = cards[i], self.cum[pool][i]
        return a + (at - c[0]) * c[4], b + (at - c[0]) * c[5]

    def at(self, pool: str, at: int) -> tuple[Any, ...]:
        cards = self.cards[pool]
        return cards[max(bisect.bisect_right(cards, (at, *LAST)) - 1, 0)]


def lines_of(sums: dict[tuple[str, int, str], list[Any]], denominator: int, e: dict[str, Any],
             tail: tuple[Any, ...]) -> list[Line]:  # fmt: skip
    """Per (workload, day, cause) [numerator, quantity, unit]: rounded once into lines."""
    out = []
    for (workload, day, cause), (n, quantity, unit) in sorted(sums.items()):
        micros = half_even(n, denominator)
        if micros or quantity:
            out.append((workload, day, cause, e["event_id"], micros, quantity, unit, *tail))
    return out


def add(sums: dict[Any, list[Any]], key: Any, quantity: float, n: int, unit: str) -> None:
    held = sums.get(key)
    if held is None:
        sums[key] = [n, 0.0 + quantity, unit]
    else:
        held[0] += n
        held[1] += quantity


def useful(w: dict[str, Any], instance: str, vcpu: int, s: int, t: int) -> list[tuple[int, ...]]:
    """The pieces of [s, t) of `instance`, each with its vCPU useful there."""
    me = w["instances"].get(instance)
    if me is None or me[0] == NEVER or t <= s:
        return [(s, t, 0)] if t > s else []
    key = (me[0], instance)
    before = [(k[0], k[1], k[2]) for i, k in w["instances"].items()
              if (k[0], i) < key and k[1] > s and k[0] < t]  # fmt: skip
    claims = [(c[1], c[2], c[0]) for c in w["claims"].values()
              if c[1] is not None and c[1] < t and c[2] > s]  # fmt: skip
    cuts = {s, t}
    for a, b, _ in (*before, *claims):
        cuts.update(x for x in (a, b) if s < x < t)
    pieces: list[tuple[int, ...]] = []
    for a, b in pairwise(sorted(cuts)):
        asked = sum(v for x, y, v in claims if x <= a < y)
        ahead = sum(v for x, y, v in before if x <= a < y)
        n = min(vcpu, max(0, asked - ahead))
        if pieces and pieces[-1][2] == n:
            pieces[-1] = (pieces[-1][0], b, n)
        else:
            pieces.append((a, b, n))
    return pieces


class BarePricer:
    def __init__(self) -> None:
        self.book = Book()
        self.items: dict[str, list[Item]] = {}  # pool -> items priced
        self.ids: set[str] = set()
        self.demand: dict[str, dict[str, Any]] = {}
        self.reservations: dict[str, list[Any]] = {}  # id -> [event, accrued to]
        self.watermark: int | None = None
        self.priced_until: dict[str, int] = {}
        self.usage_until: dict[str, int] = {}
        self.batch_items: list[Item] = []

    # -- pricing an item --------------------------------------------------------------------

    def price(self, item: Item) -> list[Line] | None:
        """An item's lines, None where its pool has no card."""
        if not self.book.cards.get(item[1]):
            return None
        e = item[0]
        p = e["payload"][1]
        if e["event_type"] == "work_wasted":
            return self._waste(e, p)
        return self._usage(e, p, item[4], item[5])

    def _usage(self, e: dict[str, Any], u: dict[str, Any], pieces: Any, by: str) -> list[Line]:
        span = u["end_at"] - u["start_at"]
        if span <= 0:
            return []
        vcpu, model, pool = max(u["vcpu"], 1), u["purchase_model"], u["pool_id"]
        used_q = round(u["used_vcpu_h"] * Q_H)
        capacity_q = half_even(u["vcpu"] * span * Q_H, HOUR_US)
        idle_q = max(capacity_q - used_q, 0)
        share, milli_h, wl = Q_H * span, 1000 * HOUR_US, u["workload_id"]
        days = []
        for a, b, n in pieces:
            lo = a
            while lo < b:
                day = lo // DAY_US
                end = min(b, (day + 1) * DAY_US)
                days.append((day, lo, end, n))
                lo = end
        ends = {x: self.book.integral(pool, x) for _, a, b, _ in days for x in (a, b)}
        sums: dict[Any, list[Any]] = {}
        for day, x, y, n in days:
            (px, gx), (py, gy) = ends[x], ends[y]
            d, dp, dg = y - x, py - px, gy - gx
            whole = used_q * d / share
            add(sums, (wl, day, "counterfactual"), whole * n / vcpu, used_q * n * dg * milli_h,
                "vcpu_h")  # fmt: skip
            add(sums, (wl, day, SPEND[model]), whole * n / vcpu, used_q * n * dp * milli_h,
                "vcpu_h")  # fmt: skip
            if n < vcpu:
                add(sums, (wl, day, "surplus"), whole * (vcpu - n) / vcpu,
                    used_q * (vcpu - n) * dp * milli_h, "vcpu_h")  # fmt: skip
            add(sums, (wl, day, "headroom"), idle_q * d / share, idle_q * vcpu * dp * milli_h,
                "vcpu_h")  # fmt: skip
            foot = (AGENT_MILLI * dp * share + used_q * d * CONTROL_PLANE * milli_h) * vcpu
            add(sums, (wl, day, "footprint"), AGENT_MILLI * d / milli_h, foot, "vcpu_h")
            if model == "committed":
                add(sums, (PLATFORM, day, "idle_floor"), -capacity_q * d / share,
                    -capacity_q * vcpu * dp * milli_h, "vcpu_h")  # fmt: skip
        tail = (pool, model, u["instance_id"], e["event_type"], e["occurred_at"], RULE, by)
        return lines_of(sums, share * vcpu * milli_h, e, tail)

    def _waste(self, e: dict[str, Any], w: dict[str, Any]) -> list[Line]:
        card = self.book.at(w["pool_id"], e["occurred_at"])
        n, per_h = round(w["wasted_vcpu_s"] * Q_S), Q_S * 3600
        day, wl, model = e["occurred_at"] // DAY_US, w["workload_id"], card[6]
        sums: dict[Any, list[Any]] = {}
        add(sums, (wl, day, "counterfactual"), -n / per_h, -n * card[5], "vcpu_h")
        add(sums, (wl, day, "wasted_work"), n / per_h, n * card[4], "vcpu_h")
        add(sums, (wl, day, SPEND[model]), -n / per_h, -n * card[4], "vcpu_h")
        tail = (w["pool_id"], model, w["instance_id"], e["event_type"], e["occurred_at"], RULE, "")
        return lines_of(sums, per_h, e, tail)

    def _priced(self, item: Item) -> list[Line]:
        self.items.setdefault(item[1], []).append(item)
        self.ids.add(item[0]["event_id"])
        self.batch_items.append(item)
        self.priced_until[item[1]] = max(self.priced_until.get(item[1], item[3]), item[3])
        return self.price(item) or []

    # -- the events -------------------------------------------------------------------------

    def feed(self, e: dict[str, Any], origin: tuple[str, int, int],
             refused: list[tuple[Any, ...]]) -> list[Line]:  # fmt: skip
        at, t = e["occurred_at"], e["event_type"]
        self.watermark = at if self.watermark is None else max(self.watermark, at)
        if t not in FACTS:
            return []
        p = e["payload"][1]
        if t == "rate_card":
            return self._card(e, p, refused)
        if t == "usage_interval":
            return self._usage_fact(e, p, origin)
        if t == "work_wasted":
            if e["event_id"] in self.ids:
                return []
            return self._priced([e, p["pool_id"], at, at + 1, (), "", origin])
        if t == "checkpoint_written":
            gb = p["written_bytes"] * CKPT_DAYS
            per = 1_000_000_000 * 30
            micros, quantity = half_even(gb * CKPT_MICROS, per), gb / per
            if micros == 0 and quantity == 0:
                return []
            return [(p["workload_id"], at // DAY_US, "checkpoint_storage", e["event_id"], micros,
                     quantity, "gb_month", "", "", p["instance_id"], t, at, RULE, "")]  # fmt: skip
        if t == "reservation_committed":
            late = at - p["start_at"]
            if late > ALLOWED_S * 1_000_000:
                refused.append(self._refusal(e, p["start_at"]))
            elif e["event_id"] not in self.reservations:
                self.reservations[e["event_id"]] = [e, p["start_at"]]
            return []
        return self._demand_fact(e, p)

    def _demand_fact(self, e: dict[str, Any], p: dict[str, Any]) -> list[Line]:
        """A claim opened or released, an instance launched or ended: its corrections if it
        changed what usage priced already was useful."""
        at, t = e["occurred_at"], e["event_type"]
        wl = p["workload_id"]
        w = self.demand.setdefault(wl, {"claims": {}, "instances": {}})
        changed = False
        if t == "instance_launched":
            held = w["instances"].get(p["instance_id"])
            by = e["causation_id"] or ""
            if held is None:
                w["instances"][p["instance_id"]] = [at, NEVER, p["vcpu"], by]
                changed = True
            elif at < held[0]:
                held[0], held[2], held[3] = at, p["vcpu"], by
                changed = True
        elif t in ("instance_lost", "instance_deleted"):
            held = w["instances"].get(p["instance_id"])
            if held is None:
                w["instances"][p["instance_id"]] = [NEVER, at, 0, ""]
                changed = True
            elif at < held[1]:
                held[1] = at
                changed = True
        elif t == "capacity_claim_opened":
            claim = w["claims"].setdefault(p["claim_id"], [0, None, NEVER])
            if claim[1] is None or at < claim[1]:
                claim[1], claim[0] = at, p["requested_vcpu"]
                changed = True
        else:  # capacity_released
            claim = w["claims"].setdefault(p["claim_id"], [0, None, NEVER])
            if at < claim[2]:
                claim[2] = at
                changed = True
        if not changed or self.usage_until.get(wl, at) <= at:
            return []
        return self._late_demand(e, w, wl)

    def _usage_fact(self, e: dict[str, Any], p: dict[str, Any], origin: Any) -> list[Line]:
        if e["event_id"] in self.ids:
            return []  # delivered twice: priced once
        wl = p["workload_id"]
        if p["end_at"] > self.usage_until.get(wl, p["end_at"] - 1):
            self.usage_until[wl] = p["end_at"]
        w = self.demand.get(wl, NO_DEMAND)
        pieces = tuple(useful(w, p["instance_id"], p["vcpu"], p["start_at"], p["end_at"]))
        held = w["instances"].get(p["instance_id"])
        by = held[3] if held is not None else ""
        return self._priced([e, p["pool_id"], p["start_at"], p["end_at"], pieces, by, origin])

    def _refusal(self, e: dict[str, Any], applies: int) -> tuple[Any, ...]:
        late = max(0, e["occurred_at"] - applies)
        reason = (
            f"{e['event_type']} published {late / 3.6e9:.2f} h after the moment it applies "
            f"from, beyond the ledger's allowed lateness of {ALLOWED_S / 3600:g} h: not priced"
        )
        return (e["event_id"], e["event_type"], e["key"], e["occurred_at"], applies, late / 1e6,
                ALLOWED_S, reason)  # fmt: skip

    def _card(self, e: dict[str, Any], c: dict[str, Any], refused: list[Any]) -> list[Line]:
        start, pool = c["valid_from_at"], c["pool_id"]
        if e["occurred_at"] - start > ALLOWED_S * 1_000_000:
            refused.append(self._refusal(e, start))
            return []
        row = (start, e["occurred_at"], e["event_id"], c["valid_until_at"],
               c["price_per_vcpu_h_eur_micros"], c["guaranteed_price_per_vcpu_h_eur_micros"],
               c["purchase_model"])  # fmt: skip
        cards = self.book.cards.get(pool, [])
        i = bisect.bisect_left(cards, row)
        if i < len(cards) and cards[i] == row:
            return []  # the same card again
        until = self.priced_until.get(pool)
        first = cards[0][0] if cards else None
        if until is None or (first is not None and start > first and start >= (until or 0)):
            self.book.add(pool, row)
            return []
        self.book.add(pool, row)
        cards = self.book.cards[pool]
        nxt = bisect.bisect_right(cards, (start, *LAST))
        to_us = cards[nxt][0] if nxt < len(cards) else 1 << 62
        from_us = -(1 << 62) if first is None or start <= first else start
        touched = [i for i in self.items.get(pool, ()) if i[3] > from_us and i[2] < to_us]
        if not touched:
            return []
        self.book.remove(pool, row)
        before = [self.price(i) for i in touched]
        self.book.add(pool, row)
        return self._corrections(
            e, pool, zip(before, [self.price(i) for i in touched], strict=True)
        )

    def _late_demand(self, e: dict[str, Any], w: dict[str, Any], wl: str) -> list[Line]:
        changes = []
        for items in self.items.values():
            for n, item in enumerate(items):
                u = item[0]["payload"][1]
                if item[3] <= e["occurred_at"] or item[0]["event_type"] != "usage_interval":
                    continue
                if u["workload_id"] != wl:
                    continue
                pieces = tuple(useful(w, u["instance_id"], u["vcpu"], u["start_at"], u["end_at"]))
                held = w["instances"].get(u["instance_id"])
                by = held[3] if held is not None else ""
                if pieces == item[4] and by == item[5]:
                    continue
                new = [*item[:4], pieces, by, item[6]]
                changes.append((self.price(item), self.price(new)))
                items[n] = new
                self.batch_items.append(new)
        return self._corrections(e, "", changes)

    def _corrections(self, e: dict[str, Any], pool: str, changes: Any) -> list[Line]:
        sums: dict[Any, list[Any]] = {}
        for old, new in changes:
            for sign, lines in ((-1, old), (1, new)):
                for line in lines or ():
                    key = line[:3]
                    held = sums.setdefault(key, [0, 0.0, "", set()])
                    held[0] += sign * line[4]
                    held[1] += sign * line[5]
                    held[2] = line[8]
                    held[3].add(line[7])
        out = []
        for (wl, day, cause), (n, quantity, model, pools) in sorted(sums.items()):
            if n == 0 and abs(quantity) < 1e-9:
                continue
            where = pool or (next(iter(pools)) if len(pools) == 1 else "")
            out.append((wl, day, cause, e["event_id"], n, quantity, "vcpu_h", where, model, "",
                        e["event_type"], e["occurred_at"], RULE, ""))  # fmt: skip
        return out

    def advance(self) -> list[Line]:
        """The idle floor's lines up to the last whole hour of the newest event."""
        if self.watermark is None:
            return []
        to = self.watermark - self.watermark % HOUR_US
        out = []
        for held in self.reservations.values():
            e, accrued = held
            if to <= accrued:
                continue
            r = e["payload"][1]
            lo, hi = max(accrued, r["start_at"]), min(to, r["end_at"] + HOUR_US - 1)
            step = lo - lo % HOUR_US
            while step < hi:
                start, hour = max(step, lo), min(step + HOUR_US, to)
                step += HOUR_US
                day = (hour - 1) // DAY_US
                now, now_v = reserved(r, day, hour)
                then, then_v = reserved(r, day, start)
                micros = half_even(now, HOUR_US) - half_even(then, HOUR_US)
                quantity = (now_v - then_v) / HOUR_US
                if micros or quantity:
                    out.append((PLATFORM, day, "idle_floor",
                                line_id(e["event_id"], "idle_floor", str(hour)), micros, quantity,
                                "vcpu_h", r["pool_id"], "committed", "", e["event_type"], hour,
                                RULE, e["event_id"]))  # fmt: skip
            held[1] = to
        return out


def reserved(r: dict[str, Any], day: int, until: int) -> tuple[int, int]:
    a, b = max(r["start_at"], day * DAY_US), min(r["end_at"], (day + 1) * DAY_US, until)
    if b <= a:
        return 0, 0
    v = r["reserved_vcpu"] * (b - a)
    return v * r["price_per_vcpu_h_eur_micros"], v


def pieces_json(item: Item) -> list[dict[str, int]]:
    return [{"1": a, "2": b, "3": u} for a, b, u in item[4]]
