"""`spotcap log` and `spotcap topics list` as a person uses them: `verify` finds damage that
`topics list` does not show, `repair` moves it aside only when asked and says what it did, a
writing command after damage loses no record and reuses no offset, `cat` and `tail` print
decoded events on both logs, and a killed run leaves a visible mark."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from schemas.codec import Codec
from schemas.errors import Origin
from schemas.events import Envelope
from spotcap.cli import main
from spotcap.config import Settings
from spotcap.wiring import stores
from streams.browse import event_json, event_line, since_ms
from streams.embedded import EmbeddedLog
from streams.kafka import KafkaLog
from streams.log import CORRUPT_HEADER, EventLog, Record
from streams.topics import physical_name, region_topics, topic_name
from streams.writer import EventWriter
from tests.factories import notice

REPO = Path(__file__).resolve().parent.parent
CODEC = Codec()
REGION = "logcli"
LIFECYCLE = topic_name(REGION, "lifecycle")


def spotcap(home: Path, *args: str, region: str = REGION) -> Result:
    return CliRunner().invoke(main, ["--home", str(home), "--region", region, *args])


def write(log: EventLog, region: str, first: int, count: int, flush_every: int) -> list[Envelope]:
    writer = EventWriter(log, CODEC, region, flush_every=flush_every)
    events = [notice(region, n % 7, seq=n) for n in range(first, first + count)]
    for event in events:
        writer.write(event)
    writer.close()
    return events


def read_all(root: Path, topic: str) -> list[Record]:
    log = EmbeddedLog(root)
    consumer = log.consumer(f"check-{uuid.uuid4().hex}", [topic])
    records: list[Record] = []
    while got := consumer.poll(1000, timeout_s=0):
        records.extend(got)
    consumer.close()
    return records


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home whose lifecycle topic has partitions of several blocks each."""
    log = EmbeddedLog(tmp_path / "log")
    log.apply_topics(region_topics(REGION))
    write(log, REGION, 0, 120, flush_every=6)
    log.close()
    return tmp_path


@pytest.fixture
def runs_demo(tmp_path: Path) -> Iterator[None]:
    """For a test that runs `spotcap demo` in its tmp home: the embedded PostgreSQL the demo
    starts outlives the command (until `spotcap db stop`), so the test stops it after."""
    yield
    stores(Settings(home=tmp_path)).stop_embedded_postgres()


