"""The deciders' parameters: one typed, frozen settings object with the source design's values.

Every threshold, cap, window and dwell a decider uses is here, with the design record (ADR-nn)
it comes from. Where the source design names a figure (60 s exclusion, 5-minute ranking, 8
pools, 15% and 30% caps, 3 halls, 15-minute floor rebuild, 10 mutating calls/s) that figure is
the default. Where it names only the mechanism (hysteresis, sustained health, minimum dwell,
breaker thresholds, gradual recovery) the default is a planning value chosen here and said so;
the proof phase replaces each with a measurement. Times are whole seconds of *event time*.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streams.deciders.authority import ChangeTrust


@dataclass(frozen=True, slots=True)
class ExclusionSettings:
    """The exclusion watcher (ADR-07: pools are excluded on a sixty-second stream)."""

    burst_window_s: int = 60
    """ADR-07, quality target 'exclusion <= 60 s': the window of the burst rule. A pool with
    `burst_min_reclaims` or more reclamations inside any 60 s of event time (and far more than its
    record predicts for that exposure) is excluded on the event that completes the burst."""
    burst_min_reclaims: int = 3
    """Planning value: fewer reclamations than this inside the burst window never make a burst."""
    rate_window_s: int = 6 * 3600
    """Planning value: the sliding window of the rate rule. Six hours hold enough instance-hours
    for a pool reclaimed at ten times its record to stand out from chance."""
    rate_min_reclaims: int = 3
    """Planning value: the rate rule needs at least this many reclamations in its window."""
    rate_factor: float = 3.0
    """Planning value: the observed rate must reach this multiple of the expected rate (the
    record), whichever rule fires."""
    significance: float = 1e-4
    """Planning value: the Poisson tail probability of the observed count under the expected
    rate must be below this, so that a pool is not excluded for ordinary bad luck."""
    unrecorded_expected_per_h: float = 0.02
    """Planning value: the expected rate (per instance-hour) of a reclaimable pool whose
    `pool_registered` carries no record."""
    readmission_healthy_s: int = 3600
    """ADR-07 hysteresis, planning value: an excluded pool is readmitted only after it has been
    healthy this long (no burst, observed rate at most `readmission_factor` x expected)."""
    readmission_factor: float = 1.5
    """ADR-07 hysteresis, planning value: healthy means at most this multiple of the expected
    rate, below the exclusion factor, so a pool near the threshold cannot flap."""
    readmission_backoff_doublings: int = 3
    """Planning value: a pool excluded again within `strike_memory_s` of its last readmission
    must stay healthy twice as long as the time before, up to 2^this x `readmission_healthy_s`
    (8 h), so a pool that keeps misbehaving stays out rather than flapping."""
    strike_memory_s: int = 24 * 3600
    """Planning value: how long a readmitted pool's earlier exclusions count against it."""

    def __post_init__(self) -> None:
        _positive(self, "burst_window_s", "rate_window_s", "readmission_healthy_s")
        if self.readmission_factor >= self.rate_factor:
            raise ValueError(
                f"readmission_factor {self.readmission_factor} must be below rate_factor "
                f"{self.rate_factor}: readmission needs hysteresis (ADR-07)"
            )


@dataclass(frozen=True, slots=True)
class ScoringSettings:
    """The scorer (ADR-07: pools are ranked on a five-minute clock)."""

    ranking_interval_s: int = 300
    """ADR-07, quality target 'ranking refresh every 5 min': a ranking round at every 5-minute
    boundary of event time."""
    observation_window_s: int = 24 * 3600
    """Planning value: the window the observed interruption rate of a ranking is measured over."""
    bucket_s: int = 300
    """The resolution of the observation window (reclamations and exposure per bucket)."""
    min_exposure_instance_h: float = 1.0
    """Planning value: below this many instance-hours in the window a pool's observed rate says
    too little, and the scorer uses its record (the expected rate) instead."""
    interruption_weight: float = 20.0
    """Planning value: how much one interruption per instance-hour lowers a score. A score is
    ``log10(1 + forward vCPU) - interruption_weight x observed rate - price_weight x price``:
    depth first (ADR-08 prefers depth over price), then interruptions, then price."""
    price_weight: float = 10.0
    """Planning value: how much a price of one euro per vCPU-hour lowers a score."""
    saving_weight: float = 60.0
    """How much a saving of one euro per vCPU-hour (the rate card's guaranteed rate less its
    price: what the ledger credits a useful vCPU-hour on the pool with) raises a score.
    Tuned on the honest figure (issue 22, docs/deciders.md): at 0 the deepest pools won
    whatever they saved and the deciders saved less than the baseline stand-in; at 60 a
    CPU pool's spread of discounts (about EUR 0.01 per vCPU-hour) weighs like a tenfold
    difference in depth, and an A100's (about EUR 0.09) outweighs it."""

    def __post_init__(self) -> None:
        _positive(self, "ranking_interval_s", "observation_window_s", "bucket_s")
        if self.observation_window_s % self.bucket_s:
            raise ValueError("observation_window_s must be a whole number of bucket_s")


