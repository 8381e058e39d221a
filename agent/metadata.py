"""The agent's client of the metadata endpoint: the slower poll behind the NATS relay (ADR-17).

``GET <base>/v1/instances/<id>/notice`` answers 200 with the notice's JSON while one is pending,
404 otherwise (docs/providers.md). Plain HTTP/1.1 on asyncio streams, one request per
connection, the whole exchange bounded in time and the body in size: the agent polls it every
few seconds for the life of the node, so it must never hang or grow.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

from schemas.notices import MAX_MESSAGE_BYTES, Notice, NoticeFormatError


class MetadataError(Exception):
    """The metadata endpoint could not be read (unreachable, slow, or an unexpected answer)."""


async def fetch_notice(base_url: str, instance_id: str, *, timeout_s: float = 0.5) -> Notice | None:
    """The pending notice of ``instance_id`` from the metadata endpoint, or None (404).

    Raises MetadataError when the endpoint cannot be reached in ``timeout_s`` or answers
    anything else.
    """
    url = urlsplit(base_url)
    if url.scheme != "http" or url.hostname is None:
        raise ValueError(f"metadata URL {base_url!r} must be http://host[:port]")
    path = f"{url.path.rstrip('/')}/v1/instances/{instance_id}/notice"
    try:
        status, body = await asyncio.wait_for(
            _get(url.hostname, url.port or 80, path), timeout=timeout_s
        )
    except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
        raise MetadataError(f"GET {base_url}{path}: {exc!r}") from exc
    if status == 404:
        return None
    if status != 200:
        raise MetadataError(f"GET {base_url}{path}: HTTP {status}")
    try:
        return Notice.from_json(body)
    except NoticeFormatError as exc:
        raise MetadataError(f"GET {base_url}{path}: {exc}") from exc


async def _get(host: str, port: int, path: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: application/json\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        fields = status_line.split()
        if len(fields) < 2 or not fields[1].isdigit():
            raise ValueError(f"malformed status line {status_line!r}")
        length = MAX_MESSAGE_BYTES + 1
        for line in header_lines:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length" and value.strip().isdigit():
                length = int(value)
        if length > MAX_MESSAGE_BYTES:
            raise ValueError(f"response body of {length} bytes, over {MAX_MESSAGE_BYTES}")
        body = await reader.readexactly(length)
    finally:
        writer.close()
    return int(fields[1]), body
