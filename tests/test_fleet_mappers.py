"""The fleet-state mappers are pure, and a state row is a function of the set of its events."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.eventtime import stamp, ts
from projections.postgres import schema as s
from projections.postgres.lifecycle import (
    IMPLIED_STATE,
    INSTANCES,
    STATES,
    TRANSITIONS,
    derive_state,
)
from projections.postgres.mappers import map_events, ranking_row
from schemas.errors import Origin
from schemas.events import (
    Advisory,
    Allocation,
    CheckpointWritten,
    DrainCompleted,
    DrainStarted,
    Envelope,
    FallbackDecided,
    InstanceDeleted,
    InstanceLaunched,
    InstanceLost,
    NoticeReceived,
    PlacementDecided,
    PoolRanked,
    RateCard,
    ReplacementRequested,
    WorkWasted,
)
from tests.projection_support import T0_US, event

REPO = Path(__file__).resolve().parent.parent
INST, W, P = "i-1", "wl-a", "pool-a"


def story() -> list[Envelope]:
    """One instance's whole life: launch, advisory, notice, drain, checkpoints, loss, waste and
    a replacement requested on the notice."""
    return [
        event(InstanceLaunched(INST, P, W, 8, "reclaimable", {"k": "v"}), 0, name="launch"),
        event(CheckpointWritten(INST, W, 1, 1000, 1.0, False), 600, name="ckpt1"),
        event(Advisory(INST, P, T0_US + 900_000_000), 700, name="advisory"),
        event(NoticeReceived(INST, P, W, T0_US + 920_000_000, "nats"), 800, name="notice"),
        event(ReplacementRequested(W, INST, 8, "reclaimable", ()), 801, name="replace"),
        event(DrainStarted(INST, W, "kubernetes", 90, "notice"), 802, name="drain"),
        event(CheckpointWritten(INST, W, 2, 2000, 2.0, True), 830, name="ckpt2"),
        event(DrainCompleted(INST, W, "kubernetes", 40.0, True, False, False, 78.0), 842,
              name="drained"),
        event(InstanceLost(INST, P, W, 8, "reclaimable", True, "reclaimed"), 920, name="lost"),
        event(WorkWasted(W, INST, P, 0.0, T0_US + 830_000_000), 920, name="wasted"),
    ]  # fmt: skip


def instance_row(events: list[Envelope]) -> dict[str, object]:
    return INSTANCES.finish(map_events(events).states["instances"][INST])


def test_the_seed_of_the_transitions_table_is_the_state_machine() -> None:
    sql = (REPO / "projections/postgres/migrations/0002_views.sql").read_text()
    seed = sql.split("INSERT INTO instance_transitions")[1].split(";")[0]
    pairs = set(re.findall(r"\('([a-z]*)', '([a-z]+)'\)", seed))
    assert pairs == set(TRANSITIONS)
    assert {t for _, t in pairs} <= set(STATES)


def test_the_instance_events_view_implies_the_state_machine_s_states() -> None:
    # The view over the journal (migration 0004) names the instance events and the state each
    # implies, as IMPLIED_STATE does: both lists in the view, and its CASE.
    sql = (REPO / "projections/postgres/migrations/0004_instance_events_view.sql").read_text()
    view = sql.split("CREATE VIEW instance_events AS")[1].split(";")[0]
    implied = dict(re.findall(r"WHEN '([a-z_]+)' THEN '([a-z]+)'", view))
    assert implied == {t: state for t, state in IMPLIED_STATE.items() if state is not None}
    index = sql.split("CREATE INDEX journal_instance")[1].split(";")[0]
    for where in (view.split("WHERE")[-1], index.split("WHERE")[-1]):
        assert set(re.findall(r"'([a-z_]+)'", where)) == set(IMPLIED_STATE)


def test_a_whole_life_ends_replaced_with_every_fact_on_the_row() -> None:
    row = instance_row(story())
    assert row["state"] == "replaced"
    assert (row["workload_id"], row["pool_id"], row["vcpu"]) == (W, P, 8)
    assert row["drain_path"] == "kubernetes" and row["drain_verified"] is True
    assert row["checkpoint_generation"] == 2 and row["checkpoint_final"] is True
    assert row["loss_reason"] == "reclaimed" and row["lost_with_notice"] is True
    assert row["notice_source"] == "nats"


@settings(max_examples=150, deadline=None)
@given(st.permutations(story()), st.lists(st.integers(0, 9), max_size=5))
def test_an_instance_row_does_not_depend_on_order_or_duplicates(
    order: list[Envelope], repeats: list[int]
) -> None:
    shuffled = order + [order[i] for i in repeats]
    assert instance_row(shuffled) == instance_row(story())


@settings(max_examples=100, deadline=None)
@given(st.permutations(story()), st.integers(1, 9))
def test_merging_partial_rows_in_any_grouping_gives_the_same_row(
    order: list[Envelope], cut: int
) -> None:
    first = map_events(order[:cut]).states["instances"][INST]
    second = map_events(order[cut:]).states["instances"].get(INST)
    merged = INSTANCES.merge(first, second) if second else INSTANCES.finish(first)
    assert merged == instance_row(story())
    assert INSTANCES.merge(merged, merged) == merged  # idempotent


@settings(max_examples=100, deadline=None)
@given(st.permutations(story()), st.integers(1, 10))
def test_the_staged_row_is_the_finished_row_in_column_order(
    order: list[Envelope], cut: int
) -> None:
    # What the writer copies (`finish_row`) is `finish`, column by column, its derived state
    # included, for any part of a life.
    row = map_events(order[:cut]).states["instances"][INST]
    full = INSTANCES.finish(row)
    assert INSTANCES.finish_row(row) == tuple(full[c] for c in INSTANCES.columns)


def test_the_state_is_the_furthest_fact() -> None:
    life = story()
    by_name = {e.event_type: e for e in life}
    assert instance_row([by_name["instance_launched"]])["state"] == "running"
    assert instance_row(life[:3])["state"] == "advised"
    assert instance_row(life[:4])["state"] == "noticed"
    assert instance_row([*life[:4], life[5]])["state"] == "draining"
    assert instance_row([*life[:4], life[5], life[7]])["state"] == "drained"
    assert instance_row([by_name["instance_lost"]])["state"] == "lost"
    # Side facts alone: known, but not launched yet.
    assert instance_row([by_name["checkpoint_written"]])["state"] == "requested"


def test_of_a_loss_and_a_deletion_the_earlier_ends_the_instance() -> None:
    launch = event(InstanceLaunched(INST, P, W, 8, "reclaimable", {}), 0, name="l")
    delete = event(
        InstanceDeleted(INST, P, W, "orchestrator", "spotcap", "scale down"), 10, name="d"
    )
    lost = event(InstanceLost(INST, P, W, 8, "reclaimable", False, "unknown"), 20, name="x")
    assert instance_row([launch, lost, delete])["state"] == "deleted"
    late_delete = event(InstanceDeleted(INST, P, W, "owner", "bob", "cleanup"), 30, name="d2")
    assert instance_row([launch, late_delete, lost])["state"] == "lost"


def test_derive_state_never_fails_on_an_empty_row() -> None:
    assert derive_state({}) == {"state": "requested"}


def test_capacity_actions_go_to_the_outbox_with_the_event_id_as_action_id() -> None:
    place = event(
        PlacementDecided(
            W, 16, 4,
            (Allocation(P, 8, "reclaimable"), Allocation(P, 4, "reclaimable"),
             Allocation("pool-c", 4, "committed")),
            1000, 900, 100, ("pool-x",),
        ),
        0, name="place",
    )  # fmt: skip
    notice = story()[3]
    changes = map_events([place, notice])
    outbox = changes.appends["outbox"]
    assert [r["action_id"] for r in outbox] == [place.event_id]
    record = json.loads(outbox[0]["record"])
    assert record["action"] == "place" and record["action_id"] == place.event_id
    assert record["summary"].startswith("placed 16 vCPU of wl-a over 2 pools")
    # Two allocations in one pool and model become one row with their sum.
    allocations = {
        (r["pool_id"], r["purchase_model"]): r["vcpu"]
        for r in changes.appends[s.PLACEMENT_ALLOCATIONS.name]
    }
    assert allocations == {(P, "reclaimable"): 12, ("pool-c", "committed"): 4}


def test_a_fallback_is_recorded_with_its_authority() -> None:
    fb = event(
        FallbackDecided(W, "escalated", 32, 9_000_000, 5_000_000, "alice", 2, "cap"), 0, name="fb"
    )
    changes = map_events([fb])
    assert changes.appends["fallbacks"][0]["kind"] == "escalated"
    assert json.loads(changes.appends["outbox"][0]["record"])["summary"] == (
        "fallback (escalated) of 32 vCPU for wl-a: spend today €9.00 of a €5.00 cap, approver alice"
    )


@settings(max_examples=60, deadline=None)
@given(st.permutations(range(6)))
def test_a_pool_keeps_the_rate_card_with_the_latest_validity_whatever_the_order(
    order: list[int],
) -> None:
    cards = [
        event(RateCard(P, "reclaimable", 1000 + i, 5000, T0_US + i * 300_000_000,
                       T0_US + (i + 1) * 300_000_000), i * 300, name=f"card{i}")
        for i in range(6)
    ]  # fmt: skip
    row = s.POOLS.finish(map_events([cards[i] for i in order]).states["pools"][P])
    assert row["price_per_vcpu_h_eur_micros"] == 1005
    assert row["excluded"] is False


def test_tuple_rows_follow_their_tables_columns_and_only_the_latest_rank_moves_a_pool() -> None:
    ranked = [
        event(PoolRanked("r-1", P, 2, 3, 0.5, 512, 0.01, 6_000, "g1", 300, ("a-id", "b-id")),
              0, name="rank-1"),
        event(PoolRanked("r-2", P, 1, 3, 0.9, 256, 0.02, 7_000, "g1", 300, ()), 60,
              name="rank-2"),
    ]  # fmt: skip
    launch = story()[0]
    changes = map_events([ranked[1], launch, ranked[0]])
    # A ranking's row is its journal row (the writer copies it with the journal's).
    assert changes.rows(s.RANKINGS) == []
    origin = Origin("demo.decisions", 3, 41)
    first = dict(zip(s.RANKINGS.columns, ranking_row(origin, ranked[0]), strict=True))
    assert (first["event_id"], first["pool_id"], first["rank"], first["pool_count"]) == (
        ranked[0].event_id, P, 2, 3)  # fmt: skip
    assert (first["score"], first["available_vcpu"], first["window_s"]) == (0.5, 512, 300)
    assert first["input_event_ids"] == "{a-id,b-id}"
    assert first["occurred_at"] == stamp(ranked[0].occurred_at)
    assert (first["key"], first["causation_id"], first["correlation_id"]) == (
        ranked[0].key, ranked[0].causation_id, ranked[0].correlation_id)  # fmt: skip
    assert (first["recorded_at"], first["producer"]) == (
        stamp(ranked[0].recorded_at), ranked[0].producer)  # fmt: skip
    assert (first["topic"], first["partition"], first["offset"]) == ("demo.decisions", 3, 41)
    # An instance's events are the journal's (the view `instance_events`): no rows of their own.
    assert not any(table.name == "instance_events" for table in s.APPEND_TABLES)
    assert changes.states["instances"][INST]["launch_event_id"] == launch.event_id
    pool = changes.states["pools"][P]
    finished = s.POOLS.finish(pool)
    assert s.POOLS.finish_row(pool) == tuple(finished[c] for c in s.POOLS.columns)
    assert finished["excluded"] is False
    assert (pool["ranking_id"], pool["rank"], pool["rank_event_id"]) == (
        "r-2",
        1,
        ranked[1].event_id,
    )


@given(st.integers(min_value=-62_135_596_800_000_000, max_value=253_402_300_799_999_999))
@settings(max_examples=300, deadline=None)
def test_a_stamp_is_the_same_instant_as_the_datetime(micros: int) -> None:
    # The writer copies journal and ranking times as this text (PostgreSQL parses it).
    text = stamp(micros)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}\+00", text)
    assert datetime.fromisoformat(text) == ts(micros)
    assert stamp(micros) == text
