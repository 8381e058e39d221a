"""Toxiproxy, the network faults of tests/faults/ (`infra.servers.toxiproxy`): it starts, and
each fault does to a TCP link what the tests take it to do, seen on a plain echo server."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from infra import servers
from infra.servers.toxiproxy import TOXIPROXY_VERSION, Proxy


@pytest.fixture
def echo() -> Iterator[int]:
    """A TCP echo server on 127.0.0.1; yields its port."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    done = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # a reset (reset_peer) ends it
            while chunk := conn.recv(65536):
                conn.sendall(chunk)

    def accept() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    done.set()
    thread.join(5)
    listener.close()


@pytest.fixture
def proxy(toxiproxy: servers.Server, echo: int) -> Proxy:
    return servers.Toxiproxy(toxiproxy.address).proxy(
        f"echo-{uuid.uuid4().hex[:8]}", f"127.0.0.1:{echo}"
    )


def _connect(proxy: Proxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=10)


def _echoed(conn: socket.socket, data: bytes) -> bytes:
    conn.sendall(data)
    got = b""
    while len(got) < len(data):
        chunk = conn.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def test_it_starts_and_says_its_version(toxiproxy: servers.Server) -> None:
    assert toxiproxy.address.startswith("http://127.0.0.1:")
    assert servers.Toxiproxy(toxiproxy.address).version().lstrip("v") == TOXIPROXY_VERSION[1:]


def test_latency_delays_each_way(proxy: Proxy) -> None:
    with _connect(proxy) as conn:
        assert _echoed(conn, b"warm") == b"warm"
        proxy.latency(150)
        started = time.monotonic()
        assert _echoed(conn, b"slow") == b"slow"
        assert time.monotonic() - started >= 0.3  # 150 ms up and 150 ms down, at the least
        proxy.heal()
        assert proxy.toxics() == []


def test_a_partition_carries_nothing_and_healing_cuts_the_dead_connections(
    proxy: Proxy,
) -> None:
    with _connect(proxy) as conn:
        assert _echoed(conn, b"before") == b"before"
        proxy.partition()
        conn.settimeout(1.0)
        conn.sendall(b"lost")
        with pytest.raises(TimeoutError):
            conn.recv(16)
        proxy.heal()
        conn.settimeout(10)
        with pytest.raises(ConnectionResetError):
            # The proxy closed it: the peer sees the end of the stream or a reset.
            if conn.recv(16) == b"":
                raise ConnectionResetError
    with _connect(proxy) as again:
        assert _echoed(again, b"after") == b"after"


def test_a_stall_loses_nothing(proxy: Proxy) -> None:
    with _connect(proxy) as conn:
        proxy.stall()
        conn.settimeout(1.0)
        conn.sendall(b"held")
        with pytest.raises(TimeoutError):
            conn.recv(16)
        proxy.heal()
        conn.settimeout(10)
        assert conn.recv(16) == b"held"


def test_reset_peer_resets_and_a_disabled_proxy_refuses(proxy: Proxy) -> None:
    with _connect(proxy) as conn:
        proxy.reset_peer()
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            conn.sendall(b"x")
            if conn.recv(16) == b"":
                raise ConnectionResetError
    proxy.heal()
    proxy.enabled(False)
    with pytest.raises(ConnectionRefusedError):
        _connect(proxy)
    proxy.enabled(True)
    with _connect(proxy) as conn:
        assert _echoed(conn, b"back") == b"back"
