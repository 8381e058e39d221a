"""The bench's plain pricing (`bench/ledger_bare.py`, the ledger's bare loop) gives the
ledger's `Pricer`'s lines, refusals and priced pieces, whatever order the events arrive in:
late rate cards (within and past the allowed lateness, some correcting a card with the same
start) and late claims, launches and ends re-pricing what was priced, so that the bench's
ratio is against the same work. The 1-day demo the bench runs has no late fact; this history
has them (`tests/test_late_facts.py`'s)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.ledger_bare import BarePricer, Line
from projections.ledger.pricer import MemorySource, Pricer
from projections.ledger.pricing import LedgerLine
from projections.ledger.rule import RECORDED
from tests.test_late_facts import LateCard, base_history, late_cards, with_late


@settings(max_examples=40, deadline=None)
@given(late_cards, st.data())
def test_the_plain_pricing_gives_the_ledgers_lines_in_any_order(
    late: list[LateCard], data: st.DataObject
) -> None:
    events = with_late(base_history(), late)
    order = data.draw(st.permutations(range(len(events))), label="order of arrival")
    size = data.draw(st.integers(1, 40), label="batch size")
    arrived = [events[i] for i in order]
    source = MemorySource()
    pricer, bare = Pricer(RECORDED, source=source), BarePricer()
    lines: list[LedgerLine] = []
    plain: list[Line] = []
    refused: list[tuple[Any, ...]] = []
    for start in range(0, len(arrived), size):
        for n, e in enumerate(arrived[start : start + size], start):
            lines += pricer.feed(e)
            plain += bare.feed(e.to_avro(), ("t", 0, n), refused)
        lines += pricer.advance()
        plain += bare.advance()
    assert lines  # the history costs something
    assert sorted(plain) == sorted(tuple(line) for line in lines)
    assert [r[0] for r in refused] == [r.envelope.event_id for r in pricer.refused]
    assert refused == [
        (r.envelope.event_id, r.envelope.event_type, r.envelope.key, r.envelope.occurred_at,
         r.applies_from_us, r.lateness_us / 1e6, RECORDED.allowed_lateness_s, r.reason)
        for r in pricer.refused
    ]  # fmt: skip
    held = {i.envelope.event_id: (i.pieces, i.decided_by) for v in source.by_pool.values()
            for i in v}  # fmt: skip
    assert {i[0]["event_id"]: (i[4], i[5]) for v in bare.items.values() for i in v} == held
