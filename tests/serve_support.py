"""A demo home served by `spotcap serve` in its own process, for the HTTP API's tests.

The demo history (`spotcap demo --days 1`) is made by a `spotcap` process, and the server is
another: chdb lets one process at a time hold an embedded ledger, and this test process holds the
session's shared chdb path, so neither child is given SPOTCAP_CHDB_PATH (each reads the home's own
ledger under <home>/ledger). A few hand-made decisions (a ranking, exclusions, a readmission,
fallbacks, a drain) are written into the fleet state so that every endpoint has rows to answer.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from projections.postgres.writer import FleetWriter
from schemas.events import (
    DrainCompleted,
    DrainStarted,
    FallbackDecided,
    PoolExcluded,
    PoolRanked,
    PoolReadmitted,
)
from spotcap.config import Settings
from spotcap.wiring import stores
from tests.projection_support import T0_US, event, positioned

SPOTCAP = str(Path(sys.executable).with_name("spotcap"))
_URL = re.compile(r" on (http://[0-9.]+:[0-9]+): ")
START_TIMEOUT_S = 120.0  # a loaded 2-core machine imports the web stack and PostgreSQL slowly
REQUEST_TIMEOUT_S = 60.0


def child_env() -> dict[str, str]:
    """The environment of a `spotcap` child: its ledger is the home's own (see above)."""
    return {k: v for k, v in os.environ.items() if k != "SPOTCAP_CHDB_PATH"}


def spotcap(home: Path, *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SPOTCAP, "--home", str(home), *args],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=timeout_s,
        check=False,
    )


@dataclass
class Reply:
    status: int
    content_type: str
    headers: dict[str, str]
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


def get(url: str, accept: str | None = None) -> Reply:
    return send(urllib.request.Request(url, headers={"Accept": accept} if accept else {}))


def post(url: str, form: dict[str, str] | None = None) -> Reply:
    """A POST, with `form` as a browser sends a form (urlencoded) when given."""
    data = urllib.parse.urlencode(form).encode() if form is not None else b""
    headers = {"Content-Type": "application/x-www-form-urlencoded"} if form is not None else {}
    return send(urllib.request.Request(url, data=data, headers=headers, method="POST"))


def send(request: urllib.request.Request) -> Reply:
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
            body = response.read().decode()
            headers = {k.lower(): v for k, v in response.headers.items()}
            return Reply(response.status, headers.get("content-type", ""), headers, body)
    except urllib.error.HTTPError as error:
        headers = {k.lower(): v for k, v in error.headers.items()}
        return Reply(error.code, headers.get("content-type", ""), headers, error.read().decode())


@dataclass
class Story:
    """The hand-made decisions and the demo's ids they name."""

    pools: list[str]
    workload: str
    lost_instance: str
    excluded_pool: str
    readmitted_pool: str
    exclusion_event_ids: list[str] = field(default_factory=list)
    decisions: dict[str, int] = field(default_factory=dict)
    fallback_eur: dict[str, float] = field(default_factory=dict)


def write_story(settings: Settings) -> Story:
    """Decisions of every kind (ranking, exclusions, readmission, fallbacks, a drain) about the
    demo's own pools, workload and lost instance: the stand-in orchestrator makes none, and the
    deciders not all of them in one day."""
    conn = stores(settings).open_fleet()
    try:
        pools = [r[0] for r in conn.execute(
            "SELECT pool_id FROM pools WHERE purchase_model = 'reclaimable' ORDER BY pool_id"
            " LIMIT 3")]  # fmt: skip
        # A workload with an instance that was lost (and maybe replaced since).
        (workload, lost) = conn.execute(
            "SELECT workload_id, min(instance_id) FROM instances WHERE state IN ('lost',"
            " 'replaced') AND workload_id IS NOT NULL GROUP BY workload_id ORDER BY workload_id"
            " LIMIT 1"
        ).fetchone() or ("", "")
        assert len(pools) == 3 and workload and lost, "the demo home has no pools or losses"
        window = (T0_US - 60_000_000, T0_US)
        ranked = [
            event(PoolRanked("r-test", p, n + 1, 3, 0.9 - n / 10, 512, 0.01, 6_000 + n, f"g{n}",
                             300, ()), 0, name=f"rank-{p}", region=settings.region)
            for n, p in enumerate(pools)
        ]  # fmt: skip
        evidence = tuple(e.event_id for e in ranked)  # any journal events will do
        first = event(PoolExcluded(pools[0], "burst", 0.5, 0.01, 6, *window, evidence[:2]),
                      10, name="excl-1", region=settings.region)  # fmt: skip
        readmit = event(PoolReadmitted(pools[0], 900, 0.0, 0.01, (), first.event_id), 1000,
                        name="readmit-1", region=settings.region)  # fmt: skip
        second = event(PoolExcluded(pools[1], "rate", 0.2, 0.01, 4, *window, evidence[2:]), 1100,
                       name="excl-2", region=settings.region)  # fmt: skip
        within = event(FallbackDecided(workload, "within_cap", 16, 1_500_000, 4_000_000,
                                       "ops-lead", 2, "floor broken"), 1200, name="fb-1",
                       region=settings.region)  # fmt: skip
        escalated = event(FallbackDecided(workload, "escalated", 32, 6_000_000, 4_000_000,
                                          "ops-lead", 2, "over the cap"), 1300, name="fb-2",
                          region=settings.region)  # fmt: skip
        started = event(DrainStarted(lost, workload, "slurm", 90, "notice"), 1400,
                        name="drain-1", region=settings.region)  # fmt: skip
        drained = event(DrainCompleted(lost, workload, "slurm", 41.5, True, False, False, 70.0),
                        1440, name="drained-1", causation_id=started.event_id,
                        region=settings.region)  # fmt: skip
        story = [*ranked, first, readmit, second, within, escalated, started, drained]
        FleetWriter(conn).write(positioned(story), {})
    finally:
        conn.close()
    return Story(
        pools=pools,
        workload=workload,
        lost_instance=lost,
        excluded_pool=pools[1],
        readmitted_pool=pools[0],
        exclusion_event_ids=[first.event_id, second.event_id],
        decisions={
            "pool_ranked": 3,
            "pool_excluded": 2,
            "pool_readmitted": 1,
            "fallback_decided": 2,
        },
        # The view charges each decision its increase over the workload's spend that day.
        fallback_eur={"floor_restore": 0.0, "within_cap": 1.5, "escalated": 4.5},
    )


class Served:
    """`spotcap serve --port 0` on a home, in its own process; its log under `logs`."""

    def __init__(
        self, home: Path, logs: Path, *args: str, env: dict[str, str] | None = None
    ) -> None:
        self.out, self.err = logs / "serve.out", logs / "serve.err"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.process = subprocess.Popen(
                [SPOTCAP, "--home", str(home), "serve", "--port", "0", *args],
                stdout=out,
                stderr=err,
                text=True,
                env=child_env() | (env or {}),
            )
        self.url = self._wait_for_url()

    def _wait_for_url(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            found = _URL.search(self.out.read_text())
            if found:
                return found.group(1)
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        raise AssertionError(
            f"spotcap serve did not start within {START_TIMEOUT_S:.0f} s "
            f"(exit {self.process.returncode}):\n{self.err.read_text()[-3000:]}"
        )

    def get(self, path: str, accept: str | None = None) -> Reply:
        return get(self.url + path, accept)

    def post(self, path: str, form: dict[str, str] | None = None) -> Reply:
        return post(self.url + path, form)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        return self.process.returncode
