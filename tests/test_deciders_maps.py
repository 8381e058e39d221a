"""`streams.deciders.maps.replace` makes what `dataclasses.replace` makes, and refuses what it
refuses (the deciders' state is replaced through it some 320,000 times a simulated day)."""

from __future__ import annotations

import dataclasses
from dataclasses import InitVar, dataclass, field
from typing import ClassVar

import pytest

from streams.deciders.maps import replace
from streams.deciders.region import RegionView


@dataclass(frozen=True, slots=True)
class _State:
    now_us: int
    pools: tuple[str, ...] = ()
    limit: ClassVar[int] = 3


@dataclass(frozen=True, slots=True)
class _Checked:
    size: int

    def __post_init__(self) -> None:
        if self.size < 0:
            raise ValueError("size below 0")


@dataclass
class _Derived:
    base: int
    scale: InitVar[int] = 1
    total: int = field(init=False, default=0)

    def __post_init__(self, scale: int) -> None:
        self.total = self.base * scale


@dataclass
class _Uninit:
    a: int
    b: list[int] = field(init=False, default_factory=list)


def test_the_same_object_as_dataclasses_replace() -> None:
    state = _State(5, ("a", "b"))
    for changes in ({}, {"now_us": 7}, {"pools": ("c",)}, {"now_us": 1, "pools": ()}):
        ours, theirs = replace(state, **changes), dataclasses.replace(state, **changes)
        assert ours == theirs
        assert type(ours) is _State
    assert replace(state, now_us=9) is not state
    assert state == _State(5, ("a", "b"))  # the old state is left as it was
    view = RegionView()
    assert replace(view, now_us=42) == dataclasses.replace(view, now_us=42)
    assert replace(replace(view, now_us=42), now_us=43) == RegionView(now_us=43)


@dataclass
class _Plain:
    a: int
    b: int = 2


def test_a_dataclass_without_slots() -> None:
    assert replace(_Plain(1), b=5) == _Plain(1, 5)
    with pytest.raises(TypeError):
        replace(_Plain(1), c=5)


def test_post_init_still_runs() -> None:
    assert replace(_Checked(1), size=2) == _Checked(2)
    with pytest.raises(ValueError, match="size below 0"):
        replace(_Checked(1), size=-1)


def test_init_only_and_uninit_fields_follow_dataclasses_rules() -> None:
    theirs = dataclasses.replace(_Derived(2, 3), base=4)
    assert replace(_Derived(2, 3), base=4).total == theirs.total == 4
    assert replace(_Derived(2), base=4, scale=5).total == 20
    with pytest.raises(ValueError):
        replace(_Uninit(1), b=[2])
    assert replace(_Uninit(1), a=3).a == 3


def test_refuses_what_dataclasses_replace_refuses() -> None:
    with pytest.raises(TypeError):
        replace(_State(1), unknown=2)
    with pytest.raises(TypeError):
        replace(object())
