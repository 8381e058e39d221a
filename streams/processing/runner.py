"""The processor: feeds a consumer's records through a chain built per assignment.

On assignment the factory builds a chain for the assigned partitions; on revocation (a
rebalance, or `close`) the chain is joined (its batch written, positions committed) within a
bound, then closed. When the chain refuses input (its writer is busy), the processor pauses its
partitions and keeps polling (so the group keeps it), and resumes once the chain takes input
again. `terminate` stops without joining: what was not committed is processed again by the
next owner, as after a crash.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic

from streams.log import CLOSE_TIMEOUT_S, Consumer, EventLog, Record, TopicPartition
from streams.processing.factory import Chain, ChainFactory
from streams.processing.message import Out

_BACKPRESSURE_POLL_S = 0.05  # how soon a refused input is offered again


class Processor(Generic[Out]):
    def __init__(
        self,
        log: EventLog,
        group: str,
        topics: Sequence[str],
        factory: ChainFactory[Out],
        *,
        poll_records: int = 500,
        poll_timeout_s: float = 0.5,
        join_timeout_s: float = 30.0,
    ) -> None:
        self._factory = factory
        self._poll_records = poll_records
        self._poll_timeout_s = poll_timeout_s
        self._join_timeout_s = join_timeout_s
        self._chain: Chain[Out] | None = None
        self._backlog: deque[Record] = deque()  # polled, refused by the chain for now
        self._held_back = False
        self._terminating = False
        self.processed = 0  # inputs the chain has taken
        self.consumer = log.consumer(group, topics, listener=self)

    # -- the consumer's listener -----------------------------------------------------------

    def on_assign(self, consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        if self._chain is not None:  # an incremental assignment: rebuild for the whole set
            self._retire(consumer)
        self._chain = self._factory.create(consumer, consumer.assignment())

    def on_revoke(self, consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        gone = set(partitions)
        # The next owner reads these from the committed positions.
        self._backlog = deque(r for r in self._backlog if (r.topic, r.partition) not in gone)
        self._retire(consumer)
        remaining = [tp for tp in consumer.assignment() if tp not in gone]
        if remaining and not self._terminating:
            self._chain = self._factory.create(consumer, remaining)

    def _retire(self, consumer: Consumer) -> None:
        chain, self._chain = self._chain, None
        self._held_back = False
        if chain is None:
            return
        try:
            if not self._terminating:
                chain.head.join(self._join_timeout_s)
        finally:
            chain.head.close()

    # -- running ---------------------------------------------------------------------------

    def run_once(self) -> int:
        """One poll, and as much of it as the chain takes; returns the inputs taken."""
        timeout_s = self._poll_timeout_s
        if self._backlog:  # held back: offer the refused input again soon
            timeout_s = min(timeout_s, _BACKPRESSURE_POLL_S)
        self._backlog.extend(self.consumer.poll(self._poll_records, timeout_s))
        chain = self._chain
        if chain is None:
            return 0
        head = chain.head
        backlog = self._backlog
        # The poll's records handed to the chain as they are (no message apiece); what it
        # refuses stays in the backlog, in order, offered again at the next run.
        taken = head.submit_all(backlog)
        if backlog:
            self._hold_back()
        head.poll()
        if self._held_back and not chain.batch.busy:
            self._held_back = False
            self.consumer.resume(self.consumer.assignment())
        self.processed += taken
        return taken

    def _hold_back(self) -> None:
        if not self._held_back:
            self._held_back = True
            self.consumer.pause(self.consumer.assignment())

    def run(self, stop: Callable[[], bool], max_s: float | None = None) -> None:
        """Run until `stop()` says so (checked after each poll), or for at most `max_s`."""
        deadline = None if max_s is None else time.monotonic() + max_s
        while not stop() and (deadline is None or time.monotonic() < deadline):
            self.run_once()

    @property
    def committed_inputs(self) -> int:
        """Inputs committed past by the current chain (since the last assignment)."""
        return 0 if self._chain is None else self._chain.commit.committed

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Join the chain (write and commit what it holds), then leave the group."""
        self.consumer.close(timeout_s)

    def terminate(self) -> None:
        """Stop at once, as a crash would: nothing held is written or committed."""
        self._terminating = True
        self.consumer.close()
