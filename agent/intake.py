"""Notice intake (ADR-17): the NATS subscription with the metadata poll behind it.

Both channels run at once and independently (ADR-17): the subscription on the instance's notice
and advisory subjects delivers in well under a second; the poll of the metadata endpoint finds a
notice the relay lost, or every notice while NATS is down or was never reachable. Whatever comes
first is delivered; later copies of the same event id, from either channel, are dropped.
Starting never waits for NATS: the subscriber connects (and reconnects) in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

from agent.metadata import MetadataError, fetch_notice
from schemas.events import NoticeSource
from schemas.notices import (
    Delivery,
    Message,
    NoticeFormatError,
    advisory_subject,
    message_from_json,
    notice_subject,
)

log = logging.getLogger(__name__)

_SEEN_MAX = 1024  # event ids remembered for de-duplication (an instance sees a handful)


def _wall_us() -> int:
    return time.time_ns() // 1_000


class NoticeIntake:
    """Receives the notices and advisories of one instance, each once."""

    def __init__(
        self,
        region: str,
        instance_id: str,
        *,
        nats_servers: Sequence[str] = (),
        metadata_url: str | None = None,
        poll_interval_s: float = 5.0,
        http_timeout_s: float = 0.5,
        connect_timeout_s: float = 2.0,
        clock_us: Callable[[], int] = _wall_us,
        on_delivery: Callable[[Delivery], None] | None = None,
    ) -> None:
        """`on_delivery`, if given, is called with each new delivery on the event loop, in the
        message's own callback (the agent's way: no queue, no task between the socket and the
        drain); without it, deliveries wait for `next` or `get`."""
        self.region = region
        self.instance_id = instance_id
        self._notice_subject = notice_subject(region, instance_id)
        self._advisory_subject = advisory_subject(region, instance_id)
        self._nats_servers = list(nats_servers)
        self._metadata_url = metadata_url
        self._poll_interval_s = poll_interval_s
        self._http_timeout_s = http_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._clock_us = clock_us
        self._on_delivery = on_delivery
        self._queue: asyncio.Queue[Delivery] = asyncio.Queue()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._tasks: list[asyncio.Task[None]] = []
        self._client: Client | None = None
        self._subscribed = asyncio.Event()
        self.duplicates: dict[NoticeSource, int] = {}
        """Copies dropped because their event id was seen first (from either channel)."""

    async def start(self) -> None:
        """Start both channels in the background; returns at once."""
        if self._nats_servers:
            self._tasks.append(asyncio.create_task(self._run_nats(), name="notice-nats"))
        if self._metadata_url is not None:
            self._tasks.append(asyncio.create_task(self._run_poll(), name="notice-poll"))

    async def next(self) -> Delivery:
        """The next new notice or advisory, however long it takes (the agent's main loop)."""
        return await self._queue.get()

    async def get(self, timeout_s: float) -> Delivery:
        """The next new notice or advisory; TimeoutError if none comes within ``timeout_s``."""
        return await asyncio.wait_for(self._queue.get(), timeout=timeout_s)

    async def wait_subscribed(self, timeout_s: float) -> bool:
        """True once the NATS subscription is in place (False if not within ``timeout_s``)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._subscribed.wait(), timeout=timeout_s)
        return self._subscribed.is_set()

    async def close(self) -> None:
        await cancel_tasks(self._tasks)
        self._tasks.clear()
        if self._client is not None and not self._client.is_closed:
            with contextlib.suppress(OSError, NatsError, TimeoutError):
                await asyncio.wait_for(self._client.close(), timeout=2.0)
        self._client = None

    async def __aenter__(self) -> NoticeIntake:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _offer(self, message: Message, source: NoticeSource) -> None:
        if message.instance_id != self.instance_id:
            return
        if message.event_id in self._seen:
            self.duplicates[source] = self.duplicates.get(source, 0) + 1
            return
        self._seen[message.event_id] = None
        if len(self._seen) > _SEEN_MAX:
            self._seen.popitem(last=False)
        delivery = Delivery(message, source, self._clock_us())
        if self._on_delivery is not None:
            self._on_delivery(delivery)
        else:
            self._queue.put_nowait(delivery)

    async def _on_msg(self, msg: Msg) -> None:
        try:
            self._offer(message_from_json(msg.data), "nats")
        except NoticeFormatError as exc:
            log.warning("dropping a malformed message on %s: %s", msg.subject, exc)

    async def _run_nats(self) -> None:
        while True:
            client = Client()
            try:
                await asyncio.wait_for(
                    client.connect(
                        self._nats_servers,
                        name=f"spotcap-agent-{self.instance_id}",
                        connect_timeout=max(1, round(self._connect_timeout_s)),
                        allow_reconnect=True,
                        max_reconnect_attempts=-1,  # a node keeps trying for its whole life
                        reconnect_time_wait=1,
                        error_cb=_quiet,
                    ),
                    timeout=self._connect_timeout_s,
                )
            except (OSError, NatsError, TimeoutError) as exc:
                log.info("NATS unreachable, the metadata poll carries notices: %r", exc)
                with contextlib.suppress(OSError, NatsError, TimeoutError):
                    await asyncio.wait_for(client.close(), timeout=2.0)
                await asyncio.sleep(self._connect_timeout_s)
                continue
            self._client = client
            try:
                # nats-py re-subscribes by itself after every later reconnect.
                await client.subscribe(self._notice_subject, cb=self._on_msg)
                await client.subscribe(self._advisory_subject, cb=self._on_msg)
                await client.flush(timeout=max(1, round(self._connect_timeout_s)))
            except (OSError, NatsError, TimeoutError) as exc:
                log.info("NATS subscription failed, retrying: %r", exc)
                self._client = None
                with contextlib.suppress(OSError, NatsError, TimeoutError):
                    await asyncio.wait_for(client.close(), timeout=2.0)
                continue
            self._subscribed.set()
            return

    async def _run_poll(self) -> None:
        assert self._metadata_url is not None
        while True:
            try:
                notice = await fetch_notice(
                    self._metadata_url, self.instance_id, timeout_s=self._http_timeout_s
                )
            except MetadataError as exc:
                log.debug("metadata poll failed: %s", exc)
            else:
                if notice is not None:
                    self._offer(notice, "metadata")
            await asyncio.sleep(self._poll_interval_s)


async def _quiet(exc: Exception) -> None:
    """nats-py reports every failed (re)connect attempt here; the poll covers the gap."""


async def cancel_tasks(tasks: Sequence[asyncio.Task[None]], timeout_s: float = 1.0) -> None:
    """Cancel `tasks` and wait for them, bounded.

    Cancelled again while any is left: on Python 3.11 a cancellation that meets an inner
    ``asyncio.wait_for`` finishing at the same moment is lost (fixed in 3.12), and a poll loop
    that lost it would keep a closing agent waiting for ever.
    """
    pending = {t for t in tasks if not t.done()}
    for _ in range(5):
        if not pending:
            return
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=timeout_s)
    for task in pending:
        log.error("task %s did not stop after 5 cancellations", task.get_name())
