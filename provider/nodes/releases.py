"""Which bundle each node is served while canaries run (ADR-32): a fold of the region's events.

The canary decider (`streams.deciders.canary`) decides; this says what its decisions mean for
one node, and keeps each release's story for `spotcap canary status`. `Releases.observe` folds:

* `contract_published`: a workload's first bundle is in force; a later one waits for the
  canary's decision (until then every node keeps the bundle in force);
* `instance_launched`, `instance_lost`, `instance_deleted`: the pool each node is in;
* `bundle_canaried`: the nodes of the canary partition (its pools) get the new bundle;
* `bundle_promoted`: the new bundle is in force, for every node;
* `bundle_rolled_back` (the decider's, or an operator's): the canary ends; its nodes get the
  bundle in force again.

`sha_for(instance, workload)` is the SHA-256 of the bundle the node gets, or None when the
events say nothing of the workload (the bundle service then serves the compiler's current
file). Safe to read from the service's request threads while a follower folds (one lock).
Pure but for that lock: reading and writing the log is `follow`'s.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from schemas.events import (
    BundleCanaried,
    BundlePromoted,
    BundleRolledBack,
    ContractPublished,
    Envelope,
    InstanceDeleted,
    InstanceLaunched,
    InstanceLost,
)

TYPES = frozenset(
    {
        ContractPublished.EVENT_TYPE,
        InstanceLaunched.EVENT_TYPE,
        InstanceLost.EVENT_TYPE,
        InstanceDeleted.EVENT_TYPE,
        BundleCanaried.EVENT_TYPE,
        BundlePromoted.EVENT_TYPE,
        BundleRolledBack.EVENT_TYPE,
    }
)
TOPICS = ("demand", "lifecycle", "decisions")
"""The topics that hold `TYPES`."""
COLUMNS = ("workload", "version", "pools", "state", "since UTC", "hold h", "why")


@dataclass(frozen=True, slots=True)
class Release:
    """One canary release of a workload's bundle, as the events tell it."""

    workload_id: str
    contract_version: int
    contract_sha256: str
    previous_contract_sha256: str
    pool_ids: tuple[str, ...]
    canaried_at_us: int
    hold_s: int
    state: str = "running"  # running | promoted | rolled back
    ended_at_us: int | None = None
    rule: str | None = None  # of a rollback
    reason: str = ""
    event_id: str = ""  # the bundle_canaried decision's

    def as_json(self) -> dict[str, Any]:
        return {
            "workload_id": self.workload_id,
            "contract_version": self.contract_version,
            "contract_sha256": self.contract_sha256,
            "previous_contract_sha256": self.previous_contract_sha256,
            "canary_pool_ids": list(self.pool_ids),
            "canaried_at_us": self.canaried_at_us,
            "hold_s": self.hold_s,
            "state": self.state,
            "ended_at_us": self.ended_at_us,
            "rule": self.rule,
            "reason": self.reason,
        }


class Releases:
    """The region's bundles in force, running canaries and node pools (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.in_force: dict[str, tuple[int, str]] = {}  # workload -> (version, sha)
        self.running: dict[str, Release] = {}  # workload -> its running canary
        self.history: list[Release] = []  # every release, oldest first
        self.pools: dict[str, str] = {}  # instance -> pool
        self.last_us = 0  # the latest event time folded
        self._seen: set[str] = set()  # the releases' decisions folded (a resend is dropped)

    def observe(self, event: Envelope) -> None:
        if event.event_type not in TYPES or event.event_id in self._seen:
            return
        with self._lock:
            if isinstance(event.payload, BundleCanaried | BundlePromoted | BundleRolledBack):
                self._seen.add(event.event_id)  # the others fold the same way twice
            self.last_us = max(self.last_us, event.occurred_at)
            self._fold(event)

    def _fold(self, event: Envelope) -> None:
        p = event.payload
        if isinstance(p, InstanceLaunched):
            self.pools[p.instance_id] = p.pool_id
        elif isinstance(p, InstanceLost | InstanceDeleted):
            self.pools.pop(p.instance_id, None)
        elif isinstance(p, ContractPublished):
            self.in_force.setdefault(p.workload_id, (p.contract_version, p.contract_sha256))
        elif isinstance(p, BundleCanaried):
            release = Release(
                p.workload_id, p.contract_version, p.contract_sha256,
                p.previous_contract_sha256, p.canary_pool_ids, event.occurred_at, p.hold_s,
                event_id=event.event_id,
            )  # fmt: skip
            self.running[p.workload_id] = release
            self.history.append(release)
        elif isinstance(p, BundlePromoted):
            self.in_force[p.workload_id] = (p.contract_version, p.contract_sha256)
            self._end(p, event, "promoted", None)
        elif isinstance(p, BundleRolledBack):
            self._end(p, event, "rolled back", p.rule)

    def _end(
        self, p: BundlePromoted | BundleRolledBack, event: Envelope, state: str, rule: str | None
    ) -> None:
        running = self.running.get(p.workload_id)
        if running is None or running.contract_sha256 != p.contract_sha256:
            return  # no such canary running (a promotion with nothing to canary)
        del self.running[p.workload_id]
        ended = replace(running, state=state, ended_at_us=event.occurred_at, rule=rule,
                        reason=p.reason)  # fmt: skip
        self.history[self.history.index(running)] = ended

    def sha_for(self, instance: str, workload: str) -> str | None:
        """The SHA-256 of the bundle `instance` (of `workload`) is served (module docstring)."""
        with self._lock:
            running = self.running.get(workload)
            if running is not None and self.pools.get(instance) in running.pool_ids:
                return running.contract_sha256
            in_force = self.in_force.get(workload)
            return None if in_force is None else in_force[1]

    def releases(self) -> list[Release]:
        """Every canary release, oldest first."""
        with self._lock:
            return list(self.history)


def cells(r: Release) -> tuple[str, ...]:
    """A row of `spotcap canary status` (`COLUMNS`)."""
    since = time.strftime("%Y-%m-%d %H:%M", time.gmtime(r.canaried_at_us // 1_000_000))
    why = f"{r.rule}: {r.reason}" if r.rule else r.reason
    return (r.workload_id, str(r.contract_version), ", ".join(r.pool_ids), r.state, since,
            f"{r.hold_s / 3600:g}", why)  # fmt: skip