def flip_framing(home: Path) -> tuple[Path, int, range]:
    """Flip a byte of the sync marker of a block in the middle of a lifecycle segment;
    returns the file, the byte and the block's offsets."""
    log = EmbeddedLog(home / "log")
    partitions = [log.partition(LIFECYCLE, n) for n in range(log.partitions_for(LIFECYCLE))]
    busiest = max(partitions, key=lambda p: len(p.extents()))
    extents = busiest.extents()
    assert len(extents) >= 5
    path, block = extents[len(extents) // 2]
    where = block.end - 3
    data = bytearray(path.read_bytes())
    data[where] ^= 0x04
    path.write_bytes(bytes(data))
    return path, where, range(block.lo, block.lo + block.count)


def test_verify_finds_damage_that_topics_list_does_not_show(home: Path) -> None:
    before = spotcap(home, "topics", "list", "--json")
    assert before.exit_code == 0, before.output
    assert spotcap(home, "log", "verify").exit_code == 0

    path, where, offsets = flip_framing(home)

    after = spotcap(home, "topics", "list", "--json")
    assert after.exit_code == 0 and json.loads(after.stdout) == json.loads(before.stdout)
    result = spotcap(home, "log", "verify", "--json")
    assert result.exit_code == 1, result.output
    (found,) = json.loads(result.stdout)["damage"]
    assert found["file"] == str(path) and found["start_byte"] <= where < found["end_byte"]
    assert (found["first_offset"], found["end_offset"]) == (offsets.start, offsets.stop)
    assert found["kind"] == "framing"
    readable = spotcap(home, "log", "verify", "--topic", "lifecycle")
    assert readable.exit_code == 1
    assert f"offsets {offsets.start:,}-{offsets.stop - 1:,} (framing)" in readable.stdout
    assert str(path.relative_to(home / "log")) in readable.stdout


def test_repair_moves_the_damage_aside_only_when_asked(home: Path) -> None:
    path, _, offsets = flip_framing(home)
    number = int(path.parent.name)
    intact = {
        r.offset: r
        for r in read_all(home / "log", LIFECYCLE)
        if r.partition == number and r.offset not in offsets
    }
    end_before = EmbeddedLog(home / "log").partition(LIFECYCLE, number).end_offset
    damaged = path.read_bytes()

    dry = spotcap(home, "log", "repair", "--dry-run")
    assert dry.exit_code == 0 and "would move 1 part " in dry.stdout, dry.output
    assert path.read_bytes() == damaged and not (home / "log" / "_quarantine").exists()

    done = spotcap(home, "log", "repair", "--json")
    assert done.exit_code == 0, done.output
    (action,) = json.loads(done.stdout)["actions"]
    moved = Path(action["moved_to"])
    assert action["file"] == str(path) and moved.exists()
    readme = (moved.parents[2] / "README").read_text()
    assert str(path.relative_to(home / "log")) in readme and "not a whole block" in readme

    assert spotcap(home, "log", "verify").exit_code == 0
    after = {r.offset: r for r in read_all(home / "log", LIFECYCLE) if r.partition == number}
    assert after == intact, "every intact record is still there, at its offset"
    log = EmbeddedLog(home / "log")
    producer = log.producer()
    producer.produce(LIFECYCLE, b"new", key=next(iter(after.values())).key)
    (record,) = producer.flush()
    log.close()
    assert record.offset >= end_before, "no offset is written twice"


@pytest.mark.usefixtures("runs_demo")
def test_a_framing_flip_then_writing_commands_lose_nothing_and_reuse_no_offset(
    home: Path,
) -> None:
    path, _, offsets = flip_framing(home)
    number = int(path.parent.name)
    everything = [r for r in read_all(home / "log", LIFECYCLE) if r.partition == number]
    intact = {r.offset: r for r in everything if r.offset not in offsets}
    acknowledged_end = max(r.offset for r in everything) + 1
    damaged = path.read_bytes()

    # A command writing another region into the same home does not touch the damaged files.
    other = spotcap(home, "demo", "--days", "0.05", "--workloads", "5", region="other")
    assert other.exit_code == 0, other.output
    assert path.read_bytes() == damaged

    # A writer of the damaged topic, of the damaged partition and the others.
    log = EmbeddedLog(home / "log")
    written = write(log, REGION, 1000, 70, flush_every=10)
    log.close()
    assert path.read_bytes().startswith(damaged), "nothing is cut: new blocks come after"
    after = [r for r in read_all(home / "log", LIFECYCLE) if r.partition == number]
    assert {r.offset: r for r in after if r.offset in intact} == intact, "no intact record lost"
    new = [r for r in after if r.offset not in intact and CORRUPT_HEADER not in dict(r.headers)]
    assert new and all(r.offset >= acknowledged_end for r in new), "no offset is written twice"
    ids = [CODEC.decode(r.value or b"").event_id for r in new]
    assert set(ids) <= {e.event_id for e in written} and len(ids) == len(set(ids))


def cat(home_args: list[str], *args: str) -> list[dict[str, Any]]:
    result = CliRunner().invoke(main, [*home_args, "log", "cat", *args, "--json"])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.fixture(params=["embedded", "kafka"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[list[str], EventLog]]:
    """The CLI's options for a fresh region on each log, and that log."""
    region = f"c{uuid.uuid4().hex[:8]}"
    if request.param == "embedded":
        opened: EventLog = EmbeddedLog(tmp_path / "log")
        args = ["--home", str(tmp_path), "--region", region]
    else:
        address = request.getfixturevalue("kafka").address
        opened = KafkaLog(address)
        args = ["--home", str(tmp_path), "--region", region, "--kafka", address]
    opened.apply_topics(region_topics(region, partitions_scale=0.5))
    yield args, opened
    opened.close()


def test_cat_prints_every_event_with_its_position_and_filters(
    where: tuple[list[str], EventLog],
) -> None:
    args, log = where
    region = args[args.index("--region") + 1]
    events = write(log, region, 0, 40, flush_every=7)
    if isinstance(log, EmbeddedLog):
        log.close()  # the CLI writes nothing, but cat must not need the writer's lock

    printed = cat(args, "lifecycle")
    assert sorted(e["event_id"] for e in printed) == sorted(e.event_id for e in events)

    def in_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted(rows, key=lambda r: (r["partition"], r["offset"]))

    physical = cat(args, f"{region}.lifecycle")
    assert in_order(printed) == in_order(physical), "logical and physical names"
    by_id = {e.event_id: e for e in events}
    for row in printed:
        assert row["key"] == by_id[row["event_id"]].key
        assert row["payload"]["instance_id"] == row["key"]
    positions = {(r["partition"], r["offset"]) for r in printed}
    assert len(positions) == len(printed)

    key = events[3].key
    assert {r["event_id"] for r in cat(args, "lifecycle", "--key", key)} == {
        e.event_id for e in events if e.key == key
    }
    assert cat(args, "lifecycle", "--type", "instance_lost") == []
    since = events[30].occurred_at // 1_000_000
    late = cat(
        args, "lifecycle", "--since", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since))
    )
    assert {r["event_id"] for r in late} == {e.event_id for e in events[30:]}
    skipped = cat(args, "lifecycle", "--from", "3")
    assert {(r["partition"], r["offset"]) for r in skipped} == {p for p in positions if p[1] >= 3}

    human = CliRunner().invoke(main, [*args, "log", "cat", "lifecycle", "--key", key])
    assert human.exit_code == 0 and key in human.stdout and "notice_received" in human.stdout
    missing = CliRunner().invoke(main, [*args, "log", "cat", "nosuch"])
    assert missing.exit_code == 1 and "topics apply" in missing.output
    assert "Traceback" not in missing.output


