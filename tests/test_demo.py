"""`spotcap demo` on the embedded log: byte-identical logs for the same seed, every simulated
event in the log exactly once, the summary, and the refusal to write into a used home."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from projections.stores import LEDGER_DATABASE
from schemas.codec import Codec
from sim import RegionSim, SimConfig, simulate
from sim.demo import baseline_report, run_demo
from spotcap.cli.demo import demo
from spotcap.config import Settings
from spotcap.wiring import stores
from streams.embedded import EmbeddedLog
from streams.topics import EVENT_TOPICS, region_topics, topic_name
from tests.projection_support import dump_fleet

REGION = "demo-test"
ARGS = ["--days", "0.25", "--workloads", "20", "--seed", "9", "--no-projections"]


def _run(home: Path, *args: str) -> Result:
    settings = Settings(home=home, region=REGION)
    return CliRunner().invoke(demo, [*ARGS, *args], obj=settings, catch_exceptions=False)


def _segments(home: Path) -> dict[str, bytes]:
    """Every segment's bytes, by path under the home."""
    return {
        str(path.relative_to(home)): path.read_bytes()
        for path in sorted((home / "log").rglob("*.avro"))
    }


def _run_in_process(home: Path, hash_seed: int) -> None:
    """`spotcap demo` in a fresh interpreter, so str hashes (and set order) are its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTCAP_")}
    env["PYTHONHASHSEED"] = str(hash_seed)
    command = [sys.executable, "-m", "spotcap.cli", "--home", str(home), "--region", REGION]
    done = subprocess.run(
        [*command, "demo", *ARGS, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_same_seed_writes_the_same_log(tmp_path: Path) -> None:
    first, second, other = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    _run_in_process(first, hash_seed=1)
    _run_in_process(second, hash_seed=2)  # a hash-order leak would change the bytes
    assert _run(other, "--json", "--seed", "10").exit_code == 0
    segments = _segments(first)
    assert segments and segments == _segments(second)
    assert segments != _segments(other)


# `spotcap demo` run through click in a fresh interpreter, which then says which of the stores'
# libraries it imported itself.
_DEMO_THEN_MODULES = """
import json, sys
from click.testing import CliRunner
from spotcap.cli import main
result = CliRunner().invoke(main, sys.argv[1:], catch_exceptions=False)
loaded = sorted(m for m in ("chdb", "psycopg", "pyarrow") if m in sys.modules)
print(json.dumps({"exit_code": result.exit_code, "output": result.stdout, "loaded": loaded}))
"""


def test_the_projections_and_the_baseline_run_in_processes_of_their_own(tmp_path: Path) -> None:
    # Without SPOTCAP_ settings: the suite's shared chdb path is this test process's; the demo's
    # ledger is its home's own.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTCAP_")}
    options = ["--days", "0.25", "--workloads", "20", "--seed", "9", "--json"]
    command = [sys.executable, "-c", _DEMO_THEN_MODULES, "--home", str(tmp_path), "--region",
               REGION, "demo", *options]  # fmt: skip
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=900, check=False
        )
    finally:
        stores(Settings(home=tmp_path, region=REGION)).stop_embedded_postgres()
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["exit_code"] == 0, outcome["output"]
    assert outcome["loaded"] == []  # the stores' libraries were the children's alone
    report = json.loads(outcome["output"])
    projected = report["projections"]["projections"]
    assert [(p["projection"], p["events"]) for p in projected] == [
        ("fleet", report["events"]),
        ("ledger", report["events"]),
    ]
    assert report["projections"]["savings_micros"]["counterfactual"] > 0
    assert report["projections"]["why_examples"]
    # The baseline simulated in a process of its own reports what it reports in this one.
    config = SimConfig(seed=9, days=0.25, workloads=20, region=REGION)
    assert report["baseline"] == baseline_report(config, RegionSim(config).misbehaving_pool_ids)


def _demo_follow(home: Path, mode: str) -> dict[str, Any]:
    """tests/demo_follow.py in a process of its own: its projections' report."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTCAP_")}
    command = [sys.executable, "-m", "tests.demo_follow", str(home), REGION, mode, "2000"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    for run in report["projections"]:
        del run["seconds"]
    return report


def _dump_ledger(home: Path) -> dict[str, Any]:
    """The home's own ledger's tables (tests/projection_worker.py, in a process of its own: this
    one may hold the suite's chdb path)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTCAP_")}
    command = [sys.executable, "-m", "tests.projection_worker", "ledger-dump",
               "--path", str(home / "ledger"), "--database", LEDGER_DATABASE]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    dumped: dict[str, Any] = json.loads(done.stdout)
    # One row a partition per batch before ClickHouse merges them: batches end where the polls
    # happen to (so this count varies between two rebuilds of one log); the rows are compared.
    del dumped["consumed_offsets_raw_count"]
    return dumped


def test_projections_that_follow_the_run_hold_what_a_rebuild_after_it_holds(
    tmp_path: Path,
) -> None:
    """The demo's projections follow its log while it is written (flushed every 2,000 events
    here, so they read it in about 15 steps): the same log, and the same fleet state and ledger
    row for row as both projections rebuilt from the finished log."""
    followed, after = tmp_path / "followed", tmp_path / "after"
    try:
        reports = [_demo_follow(followed, "follow"), _demo_follow(after, "after")]
        assert reports[0] == reports[1]
        assert reports[0]["projections"][1]["events"] > 10_000
        assert _segments(followed) == _segments(after)
        ledgers = [_dump_ledger(followed), _dump_ledger(after)]
        assert ledgers[0]["ledger_lines"] and ledgers[0] == ledgers[1]
        fleets = []
        for home in (followed, after):
            conn = stores(Settings(home=home, region=REGION)).open_fleet()
            fleets.append(dump_fleet(conn))
            conn.close()
        assert fleets[0]["instances"] and fleets[0] == fleets[1]
    finally:
        for home in (followed, after):
            stores(Settings(home=home, region=REGION)).stop_embedded_postgres()


class Told:
    """A follower of the run (`sim.demo.LogFollower`) that notes, at each flush it is told of,
    the watermark and the end offsets a reader of the log sees then."""

    def __init__(self, reader: EmbeddedLog) -> None:
        self.reader = reader
        self.calls: list[str] = []
        self.flushes: list[tuple[int, dict[tuple[str, int], int]]] = []

    def start(self) -> None:
        self.calls.append("start")

    def flushed(self, below_us: int) -> None:
        self.calls.append("flushed")
        topics = [topic_name(REGION, t) for t in EVENT_TOPICS]
        ends = {(t, n): end for t in topics for n, end in self.reader.end_offsets(t).items()}
        self.flushes.append((below_us, ends))

    def disordered(self) -> None:
        self.calls.append("disordered")

    def complete(self) -> None:
        self.calls.append("complete")

    def stop(self) -> None:
        self.calls.append("stop")


def test_the_run_tells_its_follower_how_far_the_log_is_written(tmp_path: Path) -> None:
    """At each flush every event below the watermark the follower is told is in the log (a
    reader sees it), and no event below it is written later: the simulation writes in event-time
    order, so the projections follow the run and never fall back to reading it again."""
    log = EmbeddedLog(tmp_path / "log")
    log.apply_topics(region_topics(REGION))
    told = Told(EmbeddedLog(tmp_path / "log"))
    config = SimConfig(seed=9, days=0.25, workloads=20, region=REGION)
    report = run_demo(log, Codec(), tmp_path / "runs", config, compare=False, follower=told,
                      flush_every=1000)  # fmt: skip
    log.close()
    flushes = report["events"] // 1000
    assert told.calls == ["start", *["flushed"] * flushes, "complete"]
    watermarks = [below for below, _ in told.flushes]
    assert watermarks == sorted(watermarks) and watermarks[0] > config.start_us
    codec, reader = Codec(), EmbeddedLog(tmp_path / "log")
    for (topic, number), _ in told.flushes[-1][1].items():
        for record in reader.partition(topic, number).read(0, 10**7):
            at = codec.decode(record.value or b"", record.origin).occurred_at
            for below, ends in told.flushes:
                if at < below:  # below the watermark: in the log at that flush
                    assert record.offset < ends[(topic, number)]


def test_the_log_holds_every_event_of_the_run(tmp_path: Path) -> None:
    # The baseline, as `simulate` runs it (the deciders' demo: tests/test_loop_replay.py).
    result = _run(tmp_path, "--json", "--orchestrator", "baseline")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    expected = list(simulate(SimConfig(seed=9, days=0.25, workloads=20, region=REGION)))
    log = EmbeddedLog(tmp_path / "log")
    codec = Codec()
    found = []
    for logical in EVENT_TOPICS:
        topic = topic_name(REGION, logical)
        for number in range(log.partitions_for(topic)):
            for record in log.partition(topic, number).read(0, 10**7):
                assert record.value is not None and record.key is not None
                envelope = codec.decode(record.value, record.origin)
                assert logical == envelope.payload.TOPIC
                assert record.key == envelope.key.encode()
                assert record.timestamp_ms == envelope.occurred_at // 1000
                found.append(envelope)
    assert sorted(found, key=lambda e: e.event_id) == sorted(expected, key=lambda e: e.event_id)
    assert summary["events"] == len(expected)
    assert summary["events_by_type"] == dict(Counter(e.event_type for e in expected))
    assert summary["workloads"] == 20 and summary["region"] == REGION
    assert summary["orchestrator"] == "baseline"  # and it recorded its decisions:
    assert summary["events_by_topic"]["decisions"] == (
        summary["events_by_type"]["placement_decided"]
        + summary["events_by_type"]["replacement_requested"]
    )
    assert summary["events_by_type"]["placement_decided"] > 0
    assert summary["losses_with_notice"] + summary["losses_without_notice"] == (
        summary["events_by_type"].get("instance_lost", 0)
    )


def test_a_used_home_is_refused(tmp_path: Path) -> None:
    assert _run(tmp_path).exit_code == 0
    before = _segments(tmp_path)
    result = CliRunner().invoke(
        demo, ARGS, obj=Settings(home=tmp_path, region=REGION), catch_exceptions=False
    )
    assert result.exit_code == 1
    assert "already holds" in result.output and f"region {REGION}" in result.output
    assert "--home" in result.output
    assert _segments(tmp_path) == before
    other_region = Settings(home=tmp_path, region="elsewhere")
    assert CliRunner().invoke(demo, ARGS, obj=other_region).exit_code == 0


def test_fresh_replaces_the_regions_events_with_the_same_bytes(tmp_path: Path) -> None:
    first, again = tmp_path / "first", tmp_path / "again"
    assert _run(first).exit_code == 0
    assert _run(again).exit_code == 0
    other_region = Settings(home=again, region="elsewhere")
    assert CliRunner().invoke(demo, ARGS, obj=other_region).exit_code == 0
    kept = {p: b for p, b in _segments(again).items() if "elsewhere" in p}

    replaced = _run(again, "--fresh")
    assert replaced.exit_code == 0, replaced.output
    after = _segments(again)
    assert {p: b for p, b in after.items() if "elsewhere" not in p} == _segments(first)
    assert {p: b for p, b in after.items() if "elsewhere" in p} == kept


def test_fresh_never_deletes_kafka_topics(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, region=REGION, kafka_bootstrap="127.0.0.1:9")
    result = CliRunner().invoke(demo, [*ARGS, "--fresh"], obj=settings)
    assert result.exit_code == 1
    assert "embedded log only" in result.output


def test_the_readable_summary(tmp_path: Path) -> None:
    result = _run(tmp_path)
    assert result.exit_code == 0, result.output
    for words in ("rate_card", "losses without notice", "hall-wide wave", "misbehaving pools"):
        assert words in result.output


def test_both_orchestrators_net_saving_by_the_ledgers_rule_side_by_side(tmp_path: Path) -> None:
    result = _run(tmp_path, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    net = report["comparison"]["net_saving_eur"]
    # The deciders' is the ledger's own figure of the run written; the baseline's is priced
    # the same way (simulated, never written).
    assert net["orchestrator"] == int(report["ledger"]["net_saving_eur_micros"]) / 1_000_000
    assert net["baseline"] == int(report["baseline"]["ledger"]["net_saving_eur_micros"]) / 1_000_000
    assert net["orchestrator"] != net["baseline"]
    text = _run(tmp_path / "text").output
    assert "net saving (the ledger's rule) (EUR)" in text


def test_a_broken_catalogue_file_is_named(tmp_path: Path) -> None:
    broken = tmp_path / "pools.yaml"
    broken.write_text("format: spotcap.pools/v1\nregion: x\npools: [{hall: hall-a}]\n")
    result = CliRunner().invoke(
        demo, [*ARGS, "--catalogue", str(broken)], obj=Settings(home=tmp_path / "h")
    )
    assert result.exit_code == 1
    assert str(broken) in result.output and "pool #1" in result.output