@dataclass(frozen=True, slots=True)
class PlacementSettings:
    """The planner and the replacement decider (ADR-08, ADR-09, ADR-22)."""

    min_pools: int = 8
    """ADR-08: reclaimable capacity spread over at least 8 pools."""
    pool_cap_share: float = 0.15
    """ADR-08: no pool above 15% of the workload's reclaimable capacity."""
    group_cap_share: float = 0.30
    """ADR-06, ADR-08: no correlation group above 30% of the workload's reclaimable capacity."""
    floor_min_halls: int = 3
    """ADR-22, quality target 'guaranteed floor': the floor spread over at least 3 halls."""
    committed_reserve_share: float = 0.25
    """Planning value: what the reclaimable spread leaves unplaced goes on committed room the
    floors leave, before the fallback arbiter (reservations are paid for whether used or not,
    so it spends nothing, and what runs on them comes off the idle floor; ADR-22: committed
    capacity first), keeping this share of each committed pool's capacity free for floors.
    1 keeps all of it for floors: no work beyond the floor goes on committed capacity."""
    retry_s: int = 300
    """Planning value: how often the vCPU of an open claim that no pool had room for are
    placed again (only what the claims still lack; a retry that places nothing says nothing).
    The baseline stand-in tops its claims up every 5 minutes."""

    def __post_init__(self) -> None:
        if not 0 < self.pool_cap_share <= self.group_cap_share <= 1:
            raise ValueError("caps must satisfy 0 < pool_cap_share <= group_cap_share <= 1")
        if self.min_pools < 1 or self.floor_min_halls < 1:
            raise ValueError("min_pools and floor_min_halls must be at least 1")
        if self.retry_s < 1:
            raise ValueError("retry_s must be at least 1")
        if not 0 <= self.committed_reserve_share <= 1:
            raise ValueError("committed_reserve_share must be between 0 and 1")


@dataclass(frozen=True, slots=True)
class FallbackSettings:
    """The fallback arbiter and floor keeper (ADR-23, ADR-24)."""

    floor_rebuild_s: int = 15 * 60
    """ADR-22, quality target: a floor broken by a hall loss is rebuilt within 15 minutes."""
    floor_check_s: int = 5 * 60
    """Planning value: how long the floor keeper lets a committed replacement land before it
    restores the floor on guaranteed capacity itself; well inside `floor_rebuild_s`."""
    stagger_step_s: int = 60
    """ADR-24, planning value: during a wave (a cause with a correlation id), a workload of
    priority p falls back p x this after the wave's event that triggered it; priority 0 first."""
    min_dwell_s: int = 30 * 60
    """ADR-24, planning value: the least time work stays on guaranteed capacity before any
    return, so fallback and return cannot oscillate."""
    return_healthy_s: int = 20 * 60
    """ADR-24, planning value: sustained health before a return: this long without a notice or
    loss for the workload, and at least `PlacementSettings.min_pools` eligible pools."""
    return_recheck_s: int = 5 * 60
    """How long after a return found the region unready it looks again."""
    replacement_s: int = 180
    """Quality target 'replacement serving <= 180 s cold': progress a loss costs while the
    replacement arrives; an input to the deadline rule."""
    deadline_safety: float = 1.0
    """The deadline rule (Uniform Progress, 'Can't Be Late', NSDI'24): move to guaranteed
    capacity once slack <= this x the expected interruption loss until the deadline."""

    def __post_init__(self) -> None:
        _positive(self, "floor_rebuild_s", "min_dwell_s", "return_recheck_s")
        if self.floor_check_s >= self.floor_rebuild_s:
            raise ValueError(
                f"floor_check_s {self.floor_check_s} must be below floor_rebuild_s "
                f"{self.floor_rebuild_s}, or the floor cannot be rebuilt in time (ADR-22)"
            )


