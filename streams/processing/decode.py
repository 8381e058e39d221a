"""Decode: a record's bytes to its event; undecodable bytes go to the dead letter."""

from __future__ import annotations

from collections import deque

from schemas.errors import CodecError
from streams.log import Record
from streams.processing.dead_letters import DeadLetterGuard
from streams.processing.message import Message, MessageRejected, ProcessingStep, new_message
from streams.reader import Decoded, Decoder, new_decoded


class Decode:
    def __init__(
        self, next_step: ProcessingStep[Message[Decoded]], decoder: Decoder, guard: DeadLetterGuard
    ) -> None:
        self._next = next_step
        self._decoder = decoder
        self._guard = guard

    def submit(self, item: Message[Record]) -> None:
        self._take(item.record)

    def submit_all(self, records: deque[Record]) -> int:
        """Take records from the left of `records`, in order, as `submit` takes each one's
        message (a poll's records handed on as they are, without a message apiece); stops at
        the first one the chain refuses (`MessageRejected`: left in `records`, untouched).
        Returns how many were taken."""
        taken = 0
        take = self._take
        try:
            while records:
                take(records[0])
                records.popleft()
                taken += 1
        except MessageRejected:
            pass
        return taken

    def _take(self, record: Record) -> None:
        try:
            origin = record.origin
            decoded = new_decoded(origin, self._decoder.decode(record, origin))
        except CodecError as error:
            self._guard.check(record, error)
            self._next.submit(new_message(None, record))  # its position still moves, in order
            self._guard.send(record, error)
        else:
            self._next.submit(new_message(decoded, record))
        self._guard.seen()

    def poll(self) -> None:
        self._next.poll()

    def join(self, timeout_s: float) -> None:
        self._next.join(timeout_s)

    def close(self) -> None:
        self._next.close()
