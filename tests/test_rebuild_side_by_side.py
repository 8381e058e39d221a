"""`spotcap rebuild all` with each projection in a process of its own, each reading the history
for itself (`projections.side_by_side`): the same rows as each projection rebuilt alone; killed
with SIGKILL in the middle, the fleet state's process ends with it and a rerun (`spotcap
project`) completes both projections, nothing doubled."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from projections.postgres.writer import FleetWriter
from projections.stores import Stores
from schemas.codec import Codec
from schemas.events import DeadLettered
from streams.embedded import EmbeddedLog
from streams.merged import MergedHistory
from streams.topics import topic_name
from tests.cli_support import spotcap
from tests.projection_support import dump_fleet, ended, process_tree

# A demo, two rebuilds alone and one side by side took 10 minutes at load 35 (the first test).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
REPO = Path(__file__).resolve().parent.parent
WAIT_S = 900  # a demo and a rebuild on a loaded machine


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = spotcap("--home", str(home), "--region", "demo", *args, timeout_s=WAIT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A home with half a day of the default region's log and no projections yet."""
    home = tmp_path_factory.mktemp("side-by-side") / "home"
    cli(home, "demo", "--days", "0.5", "--no-projections")
    try:
        yield home
    finally:
        Stores(home).stop_embedded_postgres()


def fleet_offsets(home: Path) -> dict[tuple[str, int], int]:
    with Stores(home).open_fleet() as conn:
        return FleetWriter(conn).stored_offsets()


def projections(home: Path) -> dict[str, Any]:
    """Both projections' rows: the fleet state's read here, the ledger's by a process of its
    own (chdb admits one data path per process, and this one's is the suite's)."""
    with Stores(home).open_fleet() as conn:
        fleet = dump_fleet(conn)
    dumped = subprocess.run(
        [sys.executable, "-m", "tests.projection_worker", "ledger-dump",
         "--path", str(home / "ledger"), "--database", "spotcap"],
        cwd=REPO, capture_output=True, text=True, timeout=WAIT_S, check=False,
        env={k: v for k, v in os.environ.items() if k != "SPOTCAP_CHDB_PATH"},
    )  # fmt: skip
    assert dumped.returncode == 0, dumped.stderr[-3000:]
    ledger = {k: v for k, v in json.loads(dumped.stdout).items() if not k.endswith("_raw_count")}
    return {"fleet": fleet, "ledger": ledger}


@pytest.fixture(scope="module")
def alone(home: Path) -> dict[str, Any]:
    """Each projection rebuilt alone (one reading, one writer: no second process)."""
    cli(home, "rebuild", "postgres")
    cli(home, "rebuild", "clickhouse")
    return projections(home)


def test_rebuilt_side_by_side_both_equal_each_rebuilt_alone(
    home: Path, alone: dict[str, Any]
) -> None:
    report = json.loads(cli(home, "rebuild", "all", "--json").stdout)
    assert [r["projection"] for r in report] == ["fleet", "ledger"]
    assert report[0]["events"] == report[1]["events"] > 40_000
    got = projections(home)
    assert got["ledger"]["ledger_lines"], "nothing priced: the comparison would say nothing"
    for table, rows in alone["fleet"].items():
        assert got["fleet"][table] == rows, table
    for table, rows in alone["ledger"].items():
        assert got["ledger"][table] == rows, table


def test_a_rebuild_killed_in_the_middle_is_completed_by_a_rerun(
    home: Path, alone: dict[str, Any]
) -> None:
    complete = sum(fleet_offsets(home).values())
    rebuild = subprocess.Popen(
        [str(Path(sys.executable).with_name("spotcap")), "--home", str(home), "--region", "demo",
         "rebuild", "all"],
        env={k: v for k, v in os.environ.items() if not k.startswith("SPOTCAP_")},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + WAIT_S
        applied = 0
        while not 0 < applied < complete:  # the tables dropped, then a first batch stored
            assert rebuild.poll() is None, f"the rebuild ended first: {rebuild.stderr}"
            assert time.monotonic() < deadline, "the fleet state stored no batch"
            time.sleep(0.05)
            try:
                applied = sum(fleet_offsets(home).values())
            except psycopg.Error:  # its tables dropped and not made again yet
                applied = 0
        tree = process_tree(rebuild.pid)
        assert len(tree) >= 2, "the fleet state was not rebuilt in a process of its own"
        os.kill(rebuild.pid, signal.SIGKILL)
        rebuild.wait(timeout=60)
    finally:
        if rebuild.poll() is None:
            rebuild.kill()
            rebuild.wait()
    waited = time.monotonic() + 60
    while not all(ended(pid) for pid in tree) and time.monotonic() < waited:
        time.sleep(0.1)
    assert all(ended(pid) for pid in tree), "a process of the rebuild outlived it"
    assert 0 < sum(fleet_offsets(home).values()) < complete  # cut in the middle
    cli(home, "project")
    got = projections(home)
    for table, rows in alone["fleet"].items():
        assert got["fleet"][table] == rows, table
    for table, rows in alone["ledger"].items():
        assert got["ledger"][table] == rows, table


def test_an_undecodable_record_is_dead_lettered_once_for_both(home: Path) -> None:
    """Both processes read the record; the ledger's reading dead-letters it for both, as one
    reading did, and the fleet state's skips it (two dead letters would be two notices of
    one fault, and the second writer would find the log's writer lock held)."""
    log = EmbeddedLog(home / "log")
    try:
        producer = log.producer()
        producer.produce(topic_name("demo", "lifecycle"), b"not avro", key=b"i-broken")
        producer.flush()
        producer.close()
    finally:
        log.close()
    report = json.loads(cli(home, "rebuild", "all", "--json").stdout)
    assert report[0]["events"] == report[1]["events"] > 40_000
    log = EmbeddedLog(home / "log")
    try:
        payloads = [d.envelope.payload for d in MergedHistory(log, Codec(), "demo", ["deadletter"])]
    finally:
        log.close()
    letters = [(p.raw_value, p.processor) for p in payloads if isinstance(p, DeadLettered)]
    assert len(payloads) == 1 and letters == [(b"not avro", "projection/fleet+ledger")]
