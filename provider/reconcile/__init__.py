"""The provider's tags against the fleet state (ADR-10, ADR-11): the reconciler, level-triggered
on a clock (`reconciler`, `spotcap run reconciler`), its pure comparison (`compare`), and the
read-only rebuild of the fleet from the provider's tags and the log's tail (`rebuild`,
`spotcap rebuild postgres --from-provider`).

What it may import: `schemas`, `contracts`, `streams` (the log), `projections` (the fleet
state), `provider` (the seam: list, get; never a mutating call). Who calls it: the command line.
"""

from provider.reconcile.compare import (
    MISSING,
    OWNER_CHANGED,
    UNKNOWN,
    Drift,
    StateInstance,
    compare,
)
from provider.reconcile.rebuild import (
    RebuildReport,
    launched_fact,
    rebuild_fleet,
    rebuild_from_provider,
)
from provider.reconcile.reconciler import (
    GRACE_S,
    Reconciler,
    RoundReport,
    kinds,
    live_instances,
    run_reconciler,
)

__all__ = [
    "GRACE_S",
    "MISSING",
    "OWNER_CHANGED",
    "UNKNOWN",
    "Drift",
    "RebuildReport",
    "Reconciler",
    "RoundReport",
    "StateInstance",
    "compare",
    "kinds",
    "launched_fact",
    "live_instances",
    "rebuild_fleet",
    "rebuild_from_provider",
    "run_reconciler",
]
