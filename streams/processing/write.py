"""Write: make a batch's rows durable, then the dead letters, then hand the positions on.

A sink that is down for a while raises `SinkUnavailable`; the batch is refused (not lost) and
offered again, and the processor pauses its partitions meanwhile (back-pressure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Generic, Protocol, TypeVar

from schemas.events import Envelope
from streams.log import TopicPartition
from streams.processing.dead_letters import DeadLetterGuard
from streams.processing.message import MessageRejected, Out, ProcessingStep, RowBatch
from streams.writer import EventWriter

Row_contra = TypeVar("Row_contra", contravariant=True)


class SinkUnavailable(Exception):  # noqa: N818 (a signal, like MessageRejected)
    """The sink cannot write now but may later (a database restarting); nothing was written."""


class Sink(Protocol[Row_contra]):
    def write(
        self, rows: Sequence[Row_contra], positions: Mapping[TopicPartition, int], timeout_s: float
    ) -> None:
        """Make `rows` durable within `timeout_s`. A projection that keeps its own offsets
        stores `positions` in the same transaction (STYLE.md §4)."""


class Write(Generic[Out]):
    def __init__(
        self,
        next_step: ProcessingStep[RowBatch[Out]],
        sink: Sink[Out],
        guard: DeadLetterGuard,
        write_timeout_s: float = 30.0,
    ) -> None:
        self._next = next_step
        self._sink = sink
        self._guard = guard
        self._timeout_s = write_timeout_s

    def submit(self, item: RowBatch[Out]) -> None:
        try:
            self._sink.write(item.rows, item.positions, self._timeout_s)
        except SinkUnavailable as busy:
            raise MessageRejected from busy
        self._guard.flush(self._timeout_s)
        self._next.submit(item)

    def poll(self) -> None:
        self._next.poll()

    def join(self, timeout_s: float) -> None:
        self._next.join(timeout_s)

    def close(self) -> None:
        self._next.close()


class EventSink:
    """Writes envelopes to the log through `EventWriter` (the one write path) and waits for
    them to be acknowledged."""

    def __init__(self, writer: EventWriter) -> None:
        self.writer = writer

    def write(
        self, rows: Sequence[Envelope], positions: Mapping[TopicPartition, int], timeout_s: float
    ) -> None:
        for envelope in rows:
            self.writer.write(envelope)
        self.writer.flush(timeout_s)
