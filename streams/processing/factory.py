"""Builds the chain for a partition assignment, from the last step back (as snuba does):
decode -> step -> batch -> write -> commit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic

from streams.log import COMMIT_TIMEOUT_S, Consumer, TopicPartition
from streams.processing.batch import Batch
from streams.processing.commit import Commit
from streams.processing.dead_letters import DeadLetterGuard
from streams.processing.decode import Decode
from streams.processing.message import Out
from streams.processing.step import Step, StepFunction
from streams.processing.write import Sink, Write
from streams.reader import Decoder


@dataclass(frozen=True, slots=True)
class BatchSettings:
    max_rows: int = 5000
    max_inputs: int = 5000
    max_age_s: float = 1.0
    write_timeout_s: float = 30.0
    commit_timeout_s: float = COMMIT_TIMEOUT_S


@dataclass(frozen=True, slots=True)
class Chain(Generic[Out]):
    """A built chain: its first step, and the steps the processor asks about."""

    head: Decode
    batch: Batch[Out]
    commit: Commit


class ChainFactory(Generic[Out]):
    """Makes a chain per assignment. `step_for(partitions)` gives the pure function for the
    assigned partitions: a stateful step loads those partitions' state there."""

    def __init__(
        self,
        step_for: Callable[[Sequence[TopicPartition]], StepFunction[Out]],
        sink: Sink[Out],
        decoder: Decoder,
        guard: DeadLetterGuard,
        settings: BatchSettings = BatchSettings(),
    ) -> None:
        self.step_for = step_for
        self.sink = sink
        self.decoder = decoder
        # One guard for the processor's life: the ratio's window spans rebalances.
        self.guard = guard
        self.settings = settings

    def create(self, consumer: Consumer, partitions: Sequence[TopicPartition]) -> Chain[Out]:
        s = self.settings
        commit = Commit(consumer, s.commit_timeout_s)
        write: Write[Out] = Write(commit, self.sink, self.guard, s.write_timeout_s)
        batch: Batch[Out] = Batch(write, s.max_rows, s.max_inputs, s.max_age_s)
        step: Step[Out] = Step(batch, self.step_for(partitions), self.guard)
        return Chain(Decode(step, self.decoder, self.guard), batch, commit)
