"""Write-behind: a projection's batches written on a thread of their own, one at a time, while
the caller reads and decodes the next one.

Decoding is Python and holds the GIL; a write spends a good part of its time waiting for
PostgreSQL (another process) or inside chdb (which releases the GIL), and that part overlaps
the next batch's decoding. What does not change: the batches are written in order by one
thread, each as before (the fleet state's one transaction with its offsets; the ledger's
inserts and then its offsets), so a crash at any point leaves what a crash of the serial loop
would, and the consumer resumes from the stored offsets. At most one batch is in flight:
`submit` first waits for the previous write, and raises its error (the same exception, with a
note naming the batch) in the caller, before the next batch is handed on.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Generic, TypeVar

Batch = TypeVar("Batch")
Result = TypeVar("Result")


class WriteBehind(Generic[Batch, Result]):
    """Runs `write(batch)` on one writer thread, one batch at a time, behind the caller."""

    def __init__(self, write: Callable[[Batch], Result], name: str = "write-behind") -> None:
        self._write = write
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._in_flight: tuple[str, Future[Result]] | None = None

    def submit(self, label: str, batch: Batch) -> Result | None:
        """Wait for the batch in flight (raising its error), then start writing `batch`.
        Returns the result of the write waited for (None if none was in flight)."""
        done = self.wait()
        self._in_flight = (label, self._executor.submit(self._write, batch))
        return done

    def wait(self) -> Result | None:
        """Wait for the batch in flight, if any; return its result or raise its error with a
        note naming it (`label`, as given to `submit`)."""
        if self._in_flight is None:
            return None
        label, future = self._in_flight
        self._in_flight = None
        try:
            return future.result()
        except BaseException as error:
            if future.done() and future.exception() is error:  # the write's, not an interrupt's
                error.add_note(f"(while writing {label})")
            raise

    def close(self) -> None:
        """Let the write in flight finish (its error, if any, is dropped: the caller is leaving
        on another) and stop the thread."""
        self._in_flight = None
        self._executor.shutdown(wait=True)

    def __enter__(self) -> WriteBehind[Batch, Result]:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """On a normal exit, the write in flight is waited for and its error raised."""
        try:
            if error is None:
                self.wait()
        finally:
            self.close()
