"""`spotcap canary status` and `spotcap canary roll-back` as an operator runs them on an embedded
home: the deciders (the embedded runner, writing to the log) canary a changed contract; status
shows it running; an operator rolls it back; the rollback is an input the canary decider reads,
so a later run of the deciders over the same log neither promotes nor rolls it back again, and
status shows who ended it and why. Rolling back a workload with no canary is one sentence."""

from __future__ import annotations

import json
from pathlib import Path

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
