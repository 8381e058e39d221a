"""The deciders (DESIGN.md §4): pure decision logic over keyed, frozen state in event time.

* exclusion watcher (ADR-07), `exclusion`, key pool: `pool_excluded`, `pool_readmitted`;
* scorer (ADR-07), `scorer`, key region: `pool_ranked` every 5 minutes;
* planner (ADR-08, ADR-22), `planner`, key workload: `placement_decided`;
* replacement (ADR-09), `replacement`, key workload: `replacement_requested`;
* fallback arbiter and floor keeper (ADR-23, ADR-24), `fallback`, key workload:
  `fallback_decided`, `fallback_returned`;
* actuator guard (ADR-11, ADR-12), `actuator`, key region: `actuation_throttled`,
  `actuation_refused`, `breaker_tripped`, `breaker_reset`;
* canary releases (ADR-32), `canary`, key region: `bundle_canaried`, `bundle_promoted`,
  `bundle_rolled_back`.

`types.step` is how a runtime drives any of them; `region.RegionView` is the broadcast view of
the region the workload deciders read; `settings.DeciderSettings` holds every parameter.
Nothing here reads a clock, does I/O or draws a random number (docs/deciders.md).
"""

from __future__ import annotations

from typing import Any

from streams.deciders.actuator import ActuatorGuard
from streams.deciders.canary import CanaryDecider
from streams.deciders.exclusion import ExclusionWatcher
from streams.deciders.fallback import FallbackArbiter
from streams.deciders.planner import Planner
from streams.deciders.region import RegionView
from streams.deciders.replacement import Replacement
from streams.deciders.scorer import Scorer
from streams.deciders.settings import DeciderSettings
from streams.deciders.types import Decider, Tick, step


def all_deciders(settings: DeciderSettings | None = None) -> tuple[Decider[Any], ...]:
    """The seven deciders with `settings`, in the order a runtime steps them for one input."""
    settings = settings or DeciderSettings()
    return (
        ExclusionWatcher(settings),
        Scorer(settings),
        Planner(settings),
        Replacement(settings),
        FallbackArbiter(settings),
        ActuatorGuard(settings),
        CanaryDecider(settings),
    )


__all__ = [
    "ActuatorGuard",
    "CanaryDecider",
    "Decider",
    "DeciderSettings",
    "ExclusionWatcher",
    "FallbackArbiter",
    "Planner",
    "RegionView",
    "Replacement",
    "Scorer",
    "Tick",
    "all_deciders",
    "step",
]