@dataclass(frozen=True, slots=True)
class ActuatorSettings:
    """The actuator guard (ADR-12: regional token budgets, termination breakers, gradual
    recovery; ADR-11, ADR-29: only the orchestrator's own instances are terminated)."""

    orchestrator_id: str = "spotcap"
    """ADR-11: the value of the `spotcap.io/owner` tag on instances the orchestrator owns."""
    calls_per_s: float = 10.0
    """ADR-12, source design: 10 mutating provider calls per second per region."""
    burst_calls: int = 10
    """Planning value: calls the bucket holds when full (one second of budget)."""
    termination_window_s: int = 60
    """Planning value: the window the termination breaker counts deletions over."""
    termination_threshold: int = 50
    """Planning value: more deletions than this in the window open the breaker."""
    breaker_open_s: int = 10 * 60
    """Planning value: how long an open termination breaker refuses deletions."""
    outage_failures: int = 5
    """Planning value: this many failed launches in a row mean the provider is out."""
    recovery_ratio: float = 0.1
    """ADR-12 gradual recovery: the share of the budget the actuator resumes at."""
    recovery_step_s: int = 60
    """ADR-12 gradual recovery: the budget doubles every this long until it is whole."""

    def __post_init__(self) -> None:
        if self.calls_per_s <= 0 or self.burst_calls < 1:
            raise ValueError("calls_per_s must be positive and burst_calls at least 1")
        if not 0 < self.recovery_ratio <= 1:
            raise ValueError("recovery_ratio must be in (0, 1]")


@dataclass(frozen=True, slots=True)
class CanarySettings:
    """Canary releases of contract bundles (ADR-32): a new bundle goes to a canary partition
    of the workload's pools first and is promoted only when its health figures hold for the
    declared hold. Every value here is a planning value."""

    share_ratio: float = 0.1
    """The canary partition: this share of the pools the workload runs in (at least one)."""
    hold_s: int = 6 * 3600
    """How long the figures must hold before the bundle goes to every node."""
    max_notice_to_drain_p99_ms: int = 5_000
    """Notice to drain start p99 in the partition above this rolls the bundle back."""
    max_drain_failures: int = 0
    """More drains completed unverified or overrun in the partition roll it back."""
    max_losses_without_drain: int = 0
    """More instances of the partition lost without a verified drain roll it back."""
    max_dead_letters: int = 10
    """More records dead-lettered in the region during the hold roll it back."""
    min_drains: int = 1
    """Fewer drains in the partition by the end of the hold: not proven, rolled back."""

    def __post_init__(self) -> None:
        _positive(self, "share_ratio", "hold_s")
        if self.share_ratio > 1:
            raise ValueError(f"share_ratio {self.share_ratio} must be at most 1 (all pools)")


@dataclass(frozen=True, slots=True)
class DeciderSettings:
    """Every decider's parameters, in one object; the defaults are the source design's."""

    exclusion: ExclusionSettings = field(default_factory=ExclusionSettings)
    scoring: ScoringSettings = field(default_factory=ScoringSettings)
    placement: PlacementSettings = field(default_factory=PlacementSettings)
    fallback: FallbackSettings = field(default_factory=FallbackSettings)
    actuator: ActuatorSettings = field(default_factory=ActuatorSettings)
    trust: ChangeTrust | None = None
    """ADR-30: the keys a published change of authority (a floor or a cap raised, the approver
    changed) must be signed by, the owner's and a higher authority's, to take effect in the
    workload deciders (`streams.deciders.authority`). None: every published version takes
    effect (the compiler alone holds changes to two signatures). Not a decision parameter:
    not settable with ``--set``; a runtime records it as an item of its order
    (``keyring_trusted``), and a demo run's record keeps it beside the settings."""
    canary: CanarySettings = field(default_factory=CanarySettings)


def _positive(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if value <= 0:
            raise ValueError(f"{type(obj).__name__}.{name} must be positive, not {value}")
