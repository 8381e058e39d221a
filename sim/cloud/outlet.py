"""The served region's notice path to real node agents (ADR-17): each notice and advisory on its
NATS subject and at the metadata endpoint, as the region issues it.

The region hands every notice, advisory, loss and deletion to `NoticeOutlet.deliver` (under its
lock, without waiting); an asyncio loop on a thread of its own delivers them in that order
through `provider.notices.serve.NoticeDispatcher` (the board first, so the metadata endpoint
never waits on NATS; a publish that fails is counted, not fatal) and serves the board with
`provider.notices.MetadataServer`. A notice reaches the relay when the region reaches its sim
time: at most one driver step (a few milliseconds of wall time) after the clock does.

A NATS that does not answer at start does not stop the cloud: as on premises when a hall's
relay is down, the metadata endpoint carries the notices (the agent polls it) while the outlet
tries NATS again every `retry_s`; what it could not publish meanwhile is counted in
`DispatchCounts.relay_failures`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from concurrent.futures import Future

from provider.notices import MetadataServer, NoticeBoard, NoticeRelay, RelayUnavailableError
from provider.notices.serve import DispatchCounts, NoticeDispatcher
from schemas.events import Advisory, Envelope, NoticeReceived

log = logging.getLogger(__name__)
_STOP = None


class NoticeOutlet:
    """NATS relay and metadata endpoint, fed from another thread."""

    def __init__(
        self,
        nats_url: str | None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        retry_s: float = 5.0,
    ) -> None:
        self.nats_url = nats_url
        self._host, self._port = host, port
        self._retry_s = retry_s
        self.board = NoticeBoard()
        self._dispatcher = NoticeDispatcher(None, self.board)
        self._relay: NoticeRelay | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[Envelope | None] | None = None
        self._thread: threading.Thread | None = None
        self._ready: Future[str] = Future()
        self.metadata_url = ""

    @property
    def counts(self) -> DispatchCounts:
        return self._dispatcher.counts

    @property
    def relay_connected(self) -> bool:
        return self._relay is not None

    def start(self, timeout_s: float = 30.0) -> None:
        """Open the metadata endpoint (an `OSError` for a busy port) and try NATS once."""
        self._thread = threading.Thread(target=self._run, name="cloud-notices", daemon=True)
        self._thread.start()
        self.metadata_url = self._ready.result(timeout=timeout_s)

    def deliver(self, envelope: Envelope) -> None:
        """Queue one event for delivery (any thread; never blocks)."""
        if self._loop is not None and self._queue is not None:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, envelope)

    def close(self, timeout_s: float = 10.0) -> None:
        """Deliver what is queued, then close the relay and the endpoint (bounded)."""
        if self._loop is not None and self._queue is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(self._queue.put_nowait, _STOP)
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as error:  # handed to start(); nothing else waits on this thread
            if not self._ready.done():
                self._ready.set_exception(error)

    async def _main(self) -> None:
        if self.nats_url:
            await self._connect()
        retrying = asyncio.create_task(self._keep_connecting()) if self.nats_url else None
        try:
            async with MetadataServer(self.board, host=self._host, port=self._port) as metadata:
                self._queue = asyncio.Queue()
                self._loop = asyncio.get_running_loop()
                self._ready.set_result(metadata.url)
                while (envelope := await self._queue.get()) is not _STOP:
                    if self._relay is None and isinstance(
                        envelope.payload, NoticeReceived | Advisory
                    ):
                        self.counts.relay_failures += int(self.nats_url is not None)
                    await self._dispatcher.dispatch(envelope)
        finally:
            if retrying is not None:
                retrying.cancel()
            if self._relay is not None:
                await self._relay.close()

    async def _connect(self) -> None:
        try:
            self._relay = await NoticeRelay.connect(self.nats_url or "")
        except RelayUnavailableError as error:
            log.warning("%s; notices go to the metadata endpoint until NATS answers", error)
            return
        counts = self._dispatcher.counts
        self._dispatcher = NoticeDispatcher(self._relay, self.board)
        self._dispatcher.counts = counts

    async def _keep_connecting(self) -> None:
        while self._relay is None:
            await asyncio.sleep(self._retry_s)
            await self._connect()
