"""Commit: the last step. Positions reach it only after their batch's writes and dead letters
are durable, so a crash before it replays the batch (at-least-once; duplicates carry the same
event_id) and never skips an input."""

from __future__ import annotations

from typing import Any

from streams.log import COMMIT_TIMEOUT_S, Consumer
from streams.processing.message import RowBatch


class Commit:
    def __init__(self, consumer: Consumer, commit_timeout_s: float = COMMIT_TIMEOUT_S) -> None:
        self._consumer = consumer
        self._timeout_s = commit_timeout_s
        self.committed = 0  # inputs committed past

    def submit(self, item: RowBatch[Any]) -> None:
        self._consumer.commit(item.positions, self._timeout_s)
        self.committed += item.inputs

    def poll(self) -> None:
        pass

    def join(self, timeout_s: float) -> None:
        pass

    def close(self) -> None:
        pass
