"""WriteBehind: batches written in order on one thread, at most one in flight, and a write's
error raised in the caller with the batch named."""

from __future__ import annotations

import threading

import pytest

from projections.write_behind import WriteBehind


class Recorder:
    """A write that records what it wrote and checks that no two writes overlap."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.written: list[int] = []
        self.threads: set[str] = set()
        self.active = 0
        self.fail_on = fail_on
        self.release = threading.Event()
        self.release.set()

    def write(self, batch: int) -> int:
        self.active += 1
        assert self.active == 1, "two writes in flight"
        self.threads.add(threading.current_thread().name)
        self.release.wait()
        self.active -= 1
        if batch == self.fail_on:
            raise ConnectionError(f"the database went away at {batch}")
        self.written.append(batch)
        return batch * 10


def test_batches_are_written_in_order_on_one_thread_and_results_come_back_in_order() -> None:
    recorder = Recorder()
    results = []
    with WriteBehind(recorder.write, name="test-writer") as behind:
        for n in range(20):
            results.append(behind.submit(f"batch {n}", n))
        results.append(behind.wait())
    assert recorder.written == list(range(20))
    assert results == [None, *(n * 10 for n in range(20))]
    assert len(recorder.threads) == 1
    assert threading.current_thread().name not in recorder.threads


def test_submit_waits_for_the_batch_in_flight_before_handing_on_the_next() -> None:
    recorder = Recorder()
    recorder.release.clear()
    with WriteBehind(recorder.write) as behind:
        behind.submit("batch 0", 0)
        second = threading.Thread(target=behind.submit, args=("batch 1", 1))
        second.start()
        second.join(0.2)
        # The first write is held: the second batch is not handed on.
        assert second.is_alive()
        assert recorder.written == []
        recorder.release.set()
        second.join()
        assert recorder.written[:1] == [0]
    assert recorder.written == [0, 1]


def test_a_failed_write_is_raised_in_the_caller_with_its_batch_named() -> None:
    recorder = Recorder(fail_on=3)
    behind = WriteBehind(recorder.write)
    try:
        for n in range(3):
            behind.submit(f"batch {n}", n)
        behind.submit("batch 3", 3)
        with pytest.raises(ConnectionError) as raised:
            behind.submit("batch 4", 4)
    finally:
        behind.close()
    assert "(while writing batch 3)" in raised.value.__notes__
    # Nothing after the failed batch was written.
    assert recorder.written == [0, 1, 2]


def test_leaving_normally_raises_the_last_batch_s_error() -> None:
    recorder = Recorder(fail_on=1)
    with (
        pytest.raises(ConnectionError, match="went away at 1"),
        WriteBehind(recorder.write) as behind,
    ):
        behind.submit("batch 0", 0)
        behind.submit("batch 1", 1)
    assert recorder.written == [0]


def test_leaving_on_an_error_lets_the_write_in_flight_finish() -> None:
    recorder = Recorder()
    with pytest.raises(KeyError), WriteBehind(recorder.write) as behind:
        behind.submit("batch 0", 0)
        raise KeyError("the reader failed")
    assert recorder.written == [0]
    assert recorder.active == 0
