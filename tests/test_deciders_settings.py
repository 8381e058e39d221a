"""The deciders' settings: the source design's figures by default, nonsense refused."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from streams.deciders.settings import (
    ActuatorSettings,
    DeciderSettings,
    ExclusionSettings,
    FallbackSettings,
    PlacementSettings,
    ScoringSettings,
)


def test_the_defaults_are_the_source_designs_figures() -> None:
    s = DeciderSettings()
    assert s.exclusion.burst_window_s == 60  # exclusion <= 60 s (ADR-07)
    assert s.scoring.ranking_interval_s == 300  # a ranking every 5 minutes (ADR-07)
    assert s.placement.min_pools == 8  # ADR-08
    assert s.placement.pool_cap_share == 0.15
    assert s.placement.group_cap_share == 0.30
    assert s.placement.floor_min_halls == 3  # ADR-22
    assert s.fallback.floor_rebuild_s == 15 * 60  # floor rebuilt within 15 minutes
    assert s.fallback.replacement_s == 180  # replacement serving <= 180 s cold
    assert s.actuator.calls_per_s == 10.0  # 10 mutating calls a second (ADR-12)
    assert s.exclusion.readmission_factor < s.exclusion.rate_factor  # hysteresis


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ExclusionSettings(readmission_factor=3.0), "hysteresis"),
        (lambda: ExclusionSettings(burst_window_s=0), "burst_window_s must be positive"),
        (lambda: ScoringSettings(observation_window_s=1000), "whole number of bucket_s"),
        (lambda: PlacementSettings(pool_cap_share=0.4), "pool_cap_share <= group_cap_share"),
        (lambda: FallbackSettings(floor_check_s=900), "cannot be rebuilt in time"),
        (lambda: ActuatorSettings(calls_per_s=0), "calls_per_s must be positive"),
        (lambda: ActuatorSettings(recovery_ratio=0), r"recovery_ratio must be in \(0, 1\]"),
    ],
)
def test_settings_that_cannot_work_are_refused_saying_why(
    build: Callable[[], object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        build()
