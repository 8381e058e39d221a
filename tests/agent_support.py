"""What the agent's tests share: signed bundles on disk, configurations, notices, spool reading,
and real workload processes for the local path to signal."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agent.config import AgentConfig, parse_config
from agent.spool import read_lines
from contracts.bundles import Bundle, sign_bundle
from contracts.signing import FileSigner
from schemas.notices import Notice

REGION = "eu-west-1"
SIGNER = FileSigner(Ed25519PrivateKey.from_private_bytes(bytes(range(32))))


def bundle(**overrides: Any) -> Bundle:
    fields: dict[str, Any] = {
        "workload_id": "etl",
        "contract_version": 3,
        "source_sha256": "a" * 64,
        "scheduler": "kubernetes",
        "drain_budget_s": 90,
        "checkpoint_method": "application",
        "checkpoint_size_bytes": 1024,
        "restart_semantics": "resume",
        "proactive_drain_on_advisory": False,
    }
    fields.update(overrides)
    return Bundle(**fields)


def write_bundle(folder: Path, value: Bundle | None = None, *, signed: bool = True) -> Path:
    """Writes ``bundle.json`` (signed by SIGNER unless `signed` is False) and ``bundle.pub``."""
    folder.mkdir(parents=True, exist_ok=True)
    chosen = value or bundle()
    if signed:
        data = sign_bundle(chosen, SIGNER)
    else:
        from contracts.bundles import unsigned_bundle

        data = unsigned_bundle(chosen)
    (folder / "bundle.json").write_bytes(data)
    (folder / "bundle.pub").write_bytes(
        SIGNER.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return folder / "bundle.json"


def config(folder: Path, instance_id: str = "i-00042", **tables: Any) -> AgentConfig:
    """An agent configuration under `folder` (bundle files there, metrics off), plus `tables`."""
    data: dict[str, Any] = {
        "instance_id": instance_id,
        "region": REGION,
        "state_dir": str(folder / "state"),
        "metrics_listen": "",
        "bundle": {"path": str(folder / "bundle.json"), "public_key": str(folder / "bundle.pub")},
    }
    for name, value in tables.items():
        if isinstance(value, dict):
            data[name] = {**data.get(name, {}), **value}
        else:
            data[name] = value
    return parse_config(data, "test config")


def notice(
    instance_id: str = "i-00042", *, deadline_s: float = 120.0, workload: str = "etl"
) -> Notice:
    now_us = time.time_ns() // 1000
    return Notice(
        event_id=str(uuid.uuid4()),
        region=REGION,
        instance_id=instance_id,
        pool_id="pool-1",
        workload_id=workload,
        deadline_at_us=now_us + int(deadline_s * 1e6),
        issued_at_us=now_us,
    )


def spool_events(spool_dir: Path) -> list[dict[str, Any]]:
    """Every line in the spool, oldest first (the parsed JSON objects)."""
    return [line.record for line, _ in read_lines(spool_dir)]


def of_type(lines: list[dict[str, Any]], event_type: str) -> list[dict[str, Any]]:
    """The Avro JSON payloads of the lines of one event type."""
    found = []
    for line in lines:
        if line["event_type"] == event_type:
            ((_, payload),) = line["event"]["payload"].items()
            found.append(payload)
    return found


def workload(marker: str, *, trap_term: bool = False) -> subprocess.Popen[bytes]:
    """A real process the local path can find by `marker` in its command line."""
    code = "import time\n"
    if trap_term:  # exits on SIGTERM after writing that it checkpointed
        code += (
            "import signal,sys\n"
            "signal.signal(signal.SIGTERM, lambda *a: (print('term', flush=True), sys.exit(0)))\n"
        )
    code += "print('ready', flush=True)\nwhile True: time.sleep(0.05)\n"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, marker], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    assert proc.stdout is not None
    ready = proc.stdout.readline()  # its signal handler is in place: no race with SIGTERM
    assert ready == b"ready\n", f"the workload process did not start: {ready!r}"
    return proc


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


async def wait_async(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def reap(procs: Iterator[subprocess.Popen[bytes]] | list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()
