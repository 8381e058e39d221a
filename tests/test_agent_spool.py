"""The agent's spool: the Avro JSON form, fsync'd appends, rotation, the bound (samples dropped
first, never anything else), torn tails after kill -9, a full disk, the embedded shipper into
the log (at least once, de-duplicated by event id), and the Vector configuration's fields."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings

from agent.ship import SpoolShipper, ship_beside
from agent.spool import (
    DROPPABLE,
    LineEncoder,
    ShippedPosition,
    Spool,
    read_lines,
    segments,
    spool_status,
)
from agent.spool_writer import GatherTimer, SpoolWriter
from schemas.avro_json import AvroJsonForm
from schemas.codec import Codec
from schemas.events import DrainCompleted, Envelope, UsageInterval
from schemas.ids import derived_event_id
from streams.embedded import EmbeddedLog
from streams.reader import SeenEvents
from streams.topics import region_topics, topic_name
from tests.agent_support import REGION
from tests.factories import T0_US
from tests.strategies import envelopes

REPO = Path(__file__).resolve().parent.parent


def _envelope(n: int, payload: DrainCompleted | UsageInterval | None = None) -> Envelope:
    body = payload or DrainCompleted(
        instance_id=f"i-{n:05d}",
        workload_id="etl",
        path="kubernetes",
        duration_s=1.5,
        verified=True,
        overrun=False,
        fell_back_to_local=False,
        deadline_margin_s=100.0,
    )
    return Envelope(
        event_id=derived_event_id(f"spool-test-{n}", body.EVENT_TYPE),
        event_type=body.EVENT_TYPE,
        occurred_at=T0_US + n,
        recorded_at=T0_US + n,
        region=REGION,
        key=str(getattr(body, body.KEY)),
        causation_id=None,
        correlation_id=None,
        producer="agent/test",
        payload=body,
    )


def _sample(n: int) -> Envelope:
    return _envelope(
        n,
        UsageInterval(
            workload_id="etl",
            instance_id="i-00001",
            pool_id="pool-1",
            purchase_model="reclaimable",
            start_at=T0_US,
            end_at=T0_US + 300_000_000,
            vcpu=16,
            used_vcpu_h=16 * 300 / 3600,
        ),
    )


# -- the Avro JSON form ------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(envelope=envelopes())
def test_every_event_survives_the_avro_json_form_as_fastavro_reads_it(envelope: Envelope) -> None:
    import io

    import fastavro

    from schemas.catalogue import envelope_schema
    from schemas.codec import strip_logical_types

    form, codec = AvroJsonForm(), Codec()
    text = json.dumps(form.encode(envelope))
    assert codec.decode(form.single_object(json.loads(text))) == envelope
    # fastavro's own reader of the Avro JSON encoding reads the same datum back.
    parsed = fastavro.parse_schema(strip_logical_types(envelope_schema()), _force=True)
    (datum,) = list(fastavro.json_reader(io.StringIO(text), parsed))
    assert isinstance(datum, dict)
    assert datum["event_id"] == envelope.event_id
    assert datum["payload"] == envelope.payload.to_avro()


def test_a_spool_line_names_its_schema_topic_key_and_carries_the_log_record() -> None:
    envelope = _envelope(1)
    line = json.loads(LineEncoder().line(envelope))
    codec = Codec()
    assert line["fingerprint"] == f"{codec.fingerprint:016x}"
    assert line["topic"] == topic_name(REGION, "lifecycle")
    assert line["key"] == "i-00001"
    assert line["event_id"] == envelope.event_id
    assert line["event_type"] == "drain_completed"
    assert line["event"]["payload"]["spotcap.events.DrainCompleted"]["deadline_margin_s"] == {
        "double": 100.0
    }
    assert codec.decode(base64.b64decode(line["avro"])) == envelope


# -- appends, rotation, the bound ------------------------------------------------------------


def test_appends_rotate_by_size_and_read_back_in_order(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_bytes=4096, max_bytes=1 << 20)
    encoder = LineEncoder()
    for n in range(40):
        spool.append([(encoder.line(_envelope(n)), False)])
    spool.close()
    assert len(segments(tmp_path)) > 3
    assert all(path.stat().st_size <= 4096 for _, path in segments(tmp_path))
    ids = [line.record["event_id"] for line, _ in read_lines(tmp_path)]
    assert ids == [_envelope(n).event_id for n in range(40)]


def test_the_bound_drops_the_oldest_usage_samples_first_and_never_anything_else(
    tmp_path: Path,
) -> None:
    spool = Spool(tmp_path, segment_bytes=4096, max_bytes=65536)
    encoder = LineEncoder()
    critical = []
    for n in range(120):
        envelope = _sample(n) if n % 4 else _envelope(n)
        if not n % 4:
            critical.append(envelope.event_id)
        spool.append([(encoder.line(envelope), envelope.event_type in DROPPABLE)])
    spool.close()
    lines = [line.record for line, _ in read_lines(tmp_path)]
    kept_ids = {line["event_id"] for line in lines}
    assert set(critical) <= kept_ids  # never a drain event
    assert spool.dropped_samples > 0
    assert len(lines) == 120 - spool.dropped_samples
    assert spool.total_bytes <= 65536 and not spool.over_bound
    samples = [line["event_id"] for line in lines if line["event_type"] == "usage_interval"]
    newest = [_sample(n).event_id for n in range(120) if n % 4][-len(samples) :]
    assert samples == newest  # the oldest went first


def test_the_bound_is_exceeded_rather_than_dropping_a_drain_event(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_bytes=4096, max_bytes=8192)
    encoder = LineEncoder()
    for n in range(60):
        spool.append([(encoder.line(_envelope(n)), False)])
    spool.close()
    assert len(list(read_lines(tmp_path))) == 60
    assert spool.over_bound


def test_shipped_segments_are_deleted_before_any_sample_is_dropped(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_bytes=4096, max_bytes=32768)
    encoder = LineEncoder()
    for n in range(30):
        spool.append([(encoder.line(_sample(n)), True)])
    assert spool.dropped_samples == 0
    last_seq, last_path = segments(tmp_path)[-1]
    ShippedPosition(last_seq, 0, last_path.stat().st_ino).save(tmp_path)
    for n in range(30, 60):
        spool.append([(encoder.line(_sample(n)), True)])
    spool.close()
    assert 1 < segments(tmp_path)[0][0] <= last_seq  # shipped ones went, as needed
    assert spool.dropped_samples == 0


# -- crashes and torn lines -------------------------------------------------------------------

_APPENDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from agent.spool import LineEncoder, Spool
    from tests.test_agent_spool import _envelope
    spool = Spool(Path(sys.argv[1]), segment_bytes=1 << 16, max_bytes=1 << 30)
    encoder = LineEncoder()
    n = 0
    while True:
        batch = [_envelope(n + i) for i in range(8)]
        spool.append([(encoder.line(e), False) for e in batch])
        print(" ".join(e.event_id for e in batch), flush=True)  # only after fsync returned
        n += 8
    """
)


