"""Who may read what: every route of the app belongs to one area, and each role reaches some
areas (docs/security.md has the table). A route with no area is refused to everyone, so a new
route is closed until it is given one.

| area | what | roles |
|---|---|---|
| fleet | pools, rankings, exclusions, lag, the last wave, metrics, the fleet page | SRE |
| workloads | workloads, their spread, instances, fallbacks, `why`, their pages | SRE; owner: own |
| savings | the savings reports (the ledger) | SRE, finance, auditor; owner: own rows |
| reports | the savings page (every workload, what-if form) | SRE, finance, auditor |
| what-if | what-if accounting | finance |
| archive | the archive's months and their verification | auditor |
| health | whether the stores answer | every role |

A workload owner sees their team's workloads only, and another team's workload exactly as a
missing one: the same status and the same sentence (`NotFoundError`), or the same empty rows.
"""

from __future__ import annotations

from fastapi import Request

from console.access import ReadAccess
from console.signin import EVERYONE, SignInError, Viewer
from projections.read.ownership import owned_by

AREAS: dict[tuple[str, str], str] = {
    ("GET", "/api/v1/pools"): "fleet",
    ("GET", "/api/v1/rankings"): "fleet",
    ("GET", "/api/v1/exclusions"): "fleet",
    ("GET", "/api/v1/lag"): "fleet",
    ("GET", "/api/v1/waves/last"): "fleet",
    ("GET", "/metrics"): "fleet",
    ("GET", "/"): "fleet",
    ("GET", "/api/v1/instances"): "workloads",
    ("GET", "/api/v1/workloads"): "workloads",
    ("GET", "/api/v1/workloads/{id}/spread"): "workloads",
    ("GET", "/api/v1/fallbacks"): "workloads",
    ("GET", "/api/v1/why/{id}"): "workloads",
    ("GET", "/workloads"): "workloads",
    ("GET", "/workloads/{workload_id}"): "workloads",
    ("GET", "/why"): "workloads",
    ("GET", "/api/v1/reports/savings"): "savings",
    ("GET", "/api/v1/reports/savings/daily"): "savings",
    ("GET", "/savings"): "reports",
    ("GET", "/api/v1/reports/what-if"): "what-if",
    ("GET", "/api/v1/archive"): "archive",
    ("POST", "/api/v1/archive/verify"): "archive",
    ("GET", "/archive"): "archive",
    ("POST", "/archive/verify"): "archive",
    ("GET", "/api/v1/health"): "health",
}

ROLE_AREAS: dict[str, frozenset[str]] = {
    "sre": frozenset({"fleet", "workloads", "savings", "reports", "health"}),
    "owner": frozenset({"workloads", "savings", "health"}),
    "finance": frozenset({"savings", "reports", "what-if", "health"}),
    "auditor": frozenset({"savings", "reports", "archive", "health"}),
}
OWNER_SCOPED = frozenset({"workloads", "savings"})


def allowed(viewer: Viewer, area: str | None) -> bool:
    return area is not None and any(area in ROLE_AREAS[r] for r in viewer.roles)


def authorize(request: Request, viewer: Viewer) -> None:
    """Let `viewer` through to the request's route, or raise 403 saying who may."""
    path = str(getattr(request.scope.get("route"), "path_format", request.url.path))
    area = AREAS.get((request.method, path))
    if not allowed(viewer, area):
        who = sorted(r for r, areas in ROLE_AREAS.items() if area in areas) or ["nobody"]
        raise SignInError(
            403,
            f"{request.method} {path} is for the {' and '.join(who)} role"
            f"{'s' if len(who) > 1 else ''}, and your token grants "
            f"{', '.join(sorted(viewer.roles))}: ask for the group that grants it",
        )
    request.state.viewer = viewer


def viewer_of(request: Request) -> Viewer:
    """The viewer `authorize` let through (EVERYONE when the app signs nobody in)."""
    viewer: Viewer = getattr(request.state, "viewer", EVERYONE)
    return viewer


def hidden(access: ReadAccess, viewer: Viewer, workload: str | None, *, every: bool) -> bool:
    """Whether rows of `workload` (None: of every workload) are hidden from the viewer, who
    then gets the answer for a missing workload. Never when the viewer reads every workload's
    rows (`every`); an owner reads one workload at a time (403 when none is named) and only
    their team's."""
    if every:
        return False
    if workload is None:
        raise SignInError(
            403,
            "a workload owner reads one workload at a time: add workload=ID naming one of your "
            "team's workloads (listed at /api/v1/workloads)",
        )
    with access.fleet() as conn:
        return not owned_by(conn, workload, viewer.teams)


def reads_every_workload(viewer: Viewer) -> bool:
    """Whether the viewer reads every workload's savings rows (not only an owner's own)."""
    return viewer.fleet_wide or bool({"finance", "auditor"} & viewer.roles)
