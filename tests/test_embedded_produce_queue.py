"""The embedded producer's queue (`streams.produce_queue`): the C queue against the Python
reference, and the producer built on it returning its records in produce order."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams import produce_queue
from streams.embedded import EmbeddedLog
from streams.log import Headers
from streams.partitioner import partition_for
from streams.produce_queue import RecordQueuePython, Route, no_rows
from streams.segment import Columns
from streams.topics import region_topics, topic_name

# The extension is what `pip install -e .` builds (setup.py); the Python code is its fallback.
from streams import _framing  # isort: skip  (an ImportError here: the extension is not built)

PARTITIONS = {"a": 1, "b": 3, "c": 40}
Produced = tuple[str, bytes | None, bytes | None, Headers, int | None]
produced_strategy = st.lists(
    st.tuples(
        st.sampled_from(sorted(PARTITIONS)),
        st.none() | st.binary(max_size=40),
        st.none() | st.binary(max_size=12),
        st.lists(st.tuples(st.text(max_size=4), st.binary(max_size=4)), max_size=2).map(tuple),
        st.none() | st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1),
    ),
    max_size=60,
)


class _Routes:
    """`_route` of a queue: the topics of `PARTITIONS`, slots in the order first asked for."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.slots: list[tuple[str, int, list[Columns]]] = []

    def route(self, topic: str) -> Route:
        self.asked.append(topic)
        queues = [no_rows() for _ in range(PARTITIONS[topic])]
        route = (len(self.slots), queues)
        self.slots.extend((topic, n, queues) for n in range(len(queues)))
        return route


class _CQueue(_framing.RecordQueue):
    def __init__(self) -> None:
        super().__init__()
        self.routes = _Routes()

    def _route(self, topic: str) -> Route:
        return self.routes.route(topic)


class _PythonQueue(RecordQueuePython):
    def __init__(self) -> None:
        super().__init__()
        self.routes = _Routes()

    def _route(self, topic: str) -> Route:
        return self.routes.route(topic)


def test_the_producer_queues_with_the_extension() -> None:
    assert produce_queue.FRAMING == "c"
    assert produce_queue.RecordQueue is _framing.RecordQueue  # type: ignore[comparison-overlap]


def _fill(queue: _CQueue | _PythonQueue, produced: list[Produced], *, keywords: bool) -> None:
    for topic, value, key, headers, stamp in produced:
        if keywords:
            queue.produce(topic, value=value, key=key, headers=headers, timestamp_ms=stamp)
        else:
            queue.produce(topic, value, key, headers, stamp)


@given(produced_strategy, st.booleans())
def test_the_c_queue_queues_what_the_python_queue_queues(
    produced: list[Produced], keywords: bool
) -> None:
    before = time.time_ns() // 1_000_000
    c, python = _CQueue(), _PythonQueue()
    _fill(c, produced, keywords=keywords)
    _fill(python, produced, keywords=not keywords)
    after = time.time_ns() // 1_000_000
    assert c.queued() == python.queued() == len(produced)
    assert c.routes.asked == python.routes.asked == list(dict.fromkeys(p[0] for p in produced))
    c_taken, python_taken = c.take(), python.take()
    assert c_taken[0] == python_taken[0]
    assert list(c_taken[1]) == list(python_taken[1])
    assert c.queued() == python.queued() == 0 and c.take()[0] == []
    for (_, number, c_rows), (_, _, python_rows) in zip(
        c.routes.slots, python.routes.slots, strict=True
    ):
        got, expected = c_rows[number], python_rows[number]
        assert got[:3] == expected[:3]
        assert len({len(column) for column in got}) == 1, "the columns are of one length"
        # A record without a timestamp is stamped with the time it was produced.
        for stamp, want in zip(got[3], expected[3], strict=True):
            assert stamp == want or before <= stamp <= after
    # Each record sits on its key's partition, in produce order, its slot recorded.
    rows_seen = {slot: 0 for slot in range(len(c.routes.slots))}
    for (topic, value, key, headers, _), slot in zip(produced, c_taken[1], strict=True):
        name, number, queues = c.routes.slots[slot]
        assert name == topic
        assert number == (0 if key is None else partition_for(key, PARTITIONS[topic]))
        keys, values, headers_, _ = queues[number]
        at = rows_seen[slot]
        assert (keys[at], values[at], headers_[at]) == (key, value, headers)
        rows_seen[slot] += 1


def test_the_c_queue_refuses_what_it_cannot_place() -> None:
    queue = _CQueue()
    with pytest.raises(TypeError, match="key must be bytes or None"):
        queue.produce("b", b"v", "k")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unexpected or repeated"):
        queue.produce("b", b"v", b"k", key=b"k")  # type: ignore[misc]
    with pytest.raises(TypeError, match="needs a topic and a value"):
        queue.produce("b")  # type: ignore[call-arg]
    with pytest.raises(KeyError):
        queue.produce("unknown", b"v")
    assert queue.queued() == 0, "a refused record is not queued"

    class Rows(_framing.RecordQueue):
        def _route(self, topic: str) -> Route:
            return (0, [[[], [], []]])  # type: ignore[list-item]

    with pytest.raises(TypeError, match="four lists"):
        Rows().produce("a", b"v")

    class Broken(_framing.RecordQueue):
        def _route(self, topic: str) -> Route:
            return (0, [])

    with pytest.raises(TypeError, match="the rows of each partition"):
        Broken().produce("a", b"v")


def test_the_producer_returns_its_records_in_produce_order(tmp_path: Path) -> None:
    log = EmbeddedLog(tmp_path / "log")
    log.apply_topics(region_topics("r"))
    topics = [topic_name("r", t) for t in ("lifecycle", "market", "demand")]
    producer = log.producer()
    sent = [
        (topics[i % 3], f"v{i}".encode(), None if i % 7 == 0 else f"k{i % 11}".encode(), i)
        for i in range(500)
    ]
    for topic, value, key, stamp in sent:
        producer.produce(topic, value, key=key, timestamp_ms=stamp)
    delivered = producer.flush()
    assert [(r.topic, r.value, r.key, r.timestamp_ms) for r in delivered] == sent
    # Each partition's offsets run on from 0 in the order its records were produced.
    seen: dict[tuple[str, int], int] = {}
    for record in delivered:
        tp = (record.topic, record.partition)
        assert record.offset == seen.get(tp, 0)
        seen[tp] = record.offset + 1
        partitions = log.partitions_for(record.topic)
        assert record.partition == (
            0 if record.key is None else partition_for(record.key, partitions)
        )
    again = producer.flush()
    assert again == []
    producer.produce(topics[0], b"later", key=b"k1", timestamp_ms=9)
    (later,) = producer.flush()
    assert later.offset == seen[(later.topic, later.partition)]
    log.close()
