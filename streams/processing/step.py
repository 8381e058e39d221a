"""Step: the pure part. A function from an event to events or rows; an input it fails on is
dead-lettered with the reason, and the chain goes on."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic

from streams.processing.dead_letters import DeadLetterGuard
from streams.processing.message import Message, Out, ProcessingStep, new_message
from streams.reader import Decoded

StepFunction = Callable[[Decoded], Sequence[Out]]


class Step(Generic[Out]):
    def __init__(
        self,
        next_step: ProcessingStep[Message[Sequence[Out]]],
        function: StepFunction[Out],
        guard: DeadLetterGuard,
    ) -> None:
        self._next = next_step
        self._function = function
        self._guard = guard

    def submit(self, item: Message[Decoded]) -> None:
        if item.payload is None:
            self._next.submit(new_message(None, item.record))
            return
        try:
            outputs = self._function(item.payload)
        except Exception as error:  # any failure of the function is this input's
            self._guard.check(item.record, error)
            self._next.submit(new_message(None, item.record))
            self._guard.send(item.record, error)
            return
        self._next.submit(new_message(outputs, item.record))

    def poll(self) -> None:
        self._next.poll()

    def join(self, timeout_s: float) -> None:
        self._next.join(timeout_s)

    def close(self) -> None:
        self._next.close()
