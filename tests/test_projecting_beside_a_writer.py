"""A projection's catch-up reads the embedded log while another process writes it (a `spotcap
demo` still running, another projection's catch-up): it takes the log's one writer lock only
when it has a dead letter to write, and then says plainly that the lock is taken."""

from __future__ import annotations

from pathlib import Path

import pytest

from projections.catchup import Writer, catch_up
from projections.ledger.store import ChdbStore
from schemas.codec import Codec
from spotcap.config import Settings
from streams.embedded import EmbeddedLog
from streams.log import LogError
from streams.topics import region_topics, topic_name
from streams.writer import EventWriter
from tests.factories import notice

REGION = "beside"


def test_a_catch_up_runs_beside_a_writer_and_needs_the_lock_only_to_dead_letter(
    tmp_path: Path, ledger_store: ChdbStore
) -> None:
    settings = Settings(home=tmp_path, region=REGION)
    log = EmbeddedLog(settings.log_dir)
    log.apply_topics(region_topics(REGION))
    writer = EventWriter(log, Codec(), REGION, flush_every=10)
    for n in range(40):
        writer.write(notice(REGION, n % 5, seq=n))
    writer.close()
    log.close()

    # Another process's writer holds the lock (a second open of the log is another holder).
    other = EmbeddedLog(settings.log_dir)
    held = other.producer()
    reader = EmbeddedLog(settings.log_dir)
    report = catch_up(reader, Codec(), REGION, Writer("ledger", ledger=ledger_store))
    assert report.events == 40
    rows = ledger_store.query("SELECT count() AS n FROM events FINAL")
    assert rows[0]["n"] == 40

    # A record no codec reads must be dead-lettered: that needs the lock, and says so.
    held.produce(topic_name(REGION, "lifecycle"), b"\x00not avro", key=b"i-00001")
    held.flush()
    with pytest.raises(LogError, match="another process is writing the embedded log"):
        catch_up(reader, Codec(), REGION, Writer("ledger", ledger=ledger_store))
    assert ledger_store.query("SELECT count() AS n FROM events FINAL")[0]["n"] == 40

    # Once the writer is done, the same catch-up dead-letters it and goes on.
    held.close()
    other.close()
    report = catch_up(reader, Codec(), REGION, Writer("ledger", ledger=ledger_store))
    assert report.events == 0
    dead = topic_name(REGION, "deadletter")
    assert sum(reader.end_offsets(dead).values()) == 1
    reader.close()
