"""Alertmanager, amtool and Prometheus from Debian's packages (``prometheus-alertmanager``, whose
package ships amtool too, and ``prometheus``, which ships promtool: ``make alertmanager``).

The alert routing test (tests/test_alert_routing.py) runs the real pair: Prometheus scrapes a
run's ``/metrics``, evaluates infra/alerts/rules.yml and sends what fires to Alertmanager, which
routes it by owner to webhook receivers. Building Alertmanager from the Go module proxy does not
work: the module's zip leaves out the web UI's built assets that ``ui/web.go`` embeds
(``pattern app/dist: no matching files found`` for v0.34.1 and v0.35.0), and Go refuses an
overlay beneath its module cache; Debian 12's 0.25 is the one that installs in seconds.
``$SPOTCAP_ALERTMANAGER``, ``$SPOTCAP_AMTOOL`` and ``$SPOTCAP_PROMETHEUS`` name other binaries.
"""

from __future__ import annotations

import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from infra.servers.process import (
    STATE_FILE,
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

ALERTMANAGER_PACKAGE = "prometheus-alertmanager"
PROMETHEUS_PACKAGE = "prometheus"


def _binary(name: str, env: str, names: tuple[str, ...], package: str) -> Path:
    chosen = os.environ.get(env) or next(filter(None, map(shutil.which, names)), None)
    if not chosen or not Path(chosen).is_file():
        raise ServerError(
            name,
            "is not installed",
            fix=f"run `make alertmanager` (it installs Debian's `{package}` package), or set {env}",
        )
    return Path(chosen)


def fetch_alertmanager() -> Path:
    """The path of alertmanager: $SPOTCAP_ALERTMANAGER, else Debian's on PATH."""
    names = ("prometheus-alertmanager", "alertmanager")
    return _binary("alertmanager", "SPOTCAP_ALERTMANAGER", names, ALERTMANAGER_PACKAGE)


def fetch_amtool() -> Path:
    """The path of amtool (Alertmanager's own checker): $SPOTCAP_AMTOOL, else amtool on PATH."""
    return _binary("amtool", "SPOTCAP_AMTOOL", ("amtool",), ALERTMANAGER_PACKAGE)


def fetch_prometheus() -> Path:
    """The path of prometheus: $SPOTCAP_PROMETHEUS, else Debian's on PATH."""
    return _binary("prometheus", "SPOTCAP_PROMETHEUS", ("prometheus",), PROMETHEUS_PACKAGE)


def _ready(url: str) -> Callable[[float], bool]:
    def probe(budget_s: float) -> bool:
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=min(budget_s, 2.0)) as reply:
                return int(reply.status) == 200
        except (OSError, urllib.error.URLError):
            return False

    return probe


def start_alertmanager(data_dir: Path, config: Path, timeout_s: float = 60) -> Server:
    """Start Alertmanager on 127.0.0.1 with `config` (its state in ``data_dir/data``; no
    cluster: its gossip port would be one more fixed port on the machine)."""
    name = "alertmanager"
    data_dir = prepare_dir(data_dir)
    existing = running(data_dir, name)
    if existing is not None:
        return existing
    log_path = data_dir / "alertmanager.log"
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    argv = [
        str(fetch_alertmanager()),
        f"--config.file={config}",
        f"--storage.path={data_dir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
        "--log.level=debug",
    ]
    fix = f"check {config} with `amtool check-config {config}`"
    return _run(name, argv, url, data_dir, log_path=log_path, fix=fix, timeout_s=timeout_s)


def start_prometheus(data_dir: Path, config: Path, timeout_s: float = 60) -> Server:
    """Start Prometheus on 127.0.0.1 with `config` (its TSDB in ``data_dir/tsdb``)."""
    name = "prometheus"
    data_dir = prepare_dir(data_dir)
    existing = running(data_dir, name)
    if existing is not None:
        return existing
    log_path = data_dir / "prometheus.log"
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    argv = [
        str(fetch_prometheus()),
        f"--config.file={config}",
        f"--storage.tsdb.path={data_dir / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-lifecycle",
    ]
    fix = f"check {config} with `promtool check config {config}`"
    return _run(name, argv, url, data_dir, log_path=log_path, fix=fix, timeout_s=timeout_s)


def _run(
    name: str, argv: list[str], url: str, data_dir: Path, *, log_path: Path, fix: str,
    timeout_s: float,
) -> Server:  # fmt: skip
    """Spawn `argv` and wait for its ``/-/ready``; a server that never got ready leaves no state
    file behind (nothing for a later `stop` or a leftover check to find)."""
    proc = spawn(name, argv, log_path, data_dir)
    server = Server(name, url, proc.pid, data_dir, log_path)
    write_state(data_dir, state_of(server))
    try:
        ready = wait_ready(name, proc, _ready(url), timeout_s, log_path=log_path, fix=fix)
    except ServerError:
        (data_dir / STATE_FILE).unlink(missing_ok=True)
        raise
    write_state(data_dir, state_of(server, timings={"ready_s": round(ready, 3)}))
    return server