def test_kill_9_during_appends_loses_no_fsynced_line_and_leaves_a_readable_spool(
    tmp_path: Path,
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _APPENDER, str(tmp_path)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    acknowledged: list[str] = []
    try:
        assert proc.stdout is not None
        while len(acknowledged) < 2000:
            line = proc.stdout.readline()
            assert line, "the appender died before being killed"
            acknowledged += line.split()
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
    # Simulate the worst crash as well: half a line at the end of the last segment.
    _, last = segments(tmp_path)[-1]
    with last.open("ab") as f:
        f.write(b'{"fingerprint":"00","topic":"eu-west-1.lifecycle","key":"i-0')
    read_before_repair = [line.record["event_id"] for line, _ in read_lines(tmp_path)]
    spool = Spool(tmp_path, segment_bytes=1 << 16, max_bytes=1 << 30)
    assert spool.torn_bytes_repaired > 0
    spool.append([(LineEncoder().line(_envelope(10**6)), False)])
    spool.close()
    ids = [line.record["event_id"] for line, _ in read_lines(tmp_path)]
    assert set(acknowledged) <= set(ids)
    assert ids[: len(read_before_repair)] == read_before_repair
    assert ids[-1] == _envelope(10**6).event_id
    for _, path in segments(tmp_path):
        for raw in path.read_bytes().splitlines():
            json.loads(raw)  # every line whole after the repair


# -- a full disk ---------------------------------------------------------------------------------


@contextlib.contextmanager
def small_tmpfs(path: Path, size_kib: int) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"cannot mount a {size_kib} KiB tmpfs (needs root): {done.stderr}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_full_disk_is_reported_and_what_waits_is_written_once_there_is_room(
    tmp_path: Path,
) -> None:
    with small_tmpfs(tmp_path / "disk", 64) as disk:
        filler = disk / "filler"
        with filler.open("wb") as f, contextlib.suppress(OSError):
            f.write(b"\0" * 70 * 1024)
        errors: list[OSError] = []
        writer = SpoolWriter(
            Spool(disk / "spool", segment_bytes=4096, max_bytes=1 << 20),
            retry_s=0.05,
            on_error=errors.append,
        )
        for n in range(5):
            writer.submit(_envelope(n))
        assert not writer.flush(0.5)
        assert errors and writer.errors >= 1
        assert writer.backlog == 5
        filler.unlink()  # room again: the backlog goes to disk, once, in order
        assert writer.flush(10.0)
        writer.close()
        ids = [line.record["event_id"] for line, _ in read_lines(disk / "spool")]
        assert ids == [_envelope(n).event_id for n in range(5)]


