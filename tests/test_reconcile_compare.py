"""The reconciler's comparison (provider.reconcile.compare): each kind of drift, what is not
drift, and the grace given to what is young; over random fleets, every instance is judged
once and nothing of another owner is ever adopted."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from provider.base import OWNER_TAG, Instance
from provider.reconcile import MISSING, OWNER_CHANGED, UNKNOWN, StateInstance, compare
from provider.reconcile.rebuild import RebuildReport
from provider.reconcile.reconciler import RoundReport

ME = "spotcap"
NOW = 10_000_000_000
GRACE = 120_000_000
OLD = NOW - 10 * GRACE


def instance(instance_id: str, owner: str = ME, at: int = OLD) -> Instance:
    return Instance(instance_id, "p1", "wl", 16, "reclaimable", {OWNER_TAG: owner}, at)


def known(instance_id: str, at: int = OLD) -> StateInstance:
    return StateInstance(instance_id, "running", "wl", "p1", 16, "reclaimable", ME, at)


def judge(
    owned: list[Instance], state: list[StateInstance], others: dict[str, Instance | None]
) -> list[tuple[str, str]]:
    drifts = compare(
        owned,
        {s.instance_id: s for s in state},
        others,
        orchestrator_id=ME,
        now_us=NOW,
        grace_us=GRACE,
    )
    return [(d.kind, d.instance_id) for d in drifts]


def test_each_kind_of_drift_and_what_is_not() -> None:
    owned = [instance("a"), instance("b")]
    state = [known("a"), known("c"), known("d")]
    others = {"c": None, "d": instance("d", owner="someone-else")}
    assert judge(owned, state, others) == [(UNKNOWN, "b"), (MISSING, "c"), (OWNER_CHANGED, "d")]


def test_a_drift_and_a_rebuild_as_json() -> None:
    (drift,) = compare([instance("b")], {}, {}, orchestrator_id=ME, now_us=NOW, grace_us=GRACE)
    assert drift.as_json() == {"kind": UNKNOWN, "instance_id": "b", "state": drift.state_says,
                               "provider": drift.provider_says, "action": drift.action}  # fmt: skip
    assert set(drift.as_json()) == {"kind", "instance_id", "state", "provider", "action"}
    report = RebuildReport(instances=5, tail_events=7, applied=3, list_s=1.23456, apply_s=0.0004)
    assert report.as_json() == {"instances": 5, "tail_events": 7, "applied": 3,
                                "list_s": 1.235, "apply_s": 0.0}  # fmt: skip


def test_a_rebuild_from_the_provider_says_itself() -> None:
    report = RebuildReport(
        instances=1_500, tail_events=10_000, applied=12, list_s=3.04, apply_s=0.2
    )
    assert report.describe() == (
        "fleet state rebuilt from the provider: 1,500 instances listed in 3.0 s, 10,000 events of"
        " the log's tail; 12 applied in 0.2 s. Next: `spotcap project fleet` fills in the rest"
        " from the log."
    )


def test_a_round_says_itself() -> None:
    drifts = compare([instance("b")], {"c": known("c")}, {"c": None}, orchestrator_id=ME,
                     now_us=NOW, grace_us=GRACE)  # fmt: skip
    report = RoundReport(owned=1_200, state=3, drifts=drifts)
    assert report.as_json() == {"owned": 1200, "state": 3, "drifts": [d.as_json() for d in drifts]}
    assert report.progress() == (
        f"reconciler: 1,200 at the provider, 3 in the state, drifts {{'{UNKNOWN}': 1, "
        f"'{MISSING}': 1}}"
    )
    head, *rows = report.lines()
    assert head == "1,200 instances at the provider, 3 live in the state; 2 differ"
    b = drifts[0]
    assert rows[0] == f"  {UNKNOWN} b: state {b.state_says}; provider {b.provider_says}; {b.action}"
    assert RoundReport().progress().endswith("drifts none")
    assert RoundReport().lines() == ["0 instances at the provider, 0 live in the state; 0 differ"]


def test_what_is_younger_than_the_grace_is_not_judged() -> None:
    owned = [instance("new", at=NOW - GRACE // 2)]
    state = [known("launching", at=NOW - GRACE // 2)]
    assert judge(owned, state, {"launching": None}) == []


@given(
    st.dictionaries(
        st.text("abcdef", min_size=1, max_size=3),
        st.tuples(st.sampled_from(["ours", "theirs", "none"]), st.booleans()),
        max_size=30,
    )
)
def test_every_instance_is_judged_once_by_the_provider_s_truth(
    fleet: dict[str, tuple[str, bool]],
) -> None:
    owned = [instance(i) for i, (where, _) in fleet.items() if where == "ours"]
    state = [known(i) for i, (_, in_state) in fleet.items() if in_state]
    others: dict[str, Instance | None] = {
        i: instance(i, owner="someone-else") if where == "theirs" else None
        for i, (where, in_state) in fleet.items()
        if in_state and where != "ours"
    }
    drifts = judge(owned, state, others)
    assert len({i for _, i in drifts}) == len(drifts)
    for kind, instance_id in drifts:
        where, in_state = fleet[instance_id]
        expected = {
            ("ours", False): UNKNOWN,
            ("none", True): MISSING,
            ("theirs", True): OWNER_CHANGED,
        }[(where, in_state)]
        assert kind == expected
    agreed = {i for i, (where, in_state) in fleet.items() if (where == "ours") == in_state}
    assert not agreed & {i for _, i in drifts}
