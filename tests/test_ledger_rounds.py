"""The ledger's follower (`spotcap run projections`' ledger rounds) does not accumulate open
files as its rounds go by (issue 27: chdb keeps each closed session's threads, each with three
files open under /proc/self/task, for the life of the process; the rounds run in a child
process that is replaced every few rounds).

Rounds over a growing embedded log: the open files of this process and its children at the
last child's rounds are those of the first child's, give or take; every event is applied once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from functools import partial
from pathlib import Path

import pytest

from projections.follow import _LedgerRounds
from schemas.codec import Codec
from spotcap.config import Settings
from spotcap.wiring import open_log, open_log_and_codec, stores
from streams.topics import region_topics
from streams.writer import publish
from tests.projection_support import process_tree, sim_events

ROUNDS, PER_CHILD = 15, 3
MARGIN = 40
"""Open files the last child's rounds may hold beyond the first's (the log's segments as it
grows). Rounds in this one process gained 15-25 a round: ~200 over these rounds."""


def open_files() -> int:
    """Open files of this process and its children (one not there any more counts none)."""
    total = 0
    for pid in process_tree(os.getpid()):
        with contextlib.suppress(OSError):
            total += len(os.listdir(f"/proc/{pid}/fd"))
    return total


def test_ledger_rounds_do_not_accumulate_open_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The rounds' child opens the home's own ledger: the suite's shared chdb path may already be
    # open in this process (an earlier test's ledger), and chdb admits one process per path.
    monkeypatch.delenv("SPOTCAP_CHDB_PATH")
    settings = Settings.load(home=tmp_path / "home", region="demo")
    events = [dataclasses.replace(e, region="demo") for _, e in sim_events(0.1, 10)]
    log = open_log(settings)
    rounds = _LedgerRounds(log, Codec(), "demo", stores(settings), stop=threading.Event(),
                           interval_s=1.0, opener=partial(open_log_and_codec, settings),
                           rounds_per_child=PER_CHILD)  # fmt: skip
    counts = []
    try:
        log.apply_topics(region_topics("demo"))
        chunk = -(-len(events) // ROUNDS)
        for i in range(ROUNDS):
            publish(log, Codec(), "demo", events[i * chunk : (i + 1) * chunk])
            rounds.round()
            counts.append(open_files())
        assert rounds.events == len(events) and rounds.unpriced == 0
        rounds.round()  # nothing new: nothing applied again
        assert rounds.events == len(events)
    finally:
        rounds.close()
        log.close()
    first, last = max(counts[:PER_CHILD]), max(counts[-PER_CHILD:])
    assert last <= first + MARGIN, counts