SIZES = {"segment_bytes": 1 << 16, "max_bytes": 1 << 20}


def _spooled_ids(spool_dir: Path) -> list[str]:
    return [line.record["event_id"] for line, _ in read_lines(spool_dir)]


def test_writers_write_by_themselves_after_gathering_and_share_one_timer_thread(
    tmp_path: Path,
) -> None:
    """No flush, no close: each writer's batch reaches the disk once its gathering time is up,
    each event written once; every writer of the process waits on
    the one gather timer thread (an agent packed among hundreds wakes no thread per event)."""
    timer = GatherTimer()
    writers = [
        SpoolWriter(Spool(tmp_path / f"spool-{w}", **SIZES), gather_s=0.2, timer=timer)
        for w in range(20)
    ]
    for w, writer in enumerate(writers):
        for n in range(3):
            writer.submit(_envelope(100 * w + n))
    for w, writer in enumerate(writers):
        expected = [_envelope(100 * w + n).event_id for n in range(3)]
        for _ in range(600):  # generous: a loaded machine
            # The count follows the write to disk: a look between the two sees the events on
            # disk before the writer has counted them.
            if _spooled_ids(tmp_path / f"spool-{w}") == expected and writer.written == 3:
                break
            threading.Event().wait(0.05)
        assert _spooled_ids(tmp_path / f"spool-{w}") == expected
        assert writer.written == 3  # each written once
    gatherers = [t for t in threading.enumerate() if t.name == "spool-gather"]
    assert [t for t in gatherers if t is timer._thread] and len(gatherers) <= 2  # this + GATHER
    # A second round after the first was written: the timer serves it too.
    writers[0].submit(_envelope(99))
    for _ in range(600):
        if writers[0].written == 4:
            break
        threading.Event().wait(0.05)
    assert _spooled_ids(tmp_path / "spool-0")[-1] == _envelope(99).event_id
    for writer in writers:
        writer.close()


def test_flush_and_close_do_not_wait_for_the_gathering_time(tmp_path: Path) -> None:
    """A gathering time of an hour: flush and close still write what waits, at once."""
    writer = SpoolWriter(Spool(tmp_path / "spool", **SIZES), gather_s=3600.0, timer=GatherTimer())
    writer.submit(_envelope(1))
    assert writer.flush(30.0)
    assert _spooled_ids(tmp_path / "spool") == [_envelope(1).event_id]
    writer.submit(_envelope(2))
    writer.close(30.0)
    assert _spooled_ids(tmp_path / "spool") == [_envelope(n).event_id for n in (1, 2)]


# -- the embedded shipper -----------------------------------------------------------------------


def _log_events(log_dir: Path) -> list[Envelope]:
    log = EmbeddedLog(log_dir)
    codec = Codec()
    try:
        consumer = log.consumer("test-reader", [topic_name(REGION, "lifecycle")])
        found: list[Envelope] = []
        while True:
            records = consumer.poll(1000, timeout_s=0.2)
            if not records:
                break
            found += [codec.decode(r.value or b"", r.origin) for r in records]
        consumer.close()
        return found
    finally:
        log.close()


