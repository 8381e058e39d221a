"""The checkpoint client's pure pieces: sealing (chunks out of place, cut short, under another
key or context), retention decisions, the loss-budget interval (ADR-20) and the channel's wire
model."""

from __future__ import annotations

import io
import os
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpoint.interval import LossBudget, PoolRisk, periodic_interval
from checkpoint.retention import DAY_US, Retention, generations_to_prune, orphans
from checkpoint.sealing import CHUNK_BYTES, MAGIC, SealError, seal, unseal
from schemas.checkpoints import (
    ChannelFormatError,
    ChannelMessage,
    Failed,
    Hello,
    NoticeToWorkload,
    Quarantined,
    Welcome,
    Written,
    decode,
    encode,
)

KEY = bytes(range(32))
CONTEXT = b"wl/unit/3/model"


def _sealed(data: bytes, key: bytes = KEY, context: bytes = CONTEXT) -> bytes:
    out = io.BytesIO()
    sealed = seal(key, context, io.BytesIO(data), out)
    assert sealed.plain_bytes == len(data) and sealed.stored_bytes == len(out.getvalue())
    return out.getvalue()


def _open(data: bytes, key: bytes = KEY, context: bytes = CONTEXT) -> bytes:
    out = io.BytesIO()
    unseal(key, context, io.BytesIO(data), out)
    return out.getvalue()


@given(st.binary(max_size=3000))
def test_sealing_round_trips(data: bytes) -> None:
    assert _open(_sealed(data)) == data


def _chunks(sealed: bytes) -> tuple[bytes, list[bytes]]:
    head, rest, chunks = sealed[: len(MAGIC) + 8], sealed[len(MAGIC) + 8 :], []
    while rest:
        (length,) = struct.unpack(">I", rest[:4])
        chunks.append(rest[: 4 + length])
        rest = rest[4 + length :]
    return head, chunks


def test_a_sealed_part_refuses_reordering_truncation_another_key_or_context() -> None:
    data = os.urandom(2 * CHUNK_BYTES + 10)
    sealed = _sealed(data)
    head, chunks = _chunks(sealed)
    assert len(chunks) == 3
    cases = {
        "swapped chunks": head + chunks[1] + chunks[0] + chunks[2],
        "last chunk dropped": head + chunks[0] + chunks[1],
        "a chunk repeated": head + chunks[0] + chunks[0] + chunks[1] + chunks[2],
        "one bit flipped": sealed[:100] + bytes([sealed[100] ^ 1]) + sealed[101:],
    }
    for what, altered in cases.items():
        with pytest.raises(SealError):
            _open(altered)
        assert what
    with pytest.raises(SealError, match="does not authenticate"):
        _open(sealed, key=bytes(32))
    with pytest.raises(SealError, match="does not authenticate"):
        _open(sealed, context=b"wl/unit/4/model")  # moved from another generation
    with pytest.raises(SealError, match="not a sealed part"):
        _open(b"plain text")


def test_retention_by_generations_and_days_always_keeps_the_newest() -> None:
    day = DAY_US
    published = [(g, g * day) for g in range(1, 7)]
    assert generations_to_prune(published, Retention(generations=3), 0) == [1, 2, 3]
    assert generations_to_prune(published, Retention(generations=None, days=2.5), 6 * day) == [
        1,
        2,
        3,
    ]
    assert generations_to_prune(published, Retention(generations=None, days=1), 100 * day) == [
        1,
        2,
        3,
        4,
        5,
    ]
    assert generations_to_prune([], Retention(), 0) == []
    assert orphans({2, 4, 7}, {1, 3, 5}) == [2, 4]  # 7 may be a save under way
    for bad in ({"generations": 0}, {"generations": 3, "days": 7}, {"generations": None}):
        with pytest.raises(ValueError):
            Retention(**bad)


def test_the_interval_keeps_the_expected_loss_within_the_contracts_budget() -> None:
    # docs/checkpoints.md's worked example: a t2 contract (0.05/h tolerated, 60 min periodic)
    budget = LossBudget.of_contract(0.05, 3600)
    assert budget.loss_s_per_h == 90 and budget.share == 0.025
    # on a pool reclaiming 0.08/h, 10 % of it without notice: 2 x 90 / 0.008 = 22,500 s, more
    # than the contract's 3,600 s, which stand
    calm = periodic_interval(budget, PoolRisk(0.08, 0.10), write_s=43)
    assert (calm.interval_s, calm.bound_by, calm.budget_met) == (3_600, "declared", True)
    assert calm.expected_loss_s_per_h == pytest.approx(14.4)
    assert periodic_interval(LossBudget(90), PoolRisk(0.08, 0.10), write_s=43).interval_s == 22_500
    # every loss without notice (or a final checkpoint that would not fit): 2,250 s
    for decision in (
        periodic_interval(budget, PoolRisk(0.08), write_s=43),
        periodic_interval(budget, PoolRisk(0.08, 0.10), write_s=43, final_fits=False),
    ):
        assert decision.interval_s == 2_250
    # a pool so bad that the budget would need more than 5 % of the time spent writing
    bad = periodic_interval(budget, PoolRisk(2.0), write_s=43)
    assert (bad.interval_s, bad.bound_by, bad.budget_met) == (860, "write overhead", False)
    quiet = periodic_interval(LossBudget(90), PoolRisk(0.0), write_s=43)
    assert (quiet.interval_s, quiet.bound_by) == (86_400, "maximum")


@given(st.floats(0.001, 5), st.integers(60, 86_400), st.floats(0.001, 10), st.floats(0.01, 1))
def test_the_interval_never_exceeds_the_budget_unless_it_says_so(
    tolerated: float, declared_s: int, rate: float, no_notice: float
) -> None:
    budget = LossBudget.of_contract(tolerated, declared_s)
    decision = periodic_interval(budget, PoolRisk(rate, no_notice), write_s=10)
    assert decision.interval_s >= 200  # 10 s of writing is at most 5 %
    assert decision.interval_s <= max(declared_s, 200)
    if decision.budget_met:
        assert decision.expected_loss_s_per_h <= budget.loss_s_per_h * (1 + 1e-9)
    else:
        assert decision.bound_by == "write overhead"


def test_the_channels_messages_round_trip_and_bad_lines_are_refused() -> None:
    messages: list[ChannelMessage] = [
        Hello("etl", "unit-1", 42),
        Welcome("i-1", "etl", "pytorch", 90, "resume"),
        Welcome("i-1", None, None, None, None),
        NoticeToWorkload("n-1", 1_800_000_000_000_000, 85.0),
        Written("unit-1", 3, 300, 1024, 0.5, True, "n-1"),
        Failed("unit-1", "bucket refused", None),
        Quarantined("unit-1", 3, "failed 3 times"),
    ]
    for message in messages:
        assert decode(encode(message)) == message
    for line in (
        b"not json",
        b"[]",
        b'{"type":"nope"}',
        b'{"type":"hello","workload_id":"w","unit_id":"u"}',
        b'{"type":"hello","workload_id":"w","unit_id":"u","pid":true}',
        b'{"type":"hello","workload_id":"w","unit_id":"u","pid":1,"extra":1}',
        b"x" * 5000,
    ):
        with pytest.raises(ChannelFormatError):
            decode(line)
