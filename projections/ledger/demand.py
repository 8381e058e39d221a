"""What a workload asked for and what it ran, moment by moment: the useful part of each
instance's vCPU (pure; docs/accounting.md, "Useful work is what was asked for").

A workload **asks** for the vCPU of its open claims: a claim counts from its
`capacity_claim_opened` to its `capacity_released` (a claim the history shows released but
not opened asks for nothing). It **runs** the vCPU of its instances: an instance counts from its
`instance_launched` to its `instance_lost` or `instance_deleted`.

At every moment the running vCPU up to what is asked for is useful; the rest is surplus. Which
instance's vCPU is the surplus is decided by launch order, oldest first (ties: the instance
id): an instance is useful up to what the asks leave after every instance launched before it,
so the capacity that went beyond the asks is the capacity launched last, and the decision that
launched it is the one the surplus names. An instance the history does not show launched is
surplus throughout (nothing shows that it served a claim), and never counts against another.

`Demand.useful` answers, for one usage interval of one instance, the pieces of the interval and
how many of its vCPU were useful on each; the pricing multiplies them by the rate cards.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise

NEVER = 1 << 62  # the end of something that has not ended

Piece = tuple[int, int, int]  # [from, to) in microseconds, useful vCPU on it


@dataclass(slots=True)
class Instance:
    launched_us: int
    vcpu: int
    ended_us: int = NEVER
    decided_by: str = ""  # the decision the launch carried out (its causation id)


@dataclass(slots=True)
class Claim:
    vcpu: int = 0
    opened_us: int | None = None
    released_us: int = NEVER


@dataclass(slots=True)
class Demand:
    """One workload's claims and instances."""

    claims: dict[str, Claim] = field(default_factory=dict)
    instances: dict[str, Instance] = field(default_factory=dict)

    # -- facts ------------------------------------------------------------------------------

    # Each fact returns whether it changed what the workload asked for or ran (a fact seen
    # again changes nothing; the pricer re-prices what a late one changes).

    def open_claim(self, claim_id: str, at_us: int, vcpu: int) -> bool:
        claim = self.claims.setdefault(claim_id, Claim())
        if claim.opened_us is None or at_us < claim.opened_us:
            claim.opened_us, claim.vcpu = at_us, vcpu
            return True
        return False

    def release_claim(self, claim_id: str, at_us: int) -> bool:
        claim = self.claims.setdefault(claim_id, Claim())
        if at_us < claim.released_us:
            claim.released_us = at_us
            return True
        return False

    def launch(self, instance_id: str, at_us: int, vcpu: int, decided_by: str) -> bool:
        held = self.instances.get(instance_id)
        if held is None:
            self.instances[instance_id] = Instance(at_us, vcpu, NEVER, decided_by)
        elif at_us < held.launched_us:
            held.launched_us, held.vcpu, held.decided_by = at_us, vcpu, decided_by
        else:
            return False
        return True

    def end(self, instance_id: str, at_us: int) -> bool:
        held = self.instances.get(instance_id)
        if held is None:  # an end seen before its launch: the launch will keep it
            self.instances[instance_id] = Instance(NEVER, 0, at_us)
        elif at_us < held.ended_us:
            held.ended_us = at_us
        else:
            return False
        return True

    def prune(self, before_us: int) -> None:
        """Forget claims released and instances ended before `before_us`: no usage interval
        priced from now on reaches back that far (the caller's horizon)."""
        self.claims = {c: k for c, k in self.claims.items() if k.released_us >= before_us}
        self.instances = {i: k for i, k in self.instances.items() if k.ended_us >= before_us}

    def __bool__(self) -> bool:
        return bool(self.claims or self.instances)

    # -- what was useful --------------------------------------------------------------------

    def decided_by(self, instance_id: str) -> str:
        held = self.instances.get(instance_id)
        return held.decided_by if held is not None else ""

    def asked_vcpu(self, at_us: int) -> int:
        return sum(
            c.vcpu
            for c in self.claims.values()
            if c.opened_us is not None and c.opened_us <= at_us < c.released_us
        )

    def useful(self, instance_id: str, vcpu: int, start_us: int, end_us: int) -> list[Piece]:
        """[start, end) of `instance_id` (`vcpu` vCPU) in pieces, each with the vCPU of it that
        were useful there (0 to `vcpu`); consecutive pieces differ in what was useful."""
        me = self.instances.get(instance_id)
        if me is None or me.launched_us == NEVER or end_us <= start_us:
            return [(start_us, end_us, 0)] if end_us > start_us else []
        key = (me.launched_us, instance_id)
        # Only instances launched before this one, running at some moment of the interval,
        # take the asks before it; and only claims open at some moment of it give any.
        before = [
            (k.launched_us, k.ended_us, k.vcpu)
            for i, k in self.instances.items()
            if (k.launched_us, i) < key and k.ended_us > start_us and k.launched_us < end_us
        ]
        claims = [
            (c.opened_us, c.released_us, c.vcpu)
            for c in self.claims.values()
            if c.opened_us is not None and c.opened_us < end_us and c.released_us > start_us
        ]
        cuts = {start_us, end_us}
        for a, b, _ in before:
            cuts.update(t for t in (a, b) if start_us < t < end_us)
        for a, b, _ in claims:
            cuts.update(t for t in (a, b) if start_us < t < end_us)
        points = sorted(cuts)
        pieces: list[Piece] = []
        for a, b in pairwise(points):
            asked = sum(v for x, y, v in claims if x <= a < y)
            ahead = sum(v for x, y, v in before if x <= a < y)
            useful = min(vcpu, max(0, asked - ahead))
            if pieces and pieces[-1][2] == useful:
                pieces[-1] = (pieces[-1][0], b, useful)
            else:
                pieces.append((a, b, useful))
        return pieces


def all_useful(start_us: int, end_us: int, vcpu: int) -> list[Piece]:
    """The pieces under a rule that counts every used vCPU-hour as useful."""
    return [(start_us, end_us, vcpu)] if end_us > start_us else []