def test_tail_follows_new_events_until_ctrl_c(where: tuple[list[str], EventLog]) -> None:
    args, log = where
    region = args[args.index("--region") + 1]
    first = write(log, region, 0, 10, flush_every=5)
    tail = subprocess.Popen(
        [sys.executable, "-m", "spotcap.cli", *args, "log", "tail", "lifecycle", "--json"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[str] = []
    done = threading.Event()

    def collect() -> None:
        assert tail.stdout is not None
        for line in tail.stdout:
            seen.append(json.loads(line)["event_id"])
        done.set()

    threading.Thread(target=collect, daemon=True).start()
    try:
        wait_for(lambda: len(seen) >= len(first), "the first events")
        second = write(log, region, 10, 10, flush_every=5)
        wait_for(lambda: len(seen) >= len(first) + len(second), "the events written after")
    finally:
        tail.send_signal(signal.SIGINT)
        returncode = tail.wait(timeout=120)
    assert done.wait(timeout=60), "tail's output did not end after it stopped"
    assert sorted(seen) == sorted(e.event_id for e in first + second)
    assert returncode == 0
    assert tail.stderr is not None and "Traceback" not in tail.stderr.read()


def test_cat_into_a_reader_that_stops_early_exits_quietly(tmp_path: Path) -> None:
    """`spotcap log cat lifecycle | head -1`: the reader goes away, which is no error: no
    sentence, no traceback, the status a shell gives a writer stopped by SIGPIPE."""
    log = EmbeddedLog(tmp_path / "log")
    log.apply_topics(region_topics(REGION))
    write(log, REGION, 0, 2000, flush_every=500)  # far more than a pipe's buffer holds
    log.close()
    where = ["--home", str(tmp_path), "--region", REGION]
    cat = subprocess.Popen(
        [sys.executable, "-m", "spotcap.cli", *where, "log", "cat", "lifecycle"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert cat.stdout is not None and cat.stderr is not None
    first = cat.stdout.readline()
    cat.stdout.close()
    stderr = cat.stderr.read().decode()
    assert cat.wait(timeout=120) == 141, stderr
    assert b"notice_received" in first
    assert stderr == ""


def wait_for(condition: Any, what: str, timeout_s: float = 240.0) -> None:
    """Until `condition`, within a wait generous for a loaded machine (a Kafka consumer group's
    first assignment alone can take tens of seconds there)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"tail did not print {what} within {timeout_s:g} s"
        time.sleep(0.05)


def test_verify_refuses_kafka_with_a_sentence(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["--home", str(tmp_path), "--kafka", "localhost:1", "log", "verify"]
    )
    assert result.exit_code == 1 and "embedded log's files" in result.output
    assert "Traceback" not in result.output


@pytest.mark.usefixtures("runs_demo")
def test_a_killed_run_leaves_a_visible_mark(tmp_path: Path) -> None:
    finished = spotcap(tmp_path, "demo", "--days", "0.05", "--workloads", "5", region="done")
    assert finished.exit_code == 0, finished.output
    listed = spotcap(tmp_path, "topics", "list", region="done")
    assert "finished" in listed.stdout and "did not finish" not in listed.stdout

    marker = tmp_path / "log" / "_runs" / "killed.json"
    run = subprocess.Popen(
        [
            *(sys.executable, "-m", "spotcap.cli", "--home", str(tmp_path)),
            *("--region", "killed", "demo", "--days", "30", "--workloads", "20", "--json"),
            "--no-projections",  # the home's projections hold region "done"
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    while not (marker.exists() and json.loads(marker.read_text())["outcome"] == "running"):
        assert time.monotonic() < deadline and run.poll() is None, "the run did not start"
        time.sleep(0.05)
    os.kill(run.pid, signal.SIGKILL)
    run.wait(timeout=120)
    listed = spotcap(tmp_path, "topics", "list", region="killed")
    assert listed.exit_code == 0
    assert "did not finish" in listed.stdout and f"pid {run.pid}" in listed.stdout
    rows = json.loads(spotcap(tmp_path, "topics", "list", "--json", region="killed").stdout)
    assert {row["last_run"]["state"] for row in rows} == {"killed"}


def test_since_takes_a_time_or_a_duration_back_from_now() -> None:
    now = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    at_8 = int(now.timestamp() * 1000)
    assert since_ms("2026-12-01T08:00:00Z") == at_8
    assert since_ms("2026-12-01 08:00") == at_8  # no zone: UTC
    assert since_ms("2026-12-01T09:00:00+01:00") == at_8
    assert since_ms("2h", now) == at_8 - 2 * 3_600_000
    assert since_ms(" 1.5 d", now) == at_8 - 36 * 3_600_000
    for bad in ("5x", "yesterday", ""):
        with pytest.raises(ValueError):
            since_ms(bad, now)


def test_an_event_prints_with_its_position_as_json_or_one_line() -> None:
    event, origin = notice("cat", 7), Origin("cat.lifecycle", 2, 1234)
    data = json.loads(event_json(origin, event))
    assert (data["topic"], data["partition"], data["offset"]) == ("cat.lifecycle", 2, 1234)
    assert data["event_id"] == event.event_id and data["key"] == "i-00007"
    assert data["payload"] == json.loads(json.dumps(event.payload.to_avro(), default=str))
    line = event_line(origin, event)
    assert line.split()[:2] == ["2", "1,234"]
    assert "notice_received" in line and "i-00007" in line
    assert len(event_line(origin, event, width=60)) == 60
    assert physical_name("cat", "lifecycle") == "cat.lifecycle"
    assert physical_name("cat", "other.lifecycle") == "other.lifecycle"
