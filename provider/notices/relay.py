"""The relay publisher: puts notices and advisories on their per-instance NATS subjects (ADR-17).

Core NATS (at most once, sub-millisecond on a hall's relay): a notice lost on the way is still
found by the metadata poll behind it, and a duplicate is dropped by the subscriber, so the relay
needs no acknowledgement beyond the server's own (``flush``) and no persistence.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from nats.aio.client import Client
from nats.errors import Error as NatsError

from schemas.notices import Message


class RelayUnavailableError(Exception):
    """The NATS relay could not be reached or did not confirm a publish in time."""


class NoticeRelay:
    """Publishes notices and advisories as JSON on ``spotcap.<region>.{notice|advisory}.<id>``."""

    def __init__(self, client: Client, *, flush_timeout_s: float = 1.0) -> None:
        self._client = client
        self._flush_timeout_s = flush_timeout_s

    @classmethod
    async def connect(
        cls,
        servers: str | Sequence[str],
        *,
        connect_timeout_s: float = 2.0,
        flush_timeout_s: float = 1.0,
        name: str = "spotcap-notice-relay",
    ) -> NoticeRelay:
        """Connect to the relay; RelayUnavailableError if it does not answer in time."""
        urls = [servers] if isinstance(servers, str) else list(servers)
        client = await connect_nats(urls, name=name, timeout_s=connect_timeout_s)
        return cls(client, flush_timeout_s=flush_timeout_s)

    async def publish(self, message: Message) -> None:
        """Publish one notice or advisory and wait until the server has it (bounded).

        Raises RelayUnavailableError unless the server confirmed it: nats-py would otherwise
        buffer a publish made while it reconnects and report success.
        """
        try:
            if not self._client.is_connected:
                raise RelayUnavailableError("not connected to NATS (reconnecting or closed)")
            await self._client.publish(message.subject, message.to_json())
            # nats-py annotates the timeout as int but hands it to asyncio.wait_for (float).
            await self._client.flush(timeout=self._flush_timeout_s)  # type: ignore[arg-type]
            if not self._client.is_connected:
                raise RelayUnavailableError("the connection to NATS was lost during the publish")
        except (OSError, NatsError, TimeoutError, RelayUnavailableError) as exc:
            raise RelayUnavailableError(
                f"publishing {message.event_id} on {message.subject} failed: {exc}"
            ) from exc

    async def close(self) -> None:
        """Close the connection (bounded; a relay already gone is not an error here)."""
        if not self._client.is_closed:
            await _close_quietly(self._client)

    async def __aenter__(self) -> NoticeRelay:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


async def connect_nats(urls: Sequence[str], *, name: str, timeout_s: float) -> Client:
    """A NATS client that reconnects for ever once connected; RelayUnavailableError if the first
    connection is not made within ``timeout_s``."""
    client = Client()
    try:
        await asyncio.wait_for(
            client.connect(
                list(urls),
                name=name,
                connect_timeout=max(1, round(timeout_s)),
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=1,
                error_cb=_quiet,
            ),
            timeout=timeout_s,
        )
    except (OSError, NatsError, TimeoutError) as exc:
        await _close_quietly(client)
        raise RelayUnavailableError(f"cannot connect to NATS at {list(urls)}: {exc!r}") from exc
    except BaseException:
        await _close_quietly(client)
        raise
    return client


async def _close_quietly(client: Client) -> None:
    with contextlib.suppress(OSError, NatsError, TimeoutError):
        await asyncio.wait_for(client.close(), timeout=2.0)


async def _quiet(exc: Exception) -> None:
    """nats-py reports every failed (re)connect attempt here; the caller sees the outcome."""
