"""A replay server of recorded Kubernetes API exchanges, for the agent's Kubernetes path.

No API server runs here, so the official ``kubernetes`` client talks over HTTP to this server
on 127.0.0.1, which answers from ``tests/recordings/kubernetes/<name>.json``: a JSON list of
exchanges shaped as the API server answers them (Status objects for errors, a 429 with the
disruption-budget cause, the Eviction subresource's 201)::

    {"note": "...", "method": "POST",
     "path": "/api/v1/namespaces/web/pods/web-0/eviction",
     "match_body": {"metadata": {"name": "web-0"}},
     "status": 429, "headers": {...}, "response": {...}, "times": 1, "delay_s": 1.2}

The first exchange that matches (method, path, query parameters in any order, ``match_body``
contained in the JSON body) and has not been used ``times`` times answers, after ``delay_s``
(an API server slower than the agent's 800 ms cap). Every answered call is kept in ``calls``;
anything unmatched is answered 501 and fails the test at ``check()``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

RECORDINGS = Path(__file__).resolve().parent / "recordings" / "kubernetes"


def contains(actual: Any, expected: Any) -> bool:
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(
            k in actual and contains(actual[k], v) for k, v in expected.items()
        )
    if isinstance(expected, list):
        return isinstance(actual, list) and all(
            any(contains(a, e) for a in actual) for e in expected
        )
    return bool(actual == expected)


@dataclass
class Exchange:
    method: str
    path: str
    query: dict[str, list[str]]
    status: int
    headers: dict[str, str]
    response: Any
    match_body: Any
    times: int | None
    delay_s: float
    used: int = 0

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Exchange:
        split = urlsplit(raw["path"])
        return cls(
            method=raw["method"],
            path=split.path,
            query=parse_qs(split.query),
            status=int(raw["status"]),
            headers=dict(raw.get("headers", {})),
            response=raw.get("response"),
            match_body=raw.get("match_body"),
            times=raw.get("times"),
            delay_s=float(raw.get("delay_s", 0.0)),
        )


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    status: int
    body: Any
    at_s: float


class KubeReplay:
    def __init__(self, *recordings: str) -> None:
        self.exchanges = [
            Exchange.parse(item)
            for name in recordings
            for item in json.loads((RECORDINGS / f"{name}.json").read_text())
        ]
        self.calls: list[Call] = []
        self.unexpected: list[str] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def __enter__(self) -> KubeReplay:
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def check(self) -> None:
        if self.unexpected:
            pytest.fail("requests not in the recordings:\n  " + "\n  ".join(self.unexpected))

    def requests(self, method: str, prefix: str = "") -> list[Call]:
        return [c for c in self.calls if c.method == method and c.path.startswith(prefix)]

    def _answer(self, method: str, target: str, raw: bytes) -> tuple[Exchange | None, Any]:
        split = urlsplit(target)
        query = parse_qs(split.query)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        with self._lock:
            for exchange in self.exchanges:
                if exchange.times is not None and exchange.used >= exchange.times:
                    continue
                if (method, split.path) != (exchange.method, exchange.path):
                    continue
                if query != exchange.query:
                    continue
                if exchange.match_body is not None and not contains(body, exchange.match_body):
                    continue
                exchange.used += 1
                self.calls.append(Call(method, target, exchange.status, body, time.monotonic()))
                return exchange, body
            self.unexpected.append(f"{method} {target} body={body!r}")
        return None, body

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        replay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                exchange, _ = replay._answer(self.command, self.path, raw)
                if exchange is None:
                    status, headers, response = 501, {}, {"replay": "no recorded exchange"}
                else:
                    time.sleep(exchange.delay_s)
                    status, headers, response = (
                        exchange.status,
                        exchange.headers,
                        exchange.response,
                    )
                payload = json.dumps(response).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up at its cap: what the slow recordings are for

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve  # noqa: N815

        return Handler
