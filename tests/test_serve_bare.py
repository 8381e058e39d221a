"""The HTTP API's bare reference (`bench/serve_bare.py`: FastAPI, psycopg, chdb and
prometheus_client alone) answers what `spotcap serve` answers for every endpoint the bench times,
on a demo home with decisions of every kind written in (`serve_support.write_story`): the check
`bench/serve.py` makes before its clocks holds, and it sees a body that differs."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.serve import BARE, getter, same_body, start
from projections.postgres.connection import DEFAULT_SCHEMA
from spotcap.config import Settings
from spotcap.wiring import stores
from tests.serve_support import Served, Story, spotcap, write_story

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    root = tmp_path_factory.mktemp("serve-bare-home")
    settings = Settings.load(home=root, region="dev")
    done = spotcap(root, "demo", "--days", "1", "--workloads", "40", "--orchestrator", "baseline")
    assert done.returncode == 0, done.stderr[-3000:]
    try:
        yield settings
    finally:
        stores(settings).stop_embedded_postgres()


def test_the_bare_server_answers_what_spotcap_serve_answers(home: Settings, tmp_path: Path) -> None:
    story: Story = write_story(home)
    root = home.home
    served = Served(root, tmp_path, "--log-level", "warning")
    bare = None
    try:
        dsn = stores(home).fleet_dsn()
        bare, host, port = start(
            [sys.executable, BARE, "--dsn", dsn, "--schema", DEFAULT_SCHEMA, "--ledger",
             str(root / "ledger"), "--log", str(root / "log"), "--region", "dev"],
            tmp_path / "bare.out", "listening on http://",
        )  # fmt: skip
        ask = getter(host, port)
        paths = ["/api/v1/pools?limit=200", "/api/v1/instances?limit=200",
                 f"/api/v1/why/{story.lost_instance}", "/metrics"]  # fmt: skip
        for path in paths:
            theirs = served.get(path)
            assert theirs.status == 200, (path, theirs.text[:300])
            assert same_body(path, theirs.text.encode(), ask(path)) is None, path
        # What the bodies hold: the story's drain in the chain, its decisions in the metrics.
        steps = json.loads(ask(f"/api/v1/why/{story.lost_instance}"))["steps"]
        assert {"drain_started", "drain_completed"} <= {s["event_type"] for s in steps}
        metrics = ask("/metrics").decode()
        assert 'spotcap_decisions_total{kind="pool_excluded"} 2.0' in metrics
        assert "spotcap_projection_events_applied_total" in metrics
        # And the check sees a difference.
        pools = json.loads(ask("/api/v1/pools?limit=200"))
        pools[0]["rank"] = -1
        given = served.get("/api/v1/pools?limit=200").text.encode()
        assert same_body("/api/v1/pools?limit=200", given, json.dumps(pools).encode()) is not None
        changed = metrics.replace('kind="pool_excluded"} 2.0', 'kind="pool_excluded"} 3.0')
        assert (
            same_body("/metrics", served.get("/metrics").text.encode(), changed.encode())
            is not None
        )
    finally:
        assert served.stop() == 0
        if bare is not None:
            bare.terminate()
            bare.wait(timeout=30)
