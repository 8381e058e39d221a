"""The metadata endpoint: the slower poll behind the NATS relay (ADR-17).

``GET /v1/instances/<id>/notice`` answers 200 with the notice's JSON while one is pending for
the instance, 404 otherwise. In production the private cloud's metadata service answers it
(docs/providers.md); this module is the reference implementation used by the embedded mode and
the tests; the agent's client is `agent.metadata.fetch_notice`. Plain HTTP/1.1 on asyncio
streams, one request per connection, every read bounded in size and time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from urllib.parse import unquote

from schemas.notices import Notice

_NOTICE_PATH = re.compile(r"^/v1/instances/([^/?#]+)/notice$")
_MAX_HEADER_BYTES = 16 * 1024
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


class NoticeBoard:
    """The notices pending per instance (the state behind the endpoint)."""

    def __init__(self) -> None:
        self._pending: dict[str, Notice] = {}

    def post(self, notice: Notice) -> None:
        """Make ``notice`` the pending notice of its instance."""
        self._pending[notice.instance_id] = notice

    def withdraw(self, instance_id: str) -> None:
        """The instance has no pending notice any more (deleted, or the notice was cancelled)."""
        self._pending.pop(instance_id, None)

    def pending(self, instance_id: str) -> Notice | None:
        return self._pending.get(instance_id)


class MetadataServer:
    """Serves a NoticeBoard over HTTP on ``host:port`` (port 0: a free one)."""

    def __init__(
        self,
        board: NoticeBoard,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        read_timeout_s: float = 5.0,
    ) -> None:
        self.board = board
        self._host = host
        self._port = port
        self._read_timeout_s = read_timeout_s
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self._host, self._port)
        self._port = self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        """``http://host:port`` once started."""
        return f"http://{self._host}:{self._port}"

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), timeout=2.0)
            self._server = None

    async def __aenter__(self) -> MetadataServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(
                reader.readuntil(b"\r\n\r\n"), timeout=self._read_timeout_s
            )
            status, body = self._answer(head)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            status, body = 400, {"error": "malformed or incomplete request"}
        except ConnectionError:
            writer.close()
            return
        payload = json.dumps(body, separators=(",", ":")).encode()
        writer.write(
            f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + payload
        )
        with contextlib.suppress(ConnectionError, TimeoutError):
            await asyncio.wait_for(writer.drain(), timeout=self._read_timeout_s)
        writer.close()

    def _answer(self, head: bytes) -> tuple[int, object]:
        if len(head) > _MAX_HEADER_BYTES:
            return 400, {"error": "request head too large"}
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return 400, {"error": "malformed request line"}
        method, target = parts[0], parts[1]
        match = _NOTICE_PATH.match(target)
        if match is None:
            return 404, {"error": f"no such resource: {target}"}
        if method != "GET":
            return 405, {"error": f"{method} not allowed; use GET"}
        notice = self.board.pending(unquote(match.group(1)))
        if notice is None:
            return 404, {"error": "no notice pending"}
        return 200, notice.to_dict()
