"""A replay server of recorded OpenStack HTTP exchanges, and the tests of the replay itself.

OpenStack cannot run here, so the adapter's tests talk, through the real openstacksdk and
keystoneauth HTTP stack, to this server on 127.0.0.1 (a free port). It serves the exchanges
recorded in ``tests/recordings/openstack/*.json``: each file is a JSON list of exchanges shaped
like the OpenStack API reference::

    {"note": "where the shape comes from",
     "method": "GET", "path": "/compute/v2.1/servers/detail?tags=spotcap.io:owner=orch-eu1",
     "match_body": {...}, "match_headers": {"X-Auth-Token": "..."},
     "status": 200, "headers": {"x-openstack-request-id": "req-..."}, "response": {...},
     "times": 1, "after": ["DELETE /compute/v2.1/servers/9b1f..."]}

A request matches an exchange when the method and path are equal, the query has the same
parameters (in any order), every header of ``match_headers`` is present with that value, and
``match_body`` is contained in the JSON body (objects: a subset, recursively; lists and scalars:
equal), and every request named in ``after`` (``"METHOD /path"``, without the query) has been
answered with a status below 400: a cloud's state after a call (a server listed as DELETED once
it was deleted) is recorded as the answer that holds after it. The first matching exchange that
has not been used ``times`` times (no limit if absent) answers. ``{base}`` in a response or
header stands for the server's own ``http://127.0.0.1:PORT``, so the Keystone catalog points
compute, placement and reservation back at the replay.

A request that matches nothing is answered 501 and recorded in ``unexpected``; ``check()``
(called when the server closes) fails the test with the list. Every answered request is kept in
``calls`` in order, so a test asserts the exact calls made, e.g. that no DELETE was sent.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from openstack.connection import Connection

RECORDINGS = Path(__file__).resolve().parent / "recordings" / "openstack"
REGION = "eu-west-1"
TOKEN = "gAAAAABreplay-token-spotcap-orchestrator"  # the X-Subject-Token of keystone.json
_ABSENT = object()


@dataclass
class Exchange:
    """One recorded request and the answer to it."""

    source: str
    method: str
    path: str
    query: dict[str, list[str]]
    status: int
    headers: dict[str, str]
    response: Any
    match_body: Any = _ABSENT
    match_headers: dict[str, str] = field(default_factory=dict)
    times: int | None = None
    after: tuple[str, ...] = ()
    used: int = 0

    @classmethod
    def parse(cls, source: str, raw: Mapping[str, Any]) -> Exchange:
        split = urlsplit(raw["path"])
        return cls(
            source=source,
            method=raw["method"].upper(),
            path=split.path,
            query=parse_qs(split.query, keep_blank_values=True),
            status=int(raw["status"]),
            headers=dict(raw.get("headers", {})),
            response=raw.get("response", _ABSENT),
            match_body=raw.get("match_body", _ABSENT),
            match_headers=dict(raw.get("match_headers", {})),
            times=raw.get("times"),
            after=tuple(raw.get("after", ())),
        )

    def matches(
        self,
        *,
        method: str,
        path: str,
        query: dict[str, list[str]],
        headers: Any,
        body: Any,
        answered: set[str],
    ) -> bool:
        if self.times is not None and self.used >= self.times:
            return False
        if not answered.issuperset(self.after):
            return False
        if (method, path) != (self.method, self.path) or query != self.query:
            return False
        if any(headers.get(name) != value for name, value in self.match_headers.items()):
            return False
        return self.match_body is _ABSENT or contains(body, self.match_body)


@dataclass(frozen=True)
class Call:
    """A request the replay answered: method, path with query, status, parsed JSON body."""

    method: str
    path: str
    status: int
    body: Any


def contains(actual: Any, expected: Any) -> bool:
    """``expected`` is contained in ``actual``: objects as a subset, recursively; else equal."""
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(
            k in actual and contains(actual[k], v) for k, v in expected.items()
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(contains(a, e) for a, e in zip(actual, expected, strict=True))
        )
    return bool(actual == expected) and type(actual) is type(expected)


def _template(value: Any, base: str) -> Any:
    if isinstance(value, str):
        return value.replace("{base}", base)
    if isinstance(value, list):
        return [_template(v, base) for v in value]
    if isinstance(value, dict):
        return {k: _template(v, base) for k, v in value.items()}
    return value


class ReplayServer:
    """Serves the named recordings (``tests/recordings/openstack/<name>.json``), in that order."""

    def __init__(self, *recordings: str) -> None:
        self.exchanges: list[Exchange] = []
        for name in recordings:
            raw = json.loads((RECORDINGS / f"{name}.json").read_text())
            self.exchanges += [Exchange.parse(name, item) for item in raw]
        self.calls: list[Call] = []
        self.unexpected: list[str] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def auth_url(self) -> str:
        return f"{self.base_url}/v3"

    def requests(self, prefix: str = "") -> list[tuple[str, str]]:
        """(method, path) of every call whose path starts with ``prefix``, in order."""
        return [(c.method, c.path) for c in self.calls if c.path.startswith(prefix)]

    def check(self) -> None:
        if self.unexpected:
            pytest.fail(
                "requests not in the recordings:\n  " + "\n  ".join(self.unexpected),
                pytrace=False,
            )

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def _answer(
        self, method: str, target: str, headers: Any, raw: bytes
    ) -> tuple[int, Any, dict[str, str]]:
        split = urlsplit(target)
        query = parse_qs(split.query, keep_blank_values=True)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", errors="replace")
        with self._lock:
            answered = {f"{c.method} {urlsplit(c.path).path}" for c in self.calls if c.status < 400}
            for exchange in self.exchanges:
                if exchange.matches(
                    method=method,
                    path=split.path,
                    query=query,
                    headers=headers,
                    body=body,
                    answered=answered,
                ):
                    exchange.used += 1
                    self.calls.append(Call(method, target, exchange.status, body))
                    return exchange.status, exchange.response, exchange.headers
            self.unexpected.append(f"{method} {target} body={body!r}")
        return 501, {"replay": f"no recorded exchange for {method} {target}"}, {}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        replay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                status, response, headers = replay._answer(
                    self.command, self.path, self.headers, raw
                )
                payload = (
                    b""
                    if response is _ABSENT
                    else json.dumps(_template(response, replay.base_url)).encode()
                )
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, _template(value, replay.base_url))
                if payload and not any(k.lower() == "content-type" for k in headers):
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve  # noqa: N815 (stdlib names)

        return Handler


def connect(replay: ReplayServer) -> Connection:
    """A Connection through the real SDK and keystoneauth stack, password auth, to the replay."""
    return Connection(
        auth_url=replay.auth_url,
        username="spotcap-orchestrator",
        password="replay-password",
        project_name="spotcap",
        user_domain_name="Default",
        project_domain_name="Default",
        region_name=REGION,
        api_timeout=5,
        connect_retries=0,
    )


def replay_servers() -> Iterator[Callable[..., ReplayServer]]:
    """Body of a fixture: yields a factory of replay servers; closes and checks them after."""
    servers: list[ReplayServer] = []

    def make(*recordings: str) -> ReplayServer:
        server = ReplayServer(*recordings)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()
    for server in servers:
        server.check()


@pytest.fixture
def replays() -> Iterator[Callable[..., ReplayServer]]:
    yield from replay_servers()


# -- tests of the replay itself ----------------------------------------------------------------


def test_contains_is_a_recursive_subset_on_objects_and_equality_elsewhere() -> None:
    assert contains({"a": {"b": 1, "c": 2}, "d": 3}, {"a": {"b": 1}})
    assert not contains({"a": {"b": 1}}, {"a": {"b": 2}})
    assert contains({"l": [{"x": 1, "y": 2}]}, {"l": [{"x": 1}]})
    assert not contains({"l": [1, 2]}, {"l": [1]})
    assert not contains({"n": 1}, {"n": True})


def test_the_keystone_catalog_points_back_at_the_replay(
    replays: Callable[..., ReplayServer],
) -> None:
    replay = replays("discovery")
    conn = connect(replay)
    assert conn.session.get_endpoint(service_type="compute", interface="public") == (
        f"{replay.base_url}/compute/v2.1"
    )
    assert conn.session.get_endpoint(service_type="reservation", region_name=REGION) == (
        f"{replay.base_url}/reservation/v1"
    )
    assert replay.requests() == [("GET", "/v3"), ("POST", "/v3/auth/tokens")]
    auth = replay.calls[1].body["auth"]
    assert auth["identity"]["password"]["user"]["name"] == "spotcap-orchestrator"


def test_an_unrecorded_request_is_answered_501_and_reported() -> None:
    replay = ReplayServer("discovery")
    try:
        answer = requests.get(f"{replay.base_url}/compute/v2.1/os-hypervisors", timeout=5)
        assert answer.status_code == 501
        assert replay.unexpected == ["GET /compute/v2.1/os-hypervisors body=None"]
        with pytest.raises(pytest.fail.Exception, match="os-hypervisors"):
            replay.check()
    finally:
        replay.close()


def test_query_parameters_match_in_any_order_and_times_limits_reuse() -> None:
    replay = ReplayServer()
    replay.exchanges = [
        Exchange.parse("inline", {"method": "GET", "path": "/x?a=1&b=2", "status": 200,
                                  "response": {"n": 1}, "times": 1}),
        Exchange.parse("inline", {"method": "GET", "path": "/x?a=1&b=2", "status": 404,
                                  "response": {"n": 2}}),
    ]  # fmt: skip
    try:
        first = requests.get(f"{replay.base_url}/x?b=2&a=1", timeout=5)
        second = requests.get(f"{replay.base_url}/x?a=1&b=2", timeout=5)
        assert (first.status_code, first.json()) == (200, {"n": 1})
        assert (second.status_code, second.json()) == (404, {"n": 2})
        assert replay.unexpected == []
    finally:
        replay.close()


def test_an_exchange_with_after_answers_only_once_those_requests_were_answered() -> None:
    replay = ReplayServer()
    replay.exchanges = [
        Exchange.parse("inline", {"method": "GET", "path": "/list", "status": 200,
                                  "response": {"gone": True}, "after": ["DELETE /item"]}),
        Exchange.parse("inline", {"method": "GET", "path": "/list", "status": 200,
                                  "response": {"gone": False}}),
        Exchange.parse("inline", {"method": "DELETE", "path": "/item?force=1", "status": 204}),
    ]  # fmt: skip
    try:
        before = requests.get(f"{replay.base_url}/list", timeout=5).json()
        requests.delete(f"{replay.base_url}/item?force=1", timeout=5)
        after = requests.get(f"{replay.base_url}/list", timeout=5).json()
        assert (before, after) == ({"gone": False}, {"gone": True})
    finally:
        replay.close()
