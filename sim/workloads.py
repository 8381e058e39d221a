"""The simulated workloads: who they are, the contracts their owners wrote, and when they need
capacity.

Five kinds (Spark, PyTorch training, CI runners, stateless services, Slurm batch) over the five
tiers. Each workload starts as a `WorkloadDraft`: its kind and the contract file its owner wrote
(`sim.contracts`). A kind has a nature (how it checkpoints, what a loss costs it) and a
tier its owners usually pick; the file names the tier and overrides where the two differ. Only
the drafts whose contracts the compiler accepts become `SimWorkload`s (ADR-04: no published
contract, no reclaimable capacity), and the simulation reads their resolved `Contract`.

Demand over time is a list of `Run`s per workload: services run throughout; CI runners keep a
base pool and add a weekday daytime burst; Spark runs daily for 2-8 h; PyTorch trains for 1-3
days with gaps; Slurm batch arrives at random (about every 6 h) for 1-8 h.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from contracts import CompileResult, Contract
from schemas.contracts.tiers import CheckpointMethod, TierName
from schemas.events import RestartSemantics, Scheduler
from sim.clock import DAY_US, HOUR_US, MINUTE_US
from sim.contracts import MIB, Behaviour, Owner, contract_yaml, drain_budget_s

CHECKPOINT_BANDWIDTH_BYTES_PER_S = 80_000_000  # one instance's write rate to the checkpoint store
BESPOKE_SHARE = 0.05  # of workloads whose owners write a reviewed bespoke contract
Kind = Literal["spark", "pytorch", "ci", "service", "slurm"]
KIND_SHARES: tuple[tuple[Kind, float], ...] = (
    ("spark", 0.23),
    ("pytorch", 0.14),
    ("ci", 0.20),
    ("service", 0.25),
    ("slurm", 0.18),
)


@dataclass(frozen=True, slots=True)
class WorkloadDraft:
    """A workload and the contract file its owner wrote, before the compiler has read it."""

    workload_id: str
    kind: Kind
    families: tuple[str, ...]
    sizes_vcpu: tuple[int, ...]
    cluster: str
    unit_s: int  # a requeue unit's length (CI jobs); 0 if the work has no units
    stateless: bool  # nothing is lost with an instance (services)
    source_path: Path
    contract_yaml: str


@dataclass(frozen=True, slots=True)
class SimWorkload:
    """An admitted workload: its draft and the contract the compiler resolved from it."""

    draft: WorkloadDraft
    contract: Contract

    @property
    def workload_id(self) -> str:
        return self.draft.workload_id

    @property
    def kind(self) -> Kind:
        return self.draft.kind

    @property
    def scheduler(self) -> Scheduler:
        return self.contract.scheduler

    @property
    def checkpoint_bytes(self) -> int:
        """The final checkpoint of one instance; 0 if the workload writes none."""
        return self.contract.checkpoint.size_bytes


@dataclass(frozen=True, slots=True)
class Run:
    """A period the workload needs `vcpu` (with `floor_vcpu` of it guaranteed)."""

    run_id: str
    workload_id: str
    start_us: int
    end_us: int | None  # None: beyond the horizon
    vcpu: int
    floor_vcpu: int
    reason: str


@dataclass(frozen=True, slots=True)
class _Shape:
    title: str
    teams: tuple[str, ...]
    families: tuple[str, ...]
    sizes_vcpu: tuple[int, ...]
    targets_vcpu: tuple[int, ...]
    tiers: tuple[TierName, ...]  # drawn uniformly: repeats weigh a tier; the first is its usual
    checkpoint_method: CheckpointMethod
    checkpoint_mib: tuple[int, int]  # per instance, in steps of 256 MiB; (0, 0): none
    restart: RestartSemantics
    effects_on_completion_only: bool | None  # None: the tier's
    drain_budget_s: int | None  # at least this, more if the checkpoint needs it; None: the tier's
    unit_s: int = 0
    stateless: bool = False


# Checkpoint sizes stay below what rule (a) lets a 115 s drain write (5.1 GiB at 50 MB/s):
# a big model's checkpoint is sharded, each instance writes its part.
_SHAPES: dict[Kind, _Shape] = {
    "spark": _Shape(
        "daily Spark pipeline",
        ("etl", "risk", "ads", "search", "billing"),
        ("c7-amd", "c6-intel", "m7-amd", "m6-intel", "c8-arm"),
        (16, 32),
        (128, 192, 256, 384, 512),
        ("t3", "t3", "t3", "t2", "t4"),
        "spark",
        (256, 2048),
        "resume",
        True,
        90,
    ),
    "pytorch": _Shape(
        "PyTorch training",
        ("vision", "nlp", "recsys", "speech"),
        ("g5-a100", "l4-gpu"),
        (16, 24, 48),
        (96, 144, 192, 288),
        ("t2", "t2", "t3", "t4"),
        "pytorch",
        (1536, 5120),
        "resume",
        True,
        90,
    ),
    "ci": _Shape(
        "CI runners",
        ("platform", "web", "mobile", "data"),
        ("c7-amd", "c6-intel", "c8-arm"),
        (4, 8),
        (64, 96, 128, 192, 256),
        ("t4", "t4", "t4", "t5"),
        "none",
        (0, 0),
        "requeue",
        True,
        None,
        unit_s=1200,
    ),
    "service": _Shape(
        "stateless service",
        ("api", "render", "thumbs", "gateway", "search"),
        ("c7-amd", "c8-arm", "m7-amd"),
        (4, 8, 16),
        (32, 48, 64, 96, 128, 192),
        ("t1", "t1", "t2", "t2", "t3"),
        "none",
        (0, 0),
        "requeue",
        False,
        None,
        stateless=True,
    ),
    "slurm": _Shape(
        "Slurm batch jobs",
        ("genomics", "cfd", "quant", "climate"),
        ("h7-hpc", "c7-amd", "c6-intel"),
        (32, 64),
        (128, 256, 384, 512, 768),
        ("t3", "t3", "t4", "t5"),
        "slurm-requeue",
        (512, 4096),
        "resume",
        True,
        90,
    ),
}


def kind_counts(count: int) -> list[tuple[Kind, int]]:
    """How many workloads of each kind make up `count` (largest remainder)."""
    raw = [(kind, count * share) for kind, share in KIND_SHARES]
    counts = {kind: int(value) for kind, value in raw}
    by_remainder = sorted(raw, key=lambda kv: kv[1] - int(kv[1]), reverse=True)
    for kind, _ in by_remainder[: count - sum(counts.values())]:
        counts[kind] += 1
    return [(kind, counts[kind]) for kind, _ in KIND_SHARES]


def draft_workloads(
    rng: random.Random, count: int, region: str, start_us: int
) -> list[WorkloadDraft]:
    """`count` workloads of the five kinds, each with the contract file its owner wrote."""
    drafts: list[WorkloadDraft] = []
    for kind, how_many in kind_counts(count):
        for _ in range(how_many):
            drafts.append(_draft(rng, kind, len(drafts) + 1, region, start_us))
    return drafts


def admitted(drafts: Sequence[WorkloadDraft], compiled: CompileResult) -> list[SimWorkload]:
    """The drafts whose contract the compiler accepted, in draft order, with that contract."""
    contracts = {c.path: c.contract for c in compiled.accepted}
    return [SimWorkload(d, contracts[d.source_path]) for d in drafts if d.source_path in contracts]


def _draft(
    rng: random.Random, kind: Kind, number: int, region: str, start_us: int
) -> WorkloadDraft:
    shape = _SHAPES[kind]
    team = rng.choice(shape.teams)
    tier = rng.choice(shape.tiers)
    bespoke = rng.random() < BESPOKE_SHARE
    workload_id = f"{kind}-{team}-{number:03d}"
    scheduler: Scheduler = "slurm" if kind == "slurm" else "kubernetes"
    owner = Owner(workload_id, team, shape.title, scheduler, rng.choice(shape.targets_vcpu))
    size_bytes = 0
    interval_s = None
    drain_s = shape.drain_budget_s
    if shape.checkpoint_mib != (0, 0):
        size_bytes = rng.randrange(shape.checkpoint_mib[0], shape.checkpoint_mib[1] + 1, 256) * MIB
        interval_s = rng.choice((1800, 2700, 3600, 3600))
        drain_s = drain_budget_s(size_bytes, at_least_s=drain_s or 0)
    behaviour = Behaviour(
        checkpoint_method=shape.checkpoint_method,
        checkpoint_size_bytes=size_bytes,
        periodic_interval_s=interval_s,
        restart_semantics=shape.restart,
        effects_on_completion_only=shape.effects_on_completion_only,
        drain_budget_s=drain_s,
    )
    text = contract_yaml(rng, owner, tier, behaviour, bespoke=bespoke, start_us=start_us)
    return WorkloadDraft(
        workload_id=workload_id,
        kind=kind,
        families=shape.families,
        sizes_vcpu=shape.sizes_vcpu,
        cluster=f"slurm-{region}-hpc" if kind == "slurm" else f"k8s-{region}-1",
        unit_s=shape.unit_s,
        stateless=shape.stateless,
        source_path=Path(f"contracts/{team}/{workload_id}.yaml"),
        contract_yaml=text,
    )


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


# -- demand over time -------------------------------------------------------------------------


def plan_runs(rng: random.Random, workload: SimWorkload, start_us: int, end_us: int) -> list[Run]:
    """The workload's runs that start before `end_us`, in start order."""
    c = workload.contract
    spans: list[tuple[int, int | None, int, int, str]] = []  # start, end, vcpu, floor, reason
    if workload.kind == "service":
        begin = start_us + rng.randint(0, 10) * MINUTE_US
        spans.append((begin, None, c.target_vcpu, c.floor_vcpu, "service replicas"))
    elif workload.kind == "ci":
        base_vcpu = _round_up(c.target_vcpu * 2 // 5, 8)
        begin = start_us + rng.randint(0, 10) * MINUTE_US
        spans.append((begin, None, base_vcpu, c.floor_vcpu, "runner base pool"))
        for day_us in range(start_us - start_us % DAY_US, end_us, DAY_US):
            if (day_us // DAY_US + 3) % 7 >= 5:  # 1970-01-01 was a Thursday: skip weekends
                continue
            begin = day_us + 8 * HOUR_US + rng.randint(0, 30) * MINUTE_US
            finish = day_us + 18 * HOUR_US + rng.randint(0, 30) * MINUTE_US
            spans.append((begin, finish, c.target_vcpu - base_vcpu, 0, "weekday runner burst"))
    elif workload.kind == "spark":
        hour_us = rng.randint(0, 23) * HOUR_US
        for day_us in range(start_us - start_us % DAY_US, end_us, DAY_US):
            begin = day_us + hour_us + rng.randint(0, 20) * MINUTE_US
            finish = begin + rng.randint(120, 480) * MINUTE_US
            spans.append((begin, finish, c.target_vcpu, c.floor_vcpu, "daily pipeline"))
    elif workload.kind == "pytorch":
        begin = start_us + rng.randint(0, 12 * 60) * MINUTE_US
        while begin < end_us:
            finish = begin + rng.randint(24, 72) * HOUR_US
            spans.append((begin, finish, c.target_vcpu, c.floor_vcpu, "training run"))
            begin = finish + rng.randint(2 * 60, 12 * 60) * MINUTE_US
    else:  # slurm
        begin = start_us + int(rng.expovariate(1 / 6) * HOUR_US)
        while begin < end_us:
            finish = begin + rng.randint(60, 480) * MINUTE_US
            vcpu = _round_up(int(c.target_vcpu * rng.uniform(0.5, 1.0)), 32)
            spans.append((begin, finish, vcpu, c.floor_vcpu, "batch jobs pending"))
            begin = finish + int(rng.expovariate(1 / 6) * HOUR_US)
    spans = [s for s in spans if start_us <= s[0] < end_us]
    spans.sort(key=lambda s: s[0])
    return [
        Run(f"{c.workload}/run-{n:03d}", c.workload, begin, finish, vcpu, floor, reason)
        for n, (begin, finish, vcpu, floor, reason) in enumerate(spans, start=1)
    ]
