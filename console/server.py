"""Serving the application: the listening socket, bound before anything else starts (so a port
in use or a host that is not this machine's is one sentence at start), and uvicorn over it until
Ctrl-C or SIGTERM, each ending in a graceful shutdown."""

from __future__ import annotations

import copy
import errno
import signal
import socket
from types import FrameType
from typing import Any

GRACEFUL_SHUTDOWN_S = 10  # requests in flight get this long after Ctrl-C or SIGTERM


class ListenError(RuntimeError):
    """The server cannot listen where it was asked to; `usage` when the address itself is
    wrong (not this machine's)."""

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


def listen(host: str, port: int) -> socket.socket:
    """The listening socket on `host`:`port` (0: any free port)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise ListenError(
            f"cannot listen on --host {host}: it is not an address of this machine "
            f"({error.strerror}); give an address such as 127.0.0.1",
            usage=True,
        ) from error
    family, kind, proto, _, address = infos[0]
    # The protocol number matters: asyncio sets TCP_NODELAY only on connections of a socket made
    # with IPPROTO_TCP (socket.create_server leaves it 0), and without it a keep-alive client
    # waits out a delayed ACK (~40 ms) on every response written in two parts.
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
        return sock
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            why = f"port {port} on {host} is already in use: stop what listens there or choose "
            raise ListenError(why + "another with --port") from error
        if error.errno == errno.EACCES:
            why = f"port {port} needs privileges this user does not have: choose one above 1023 "
            raise ListenError(why + "with --port") from error
        raise ListenError(
            f"cannot listen on {host}:{port} ({error.strerror}): check --host and --port"
        ) from error


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


class _Terminated(Exception):  # noqa: N818 - a signal, not an error
    """SIGTERM, after uvicorn's graceful shutdown."""


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


def serve(app: Any, sock: socket.socket, log_level: str) -> None:
    """Serve `app` on `sock` until Ctrl-C or SIGTERM; uvicorn's access log goes to stderr
    (stdout is for the line that says where the server listens)."""
    import uvicorn  # the web stack takes a second to import, which nothing else needs

    logging_config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    logging_config["handlers"]["access"]["stream"] = "ext://sys.stderr"
    config = uvicorn.Config(
        app,
        log_config=logging_config,
        log_level=log_level,
        lifespan="off",
        server_header=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    # uvicorn shuts down gracefully on SIGINT and SIGTERM, then raises the signal again for the
    # handler it found: a KeyboardInterrupt, and for SIGTERM this one, so both end here, cleanly.
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except (KeyboardInterrupt, _Terminated):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        sock.close()


__all__ = ["GRACEFUL_SHUTDOWN_S", "ListenError", "listen", "serve", "url_of"]
