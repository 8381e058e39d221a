"""`spotcap canary status` and `spotcap canary roll-back` as an operator runs them on an embedded
home: the deciders (the embedded runner, writing to the log) canary a changed contract; status
shows it running; an operator rolls it back; the rollback is an input the canary decider reads,
so a later run of the deciders over the same log neither promotes nor rolls it back again, and
status shows who ended it and why. Rolling back a workload with no canary is one sentence. The
bundle service's follower (`spotcap run bundles`) sees the canary and its rollback as they
reach the log."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

from provider.nodes import followed, roll_back
from schemas.codec import Codec
from schemas.events import BundleCanaried, BundlePromoted, BundleRolledBack, InstanceLaunched
from streams.embedded import EmbeddedLog
from streams.runtime.embedded import EmbeddedRunner, ListSink
from streams.writer import EventWriter, publish
from tests.cli_support import assert_one_sentence, spotcap
from tests.test_canary import HOLD_S, POOLS, REGION, W, at, contract

CODEC = Codec()


def decide(home: Path) -> list[BundleCanaried | BundlePromoted | BundleRolledBack]:
    """The deciders over the home's log (decisions written back to it); the canary's, in order."""
    log = EmbeddedLog(home / "log")
    try:
        writer = EventWriter(log, CODEC, REGION)
        sink = ListSink()
        EmbeddedRunner(log, CODEC, REGION, sink).run()
        for decision in sink.decisions:
            writer.write(decision)
        writer.close()
    finally:
        log.close()
    kinds = (BundleCanaried, BundlePromoted, BundleRolledBack)
    return [d.payload for d in sink.decisions if isinstance(d.payload, kinds)]


def write(home: Path, *events: object) -> None:
    log = EmbeddedLog(home / "log")
    try:
        publish(log, CODEC, REGION, list(events))  # type: ignore[arg-type]
    finally:
        log.close()


def test_status_and_an_operators_rollback_of_a_running_canary(tmp_path: Path) -> None:
    home = tmp_path / "home"
    launches = [at(1 + n, InstanceLaunched(f"i-{n}", pool, W, 8, "reclaimable", {}), f"l{n}")
                for n, pool in enumerate(POOLS)]  # fmt: skip
    write(home, contract(1, "sha-1", 0), *launches, contract(2, "sha-2", 100))
    [canaried] = decide(home)
    assert isinstance(canaried, BundleCanaried)
    where = ["--home", str(home), "--region", REGION, "canary"]

    seen = spotcap(*where, "status", "--json")
    assert seen.returncode == 0, seen.stderr
    [running] = json.loads(seen.stdout)
    assert running["state"] == "running" and running["workload_id"] == W
    assert running["canary_pool_ids"] == list(canaried.canary_pool_ids)
    table = spotcap(*where, "status", env={"COLUMNS": "80"})
    assert table.returncode == 0 and "running" in table.stdout and W in table.stdout
    assert max(len(line) for line in table.stdout.splitlines()) <= 80, table.stdout

    back = spotcap(*where, "roll-back", W, "--reason", "the new drain budget is wrong")
    assert back.returncode == 0, back.stderr
    assert f"canary of {W} rolled back" in back.stdout
    [ended] = json.loads(spotcap(*where, "status", "--json").stdout)
    assert (ended["state"], ended["rule"]) == ("rolled back", "operator")
    assert ended["reason"] == "the new drain budget is wrong"

    # Event time passes the hold: the deciders, run again over the whole log, make the same
    # canary decision (same id) and nothing else: the operator's rollback ended it.
    write(home, at(100 + 2 * HOLD_S, InstanceLaunched("i-x", POOLS[0], "wl-other", 8,
                                                      "reclaimable", {}), "after"))  # fmt: skip
    assert decide(home) == [canaried]

    assert_one_sentence(spotcap(*where, "roll-back", W), f"workload {W} has no canary running")


def test_the_bundle_services_follower_sees_a_canary_and_its_rollback_as_they_come(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    launches = [at(1 + n, InstanceLaunched(f"i-{n}", pool, W, 8, "reclaimable", {}), f"l{n}")
                for n, pool in enumerate(POOLS)]  # fmt: skip
    write(home, contract(1, "sha-1", 0), *launches)
    stop = threading.Event()
    reader = EmbeddedLog(home / "log", share_writes_s=60.0)
    releases = followed(reader, CODEC, REGION, stop.is_set)
    try:
        wait_for(lambda: releases.sha_for("i-0", W) == "sha-1", "the first bundle")
        write(home, contract(2, "sha-2", 100))
        [canaried] = decide(home)
        assert isinstance(canaried, BundleCanaried)
        node = f"i-{POOLS.index(canaried.canary_pool_ids[0])}"
        other = next(f"i-{n}" for n, p in enumerate(POOLS) if p not in canaried.canary_pool_ids)
        wait_for(lambda: releases.sha_for(node, W) == "sha-2", "the canary's bundle")
        assert releases.sha_for(other, W) == "sha-1"
        writer = EmbeddedLog(home / "log", share_writes_s=60.0)
        try:
            roll_back(writer, CODEC, REGION, W, "by hand")
        finally:
            writer.close()
        wait_for(lambda: releases.sha_for(node, W) == "sha-1", "the bundle in force again")
    finally:
        stop.set()
        time.sleep(1.0)  # the follower's read returns within 0.5 s and sees the stop
        reader.close()


def wait_for(condition: Callable[[], bool], what: str, within_s: float = 120.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, f"the follower did not see {what} in {within_s} s"
        time.sleep(0.2)
