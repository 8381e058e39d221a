"""The client's side of the node-local channel to the agent (`schemas.checkpoints`).

`AgentChannel` connects to the agent's Unix socket (``SPOTCAP_CHECKPOINT_SOCKET``), says hello,
and listens in a thread of its own for a notice; it is the client's `Reporter`, so every
generation the client publishes is told to the agent, which records ``checkpoint_written``.
A workload on a machine with no agent still checkpoints: `connect` returns None, reports go
nowhere, and no notice ever comes. Reports never raise: losing the agent must not stop a save.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path

from schemas.checkpoints import (
    DEFAULT_SOCKET,
    SOCKET_ENV,
    ChannelFormatError,
    Failed,
    Hello,
    NoticeToWorkload,
    Quarantined,
    Welcome,
    Written,
    decode,
    encode,
)

__all__ = ["AgentChannel", "socket_path"]

log = logging.getLogger(__name__)


def socket_path() -> Path:
    return Path(os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET)


class AgentChannel:
    """One workload unit's connection to its node's agent."""

    def __init__(
        self,
        workload_id: str,
        unit_id: str,
        *,
        path: Path | None = None,
        on_notice: Callable[[NoticeToWorkload], None] | None = None,
        timeout_s: float = 2.0,
    ) -> None:
        self.workload_id = workload_id
        self.unit_id = unit_id
        self.path = path or socket_path()
        self._on_notice = on_notice
        self._timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.welcome: Welcome | None = None
        self.notice: NoticeToWorkload | None = None
        self.noticed = threading.Event()
        """Set when the agent says the node is being reclaimed."""

    def connect(self) -> Welcome | None:
        """Say hello; the agent's welcome, or None when no agent listens here."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self._timeout_s)
        try:
            sock.connect(str(self.path))
            sock.sendall(encode(Hello(self.workload_id, self.unit_id, os.getpid())))
            reader = sock.makefile("rb")
            message = decode(reader.readline())
        except (OSError, ChannelFormatError) as error:
            sock.close()
            log.info("no checkpoint channel at %s (%s): saving without an agent", self.path, error)
            return None
        if not isinstance(message, Welcome):
            sock.close()
            log.warning("the agent at %s answered hello with %s", self.path, type(message))
            return None
        sock.settimeout(None)
        self._sock, self.welcome = sock, message
        self._thread = threading.Thread(
            target=self._listen, args=(reader,), name="checkpoint-channel", daemon=True
        )
        self._thread.start()
        return message

    def _listen(self, reader: object) -> None:
        readline = reader.readline  # type: ignore[attr-defined]
        while True:
            try:
                line = readline()
            except (OSError, ValueError):
                return
            if not line:
                return  # the agent went away
            try:
                message = decode(line)
            except ChannelFormatError as error:
                log.warning("unreadable line from the agent: %s", error)
                continue
            if isinstance(message, NoticeToWorkload):
                self.notice = message
                self.noticed.set()
                if self._on_notice is not None:
                    self._on_notice(message)

    def report(self, message: Written | Failed | Quarantined) -> None:
        """Tell the agent (best effort: never raises)."""
        with self._lock:
            sock = self._sock
            if sock is None:
                return
            try:
                sock.sendall(encode(message))
            except OSError as error:
                log.warning("could not tell the agent of %s: %s", message.TYPE, error)

    def close(self) -> None:
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        if self._thread is not None:
            self._thread.join(2.0)

    def __enter__(self) -> AgentChannel:
        self.connect()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
