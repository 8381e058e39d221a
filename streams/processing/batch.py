"""Batch: gather the step's outputs until there are enough or they have waited long enough."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Generic

from streams.log import LogTimeoutError, TopicPartition
from streams.processing.message import Message, MessageRejected, Out, ProcessingStep, RowBatch


class JoinTimeoutError(LogTimeoutError):
    """A batch could not be handed on (its writer stayed busy) before the join's limit."""


class Batch(Generic[Out]):
    """Hands a `RowBatch` on when it holds `max_rows` rows or `max_inputs` inputs, or when its
    first input has waited `max_age_s`. While the writer refuses a batch (busy), the batch is
    kept and new inputs are refused (`MessageRejected`) until it is taken."""

    def __init__(
        self,
        next_step: ProcessingStep[RowBatch[Out]],
        max_rows: int = 5000,
        max_inputs: int = 5000,
        max_age_s: float = 1.0,
    ) -> None:
        self._next = next_step
        self._max_rows = max_rows
        self._max_inputs = max_inputs
        self._max_age_s = max_age_s
        self._rows: list[Out] = []
        self._positions: dict[TopicPartition, int] = {}
        self._inputs = 0
        self._started = 0.0
        self._refused: RowBatch[Out] | None = None  # a full batch the writer refused

    def submit(self, item: Message[Sequence[Out]]) -> None:
        if self._refused is not None and not self._hand_on_refused():
            raise MessageRejected
        if not self._inputs:
            self._started = time.monotonic()
        if item.payload:
            self._rows.extend(item.payload)
        record = item.record
        self._positions[(record.topic, record.partition)] = record.offset + 1
        self._inputs += 1
        if len(self._rows) >= self._max_rows or self._inputs >= self._max_inputs:
            self._hand_on()

    def _hand_on(self) -> None:
        batch = RowBatch(self._rows, self._positions, self._inputs)
        self._rows, self._positions, self._inputs = [], {}, 0
        try:
            self._next.submit(batch)
        except MessageRejected:
            self._refused = batch

    def _hand_on_refused(self) -> bool:
        assert self._refused is not None
        try:
            self._next.submit(self._refused)
        except MessageRejected:
            return False
        self._refused = None
        return True

    @property
    def busy(self) -> bool:
        """A batch is waiting for the writer: new inputs would be refused."""
        return self._refused is not None

    def poll(self) -> None:
        if self._refused is not None:
            self._hand_on_refused()
        elif self._inputs and time.monotonic() - self._started >= self._max_age_s:
            self._hand_on()
        self._next.poll()

    def join(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        if self._inputs and self._refused is None:
            self._hand_on()
        while self._refused is not None and not self._hand_on_refused():
            left = deadline - time.monotonic()
            if left <= 0:
                raise JoinTimeoutError(
                    f"a batch of {self._refused.inputs:,} inputs could not be written within "
                    f"{timeout_s} s (the writer stayed busy); it will be processed again"
                )
            time.sleep(min(left, 0.1))
        self._next.join(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        self._next.close()
