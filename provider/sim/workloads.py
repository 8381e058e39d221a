"""The simulated workloads: who they are, what they declared, and when they need capacity.

Five kinds (Spark, PyTorch training, CI runners, stateless services, Slurm batch) over the five
tiers. Each workload's contract is a `SimContract`, a plain dataclass holding what the
`contract_published` event carries (the real contract model lives elsewhere and is not
imported here); its sha256 is that of its canonical JSON.

Demand over time is a list of `Run`s per workload: services run throughout; CI runners keep a
base pool and add a weekday daytime burst; Spark runs daily for 2-8 h; PyTorch trains for 1-3
days with gaps; Slurm batch arrives at random (about every 6 h) for 1-8 h.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass, fields
from typing import Literal

from provider.sim.clock import DAY_US, HOUR_US, MINUTE_US
from schemas.events import ContractPublished, RestartSemantics, Scheduler, Tier

CHECKPOINT_BANDWIDTH_BYTES_PER_S = 80_000_000  # one instance's write rate to the checkpoint store
Kind = Literal["spark", "pytorch", "ci", "service", "slurm"]
KIND_SHARES: tuple[tuple[Kind, float], ...] = (
    ("spark", 0.23),
    ("pytorch", 0.14),
    ("ci", 0.20),
    ("service", 0.25),
    ("slurm", 0.18),
)


@dataclass(frozen=True, slots=True)
class SimContract:
    """A workload's interruption contract, as the simulation declares it."""

    workload_id: str
    contract_version: int
    owner: str
    tier: Tier
    drain_budget_s: int
    restart_semantics: RestartSemantics
    checkpoint_on_notice: bool
    proactive_drain_on_advisory: bool
    tolerated_interruption_per_h: float
    target_vcpu: int
    floor_vcpu: int
    spend_cap_eur_micros: int
    approver: str
    priority: int
    checkpoint_interval_s: int | None
    deadline_at: int | None
    source_commit: str
    scheduler: Scheduler
    checkpoint_method: str  # none | application | spark | pytorch | slurm-requeue
    checkpoint_size_bytes: int | None
    effects_on_completion_only: bool
    source_path: str

    def canonical_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    def sha256(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    def published(self) -> ContractPublished:
        # Only the fields this build's event has: the event gained optional fields over time.
        known = {f.name for f in fields(ContractPublished)}
        values = {k: v for k, v in asdict(self).items() if k in known}
        return ContractPublished(contract_sha256=self.sha256(), **values)


@dataclass(frozen=True, slots=True)
class SimWorkload:
    contract: SimContract
    kind: Kind
    families: tuple[str, ...]
    sizes_vcpu: tuple[int, ...]
    scheduler: Scheduler
    cluster: str
    checkpoint_bytes: int  # per instance; 0 if the workload does not checkpoint
    unit_s: int  # a requeue unit's length (CI jobs); 0 if not requeued

    @property
    def workload_id(self) -> str:
        return self.contract.workload_id


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
    teams: tuple[str, ...]
    families: tuple[str, ...]
    sizes_vcpu: tuple[int, ...]
    targets_vcpu: tuple[int, ...]
    tiers: tuple[Tier, ...]  # drawn uniformly: repeats weigh a tier
    restart: RestartSemantics
    drain_budget_s: int
    checkpoint_gib: tuple[float, float]  # (0, 0): no checkpoints
    checkpoint_method: str
    unit_s: int = 0


_SHAPES: dict[Kind, _Shape] = {
    "spark": _Shape(
        ("etl", "risk", "ads", "search", "billing"),
        ("c7-amd", "c6-intel", "m7-amd", "m6-intel", "c8-arm"),
        (16, 32),
        (128, 192, 256, 384, 512),
        ("t2", "t3", "t3", "t4"),
        "resume",
        90,
        (0.25, 2.0),
        "spark",
    ),
    "pytorch": _Shape(
        ("vision", "nlp", "recsys", "speech"),
        ("g5-a100", "l4-gpu"),
        (16, 24, 48),
        (96, 144, 192, 288),
        ("t2", "t3", "t3", "t4"),
        "resume",
        110,
        (2.0, 10.0),
        "pytorch",
    ),
    "ci": _Shape(
        ("platform", "web", "mobile", "data"),
        ("c7-amd", "c6-intel", "c8-arm"),
        (4, 8),
        (64, 96, 128, 192, 256),
        ("t4", "t5"),
        "requeue",
        60,
        (0.0, 0.0),
        "none",
        unit_s=1200,
    ),
    "service": _Shape(
        ("api", "render", "thumbs", "gateway", "search"),
        ("c7-amd", "c8-arm", "m7-amd"),
        (4, 8, 16),
        (32, 48, 64, 96, 128, 192),
        ("t1", "t1", "t2", "t2", "t3"),
        "restart",
        30,
        (0.0, 0.0),
        "none",
    ),
    "slurm": _Shape(
        ("genomics", "cfd", "quant", "climate"),
        ("h7-hpc", "c7-amd", "c6-intel"),
        (32, 64),
        (128, 256, 384, 512, 768),
        ("t3", "t4", "t5"),
        "resume",
        100,
        (0.5, 4.0),
        "slurm-requeue",
    ),
}

# tier: (floor share, tolerated interruptions per instance-hour, priority, spend cap EUR/month)
_TIERS: dict[Tier, tuple[float, float, int, int]] = {
    "t1": (0.30, 0.002, 0, 2000),
    "t2": (0.10, 0.005, 1, 1000),
    "t3": (0.0, 0.01, 2, 400),
    "t4": (0.0, 0.02, 3, 100),
    "t5": (0.0, 0.05, 4, 0),
    "bespoke": (0.0, 0.01, 2, 0),
}


def kind_counts(count: int) -> list[tuple[Kind, int]]:
    """How many workloads of each kind make up `count` (largest remainder)."""
    raw = [(kind, count * share) for kind, share in KIND_SHARES]
    counts = {kind: int(value) for kind, value in raw}
    by_remainder = sorted(raw, key=lambda kv: kv[1] - int(kv[1]), reverse=True)
    for kind, _ in by_remainder[: count - sum(counts.values())]:
        counts[kind] += 1
    return [(kind, counts[kind]) for kind, _ in KIND_SHARES]


def generate_workloads(rng: random.Random, count: int, region: str) -> list[SimWorkload]:
    workloads: list[SimWorkload] = []
    for kind, how_many in kind_counts(count):
        for _ in range(how_many):
            workloads.append(_workload(rng, kind, len(workloads) + 1, region))
    return workloads


def _workload(rng: random.Random, kind: Kind, number: int, region: str) -> SimWorkload:
    shape = _SHAPES[kind]
    team = rng.choice(shape.teams)
    tier = rng.choice(shape.tiers)
    floor_share, tolerated_per_h, priority, cap_eur = _TIERS[tier]
    target_vcpu = rng.choice(shape.targets_vcpu)
    resumes = shape.checkpoint_gib != (0.0, 0.0)
    checkpoint_bytes = int(rng.uniform(*shape.checkpoint_gib) * 2**30) if resumes else 0
    # A final checkpoint is declared only where it fits the drain budget (the compiler's check);
    # bigger ones rely on the periodic checkpoints alone.
    write_s = checkpoint_bytes / CHECKPOINT_BANDWIDTH_BYTES_PER_S
    final_fits = resumes and write_s <= shape.drain_budget_s
    scheduler: Scheduler = "slurm" if kind == "slurm" else "kubernetes"
    interval_s = None
    if resumes:
        interval_s = {"t1": 900, "t2": 1800, "t3": 1800}.get(tier, 3600)
    workload_id = f"{kind}-{team}-{number:03d}"
    contract = SimContract(
        workload_id=workload_id,
        contract_version=1,
        owner=f"team-{team}",
        tier=tier,
        drain_budget_s=shape.drain_budget_s,
        restart_semantics=shape.restart,
        checkpoint_on_notice=final_fits,
        proactive_drain_on_advisory=tier == "t1",
        tolerated_interruption_per_h=tolerated_per_h,
        target_vcpu=target_vcpu,
        floor_vcpu=_round_up(int(target_vcpu * floor_share), 16),
        spend_cap_eur_micros=cap_eur * 1_000_000,
        approver=f"lead-{team}",
        priority=priority,
        checkpoint_interval_s=interval_s,
        deadline_at=None,
        source_commit=f"{rng.getrandbits(160):040x}",
        scheduler=scheduler,
        checkpoint_method=shape.checkpoint_method,
        checkpoint_size_bytes=checkpoint_bytes or None,
        effects_on_completion_only=shape.restart != "restart",
        source_path=f"contracts/{team}/{workload_id}.yaml",
    )
    return SimWorkload(
        contract=contract,
        kind=kind,
        families=shape.families,
        sizes_vcpu=shape.sizes_vcpu,
        scheduler=scheduler,
        cluster=f"slurm-{region}-hpc" if kind == "slurm" else f"k8s-{region}-1",
        checkpoint_bytes=checkpoint_bytes,
        unit_s=shape.unit_s,
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
        Run(f"{c.workload_id}/run-{n:03d}", c.workload_id, begin, finish, vcpu, floor, reason)
        for n, (begin, finish, vcpu, floor, reason) in enumerate(spans, start=1)
    ]
