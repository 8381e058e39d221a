"""The served cloud's HTTP: a stdlib threading server, a table of routes, the token check.

A `Route` is a method, a path pattern and a handler; the handler gets the `Request` (JSON body
read on demand, the caller's `Principal` once the token was checked) and the pattern's match,
and returns a `Response` or raises `CloudError` with its service's body. Every route but
discovery and ``/sim/v1`` checks ``X-Auth-Token`` with Keystone first. Requests are logged at
debug level as method, path and status: never a header or a body (they carry the secrets).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from sim.cloud.errors import CloudError
from sim.cloud.keystone import Identity, Principal

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 << 20
_TOO_LARGE = CloudError(413, {"error": {"code": "too_large", "message": "body over 1 MiB"}})


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: Mapping[str, list[str]]
    headers: Mapping[str, str]
    """Lower-cased names."""
    raw: bytes
    base_url: str
    principal: Principal | None = None

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else None

    def json(self, bad: Callable[[str], CloudError]) -> Any:
        """The JSON body; ``bad(reason)`` is raised when it is missing or not JSON."""
        if not self.raw:
            raise bad("the request has no body")
        try:
            return json.loads(self.raw)
        except ValueError:
            raise bad("the body is not JSON") from None


@dataclass(frozen=True, slots=True)
class Call:
    """A request the cloud answered: method, path with its query, status (no header, no body)."""

    method: str
    target: str
    status: int


@dataclass(slots=True)
class Response:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    text: str | None = None
    """A non-JSON body (sent as ``content_type``)."""
    content_type: str = "application/json"


Handler = Callable[[Request, re.Match[str]], Response]


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    handler: Handler
    auth: bool = True


def route(method: str, pattern: str, handler: Handler, *, auth: bool = True) -> Route:
    return Route(method, re.compile(f"^{pattern}$"), handler, auth)


class CloudHTTPServer:
    """Serves `routes` on ``host:port`` (0: a free port) from threads of its own."""

    def __init__(
        self,
        routes: Sequence[Route],
        identity: Identity,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        around: Callable[[Callable[[], Response]], Response] = lambda call: call(),
        calls_kept: int = 10_000,
    ) -> None:
        self._routes = list(routes)
        self._identity = identity
        self._around = around
        self._httpd = ThreadingHTTPServer((host, port), self._handler_class())
        self._httpd.daemon_threads = True
        bound_host, bound_port = self._httpd.server_address[:2]
        shown = host if host not in ("0.0.0.0", "") else "127.0.0.1"
        self.base_url = f"http://{shown}:{bound_port}"
        self.host, self.port = str(bound_host), int(bound_port)
        self._thread: threading.Thread | None = None
        self.requests = 0
        self.calls: deque[Call] = deque(maxlen=calls_kept)
        """The last `calls_kept` requests answered, oldest first (what a test asserts on)."""

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="cloud-http",
            daemon=True,
        )
        self._thread.start()

    def close(self, timeout_s: float = 10.0) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout_s)
            self._thread = None
        self._httpd.server_close()

    def answer(self, method: str, target: str, headers: Mapping[str, str], raw: bytes) -> Response:
        """The response to one request (the handler class calls this)."""
        split = urlsplit(target)
        path = unquote(split.path).rstrip("/") or "/"
        query = parse_qs(split.query, keep_blank_values=True)
        allowed: list[str] = []
        for candidate in self._routes:
            match = candidate.pattern.match(path)
            if match is None:
                continue
            if candidate.method != method:
                allowed.append(candidate.method)
                continue
            request = Request(method, path, query, headers, raw, self.base_url)
            try:
                if candidate.auth:
                    principal = self._identity.check(headers.get("x-auth-token"))
                    request = Request(method, path, query, headers, raw, self.base_url, principal)
                return self._around(partial(candidate.handler, request, match))
            except CloudError as error:
                return Response(error.status, error.body)
            except Exception:  # a bug of the served cloud: said as a 500, logged with its trace
                log.exception("%s %s failed", method, path)
                message = "The server has either erred or is incapable of performing the request."
                return Response(500, {"error": {"code": "internal", "message": message}})
        if allowed:
            message = f"{method} is not allowed on {path}; use {', '.join(sorted(set(allowed)))}"
            return Response(405, {"error": {"code": "bad_method", "message": message}})
        return Response(
            404, {"error": {"code": "not_found", "message": f"no such resource: {path}"}}
        )

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            server_version = "spotcap-cloud"
            # Head and body in one segment, sent at once: unbuffered writes and Nagle's
            # algorithm cost ~40 ms a request against the client's delayed ACK.
            wbufsize = 1 << 16
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass  # each answer is logged below, without headers

            def _serve(self) -> None:
                server.requests += 1
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY_BYTES:
                    response = Response(_TOO_LARGE.status, _TOO_LARGE.body)
                    self.close_connection = True
                else:
                    raw = self.rfile.read(length) if length else b""
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    response = server.answer(self.command, self.path, headers, raw)
                log.debug("%s %s %d", self.command, urlsplit(self.path).path, response.status)
                server.calls.append(Call(self.command, self.path, response.status))
                self._send(response)

            def _send(self, response: Response) -> None:
                if response.text is not None:
                    payload = response.text.encode()
                elif response.body is None:
                    payload = b""
                else:
                    payload = json.dumps(response.body, separators=(",", ":")).encode()
                self.send_response(response.status)
                for name, value in response.headers.items():
                    self.send_header(name, value)
                if payload:
                    self.send_header("Content-Type", response.content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if payload and self.command != "HEAD":
                    self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _serve  # noqa: N815

        return Handler