def test_the_shipper_ships_at_least_once_and_event_ids_de_duplicate(tmp_path: Path) -> None:
    spool_dir, log_dir = tmp_path / "spool", tmp_path / "log"
    spool = Spool(spool_dir, segment_bytes=4096, max_bytes=1 << 20)
    encoder = LineEncoder()
    spool.append([(encoder.line(_envelope(n)), False) for n in range(30)])
    spool.append([(b'{"fingerprint":"0123456789abcdef","event":{}}\n', False)])
    log = EmbeddedLog(log_dir)
    log.apply_topics(region_topics(REGION))
    shipper = SpoolShipper(spool_dir, log, Codec(), REGION, batch=7)
    first = shipper.ship_once()
    assert (first.shipped, first.dead_lettered) == (30, 1)
    assert shipper.ship_once().shipped == 0  # the position was saved
    # A crash after the flush but before the position moved: what followed the saved position
    # (here: everything) comes again.
    first_seq, first_path = segments(spool_dir)[0]
    ShippedPosition(first_seq, 0, first_path.stat().st_ino).save(spool_dir)
    spool.append([(encoder.line(_envelope(n)), False) for n in range(30, 35)])
    again = shipper.ship_once()
    shipper.close()
    log.close()
    spool.close()
    assert again.shipped == 35
    shipped = _log_events(log_dir)
    seen = SeenEvents()
    unique = [e for e in shipped if seen.first_time(e.event_id)]
    assert len(shipped) == 65
    # Ordered per key (partition), not across: compare as sets, and the events themselves.
    assert sorted(e.event_id for e in unique) == sorted(_envelope(n).event_id for n in range(35))
    assert _envelope(0) in unique


def test_the_spool_status_and_the_shipper_beside_the_agent(tmp_path: Path) -> None:
    spool_dir, log_dir = tmp_path / "spool", tmp_path / "log"
    spool = Spool(spool_dir, segment_bytes=4096, max_bytes=1 << 20)
    spool.append([(LineEncoder().line(_envelope(n)), False) for n in range(30)])
    spool.close()
    before = spool_status(spool_dir)
    assert before["shipped"] is None and len(before["segments"]) >= 1
    assert before["total_bytes"] == sum(p.stat().st_size for _, p in segments(spool_dir))
    assert before["segments"][0]["name"] == segments(spool_dir)[0][1].name
    log = EmbeddedLog(log_dir)
    log.apply_topics(region_topics(REGION))
    log.close()
    stop = threading.Event()
    ship = ship_beside(spool_dir, lambda: EmbeddedLog(log_dir), Codec(), REGION)
    thread = threading.Thread(target=ship, args=(stop,), daemon=True)
    thread.start()
    for _ in range(600):  # at most a minute: the shipper ships within its first second
        if spool_status(spool_dir)["shipped"] is not None:
            break
        thread.join(0.1)
    stop.set()
    thread.join(10.0)
    assert not thread.is_alive()  # it stops when told, having closed the log
    assert spool_status(spool_dir)["shipped"] is not None
    assert len(_log_events(log_dir)) == 30


# -- Vector's configuration ---------------------------------------------------------------------


def test_the_vector_configuration_reads_the_agents_files_with_the_agents_fields(
    tmp_path: Path,
) -> None:
    config = tomllib.loads((REPO / "infra" / "vector" / "vector.toml").read_text())
    source = config["sources"]["spotcap_spool"]
    assert source["type"] == "file"
    pattern = source["include"][0].rpartition("/")[2]
    spool = Spool(tmp_path, segment_bytes=4096, max_bytes=1 << 20)
    spool.append([(LineEncoder().line(_envelope(1)), False)])
    spool.close()
    (_, path), *_ = segments(tmp_path)
    assert Path(path).match(pattern)
    remap = config["transforms"]["spotcap_events"]["source"]
    line = json.loads(path.read_bytes().splitlines()[0])
    for field in ("topic", "key", "event_id", "avro"):
        assert f"line.{field}" in remap and field in line
    sink = config["sinks"]["spotcap_kafka"]
    assert sink["type"] == "kafka" and sink["inputs"] == ["spotcap_events"]
    assert sink["key_field"] == "key" and sink["topic"] == "{{ topic }}"
    assert sink["encoding"]["codec"] == "raw_message"
    assert sink["buffer"]["type"] == "disk"
    assert sink["librdkafka_options"]["acks"] == "all"
    assert sink["acknowledgements"]["enabled"] is True
