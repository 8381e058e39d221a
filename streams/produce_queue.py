"""The embedded producer's queue: each record queued on its partition as it is produced.

`produce` places a record by its key (Kafka's murmur2, `streams.partitioner`) and adds its
key, value, headers and timestamp to its partition's columns (`streams.segment.Columns`: no
object a record but its fields), so that a flush writes each partition's rows as one block
without a pass over the queue to group them; the order the
records were produced in is kept as one small number a record (its partition's slot), for
`flush` to return them in that order. A subclass says where a topic's partitions are
(`_route`). Where the C extension is built (`streams._framing.RecordQueue`, what
`EmbeddedProducer` is based on) `produce` runs without a Python frame; this class is the
reference and the fallback, and a test checks that both queue the same rows in the same order.
"""

from __future__ import annotations

import time
from array import array

from streams.log import Headers
from streams.partitioner import partition_for
from streams.segment import Columns

Route = tuple[int, list[Columns]]
"""A topic's slot of partition 0 (partition n's is that + n) and each partition's rows."""


def no_rows() -> Columns:
    """A partition's columns with nothing queued."""
    return [], [], [], []


class RecordQueue:
    """Records queued by partition, and the order they were produced in."""

    def __init__(self) -> None:
        self._routes: dict[str, Route] = {}
        self._touched: list[int] = []  # slots holding rows, in the order first produced to
        self._order = array("I")  # each queued record's slot, in produce order

    def _route(self, topic: str) -> Route:
        """Where `topic`'s records go: called once per topic, at its first record."""
        raise NotImplementedError

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers = (),
        timestamp_ms: int | None = None,
    ) -> None:
        route = self._routes.get(topic)
        if route is None:
            route = self._routes[topic] = self._route(topic)
        slot, queues = route
        number = 0 if key is None else partition_for(key, len(queues))
        keys, values, headers_, stamps = queues[number]
        slot += number
        if not keys:
            self._touched.append(slot)
        keys.append(key)
        values.append(value)
        headers_.append(headers)
        stamps.append(timestamp_ms if timestamp_ms is not None else time.time_ns() // 1_000_000)
        self._order.append(slot)

    def take(self) -> tuple[list[int], array[int]]:
        """(the slots holding rows, each queued record's slot in produce order); the queue
        starts anew (the rows stay in the lists `_route` gave, for the caller to take)."""
        touched, order = self._touched, self._order
        self._touched, self._order = [], array("I")
        return touched, order

    def queued(self) -> int:
        """How many records are queued."""
        return len(self._order)


RecordQueuePython = RecordQueue
try:
    from streams import _framing
except ImportError:  # built without a C compiler: the Python queue
    FRAMING = "python"
else:
    RecordQueue = _framing.RecordQueue  # type: ignore[misc,assignment]
    FRAMING = "c"
