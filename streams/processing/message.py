"""What travels through the processing chain, and the shape of a step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from streams.log import Record, TopicPartition, slots_constructor

T = TypeVar("T")
Out = TypeVar("Out")
T_contra = TypeVar("T_contra", contravariant=True)


@dataclass(frozen=True, slots=True)
class Message(Generic[T]):
    """A payload with the record it came from (its position, and its bytes for a dead letter).

    `payload` is None when there is nothing to pass on (the input was dead-lettered or
    filtered): the message still travels, so that its position is committed in order.
    """

    payload: T | None
    record: Record


# `Message(payload, record)`, its slots filled directly (several per record processed).
new_message = slots_constructor(Message)


@dataclass(frozen=True, slots=True)
class RowBatch(Generic[Out]):
    """Rows (events or projection rows) to write together, and the positions to commit once
    they are durable: for each partition, the next offset after the batch's last input."""

    rows: Sequence[Out]
    positions: Mapping[TopicPartition, int]
    inputs: int


class MessageRejected(Exception):  # noqa: N818 (arroyo's name for the signal)
    """A step cannot take this item now (its downstream is busy); offer it again later. The
    item has not been touched."""


class ProcessingStep(Protocol[T_contra]):
    """A step of the chain: takes items, hands its results to the next step."""

    def submit(self, item: T_contra) -> None:
        """Take one item (or raise `MessageRejected` without touching it)."""

    def poll(self) -> None:
        """Do work that is due (a batch that has waited long enough, a delivery to retry)."""

    def join(self, timeout_s: float) -> None:
        """Hand on everything held and wait for it to be done (written, committed), within
        `timeout_s`; raises a `LogTimeoutError` otherwise."""

    def close(self) -> None:
        """Release what the step holds; nothing more will be submitted."""
