"""Toxiproxy: network faults between spotcap's processes and the servers they talk to, on
loopback.

Why a proxy and not the kernel: this machine's kernel has no netem qdisc (``tc qdisc add dev lo
root netem delay 100ms`` says "Specified qdisc kind is unknown"), so no delay or loss can be
put on a link in a network namespace; and Debian's iptables/nftables are not installed. Shopify's
Toxiproxy (MIT) is a TCP proxy with faults ("toxics") switched on and off over its HTTP API:
``latency`` (with jitter), ``timeout`` (a black hole: the data goes nowhere, the connection
stays open, like a partition), ``reset_peer`` (a TCP RST), ``bandwidth``, and a proxy
disabled (connections closed, new ones refused). It runs unprivileged, only on 127.0.0.1, and
each test's faults are its own proxies: nothing of the machine's network changes.

No registry ships the binary; the Go module proxy ships its source. ``fetch_toxiproxy`` builds
``github.com/Shopify/toxiproxy/v2/cmd/server`` once with ``go install`` into
``$SPOTCAP_CACHE/toxiproxy-v2.12.0/`` (about 15 s of CPU, 16 MB), like versitygw;
``$SPOTCAP_TOXIPROXY`` names another binary. ``start_toxiproxy`` runs it with its API on a free
port of 127.0.0.1 (``Server.address`` is ``http://127.0.0.1:PORT``); ``Toxiproxy(address)``
makes proxies and their faults.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.servers.gobuild import GoCommand, fetch_go_command
from infra.servers.process import (
    Server,
    cache_dir,
    ports_of,
    prepare_dir,
    running,
    spawn,
    state_of,
    wait_ready,
    write_state,
)

TOXIPROXY_VERSION = "v2.12.0"
TOXIPROXY_MODULE = "github.com/Shopify/toxiproxy/v2/cmd/server"
BUILD_TIMEOUT_S = 1800  # about 15 s of CPU once Go's module cache holds the sources
_API_TIMEOUT_S = 10.0
_STALL_MS = 24 * 3600 * 1000  # longer than any test: only `heal` lets the data through
_FIX = "run `make toxiproxy` (it builds the server with go install), or set SPOTCAP_TOXIPROXY"


def toxiproxy_binary() -> Path:
    """Where the built binary lives (``$SPOTCAP_TOXIPROXY`` overrides). ``go install`` names it
    after its package folder: ``server``."""
    env = os.environ.get("SPOTCAP_TOXIPROXY")
    if env:
        return Path(env)
    return cache_dir() / f"toxiproxy-{TOXIPROXY_VERSION}" / "server"


def fetch_toxiproxy() -> Path:
    """Return the Toxiproxy server binary, building it with ``go install`` if it is not cached."""
    return fetch_go_command(
        GoCommand(
            "toxiproxy",
            TOXIPROXY_MODULE,
            TOXIPROXY_VERSION,
            toxiproxy_binary(),
            env={"GOFLAGS": "-buildvcs=false"},
            # Its version is stamped at build time (else its API says "git").
            ldflags=f"-s -w -X github.com/Shopify/toxiproxy/v2.Version={TOXIPROXY_VERSION}",
            go_fix="install Go 1.22+ or set SPOTCAP_GO (or SPOTCAP_TOXIPROXY to a built binary)",
            build_fix="check access to the Go module proxy and the Go toolchain's version",
            timeout_s=BUILD_TIMEOUT_S,
        )
    )


class ToxiproxyError(RuntimeError):
    """The Toxiproxy API refused a call (the message quotes its answer)."""


def _call(address: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        address + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=_API_TIMEOUT_S) as answer:
            text = answer.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", errors="replace").strip()
        raise ToxiproxyError(f"{method} {path}: HTTP {exc.code}: {detail[:300]}") from exc
    except OSError as exc:
        raise ToxiproxyError(
            f"{method} {path}: Toxiproxy at {address} did not answer ({exc}); is it running?"
        ) from exc
    return json.loads(text) if text.strip() else None


@dataclass(frozen=True)
class Proxy:
    """One proxied link: clients connect to ``listen`` ("127.0.0.1:PORT"), the proxy to
    ``upstream``. Faults apply to the connections through it, new and open alike."""

    api: str
    name: str
    listen: str

    @property
    def port(self) -> int:
        return int(self.listen.rsplit(":", 1)[1])

    def toxic(
        self, kind: str, stream: str = "downstream", name: str | None = None, **attributes: int
    ) -> str:
        """Add a toxic of ``kind`` on ``stream`` ("downstream": server to client, "upstream":
        client to server); returns its name (for `remove`)."""
        toxic_name = name or f"{kind}_{stream}"
        _call(
            self.api,
            "POST",
            f"/proxies/{self.name}/toxics",
            {"name": toxic_name, "type": kind, "stream": stream, "toxicity": 1.0,
             "attributes": attributes},
        )  # fmt: skip
        return toxic_name

    def latency(self, latency_ms: int, jitter_ms: int = 0) -> None:
        """Every chunk of data each way waits ``latency_ms`` (± ``jitter_ms``)."""
        for stream in ("upstream", "downstream"):
            self.toxic("latency", stream, latency=latency_ms, jitter=jitter_ms)

    def partition(self) -> None:
        """A black hole both ways: open connections stay open and carry nothing, new ones are
        accepted and carry nothing (Toxiproxy's ``timeout`` toxic with no timeout), as when a
        link drops every packet. `heal` ends it."""
        for stream in ("upstream", "downstream"):
            self.toxic("timeout", stream, timeout=0)

    def stall(self) -> None:
        """Nothing passes either way and nothing is lost: what is sent waits and arrives, in
        order, when `heal` removes the stall (a partition shorter than TCP's patience, whose
        segments are retransmitted once it heals)."""
        for stream in ("upstream", "downstream"):
            self.toxic("latency", stream, name=f"stall_{stream}", latency=_STALL_MS)

    def reset_peer(self) -> None:
        """Every connection, open or new, is reset (TCP RST) as soon as data flows."""
        self.toxic("reset_peer", "upstream", timeout=0)

    def remove(self, toxic_name: str) -> None:
        _call(self.api, "DELETE", f"/proxies/{self.name}/toxics/{toxic_name}")

    def heal(self) -> None:
        """Remove every toxic and enable the proxy. After a `partition` the open connections
        are cut too: TCP would have retransmitted what the black hole dropped, Toxiproxy
        dropped it for good, so those streams lost bytes in their middle and cannot go on (a
        peer's keepalive or request timeout would have ended them); clients reconnect."""
        toxics = self.toxics()
        for toxic in toxics:
            self.remove(str(toxic["name"]))
        if any(t["type"] == "timeout" for t in toxics):
            self.enabled(False)
        self.enabled(True)

    def toxics(self) -> list[dict[str, Any]]:
        listed = _call(self.api, "GET", f"/proxies/{self.name}/toxics")
        return list(listed or [])

    def enabled(self, on: bool) -> None:
        """A disabled proxy closes its connections and refuses new ones (a refused link)."""
        _call(self.api, "POST", f"/proxies/{self.name}", {"enabled": on})

    def upstream(self, address: str) -> None:
        """Point the proxy at ``address`` from now on."""
        _call(self.api, "POST", f"/proxies/{self.name}", {"upstream": address})


@dataclass(frozen=True)
class Toxiproxy:
    """The API of a running Toxiproxy server (``Server.address``)."""

    address: str

    def proxy(self, name: str, upstream: str, listen: str = "127.0.0.1:0") -> Proxy:
        """A new proxy to ``upstream``, listening on ``listen`` (a free port by default)."""
        made = _call(
            self.address,
            "POST",
            "/proxies",
            {"name": name, "listen": listen, "upstream": upstream, "enabled": True},
        )
        return Proxy(self.address, name, str(made["listen"]))

    def version(self) -> str:
        request = urllib.request.Request(self.address + "/version")
        with urllib.request.urlopen(request, timeout=_API_TIMEOUT_S) as answer:
            text = str(answer.read().decode()).strip()
        try:
            return str(json.loads(text)["version"])
        except (ValueError, KeyError, TypeError):
            return text


def _probe(address: str) -> Callable[[float], bool]:
    def probe(budget_s: float) -> bool:
        try:
            with urllib.request.urlopen(address + "/version", timeout=min(budget_s, 2.0)):
                return True
        except OSError:
            return False

    return probe


def start_toxiproxy(data_dir: Path, timeout_s: float = 30) -> Server:
    """Start a Toxiproxy server with its API on 127.0.0.1 (no proxies yet)."""
    name = "toxiproxy"
    data_dir = prepare_dir(data_dir)
    existing = running(data_dir, name)
    if existing is not None:
        return existing
    binary = fetch_toxiproxy()
    log_path = data_dir / "toxiproxy.log"
    (port,) = ports_of(data_dir, 1)
    address = f"http://127.0.0.1:{port}"
    # The data folder on the command line: `owns` tells this server from another by it.
    argv = [str(binary), "-host", "127.0.0.1", "-port", str(port),
            "-config", str(_empty_config(data_dir))]  # fmt: skip
    proc = spawn(name, argv, log_path, data_dir, env={"LOG_LEVEL": "warn"})
    server = Server(name, address, proc.pid, data_dir, log_path)
    write_state(data_dir, state_of(server))
    ready = wait_ready(name, proc, _probe(address), timeout_s, log_path=log_path, fix=_FIX)
    write_state(data_dir, state_of(server, timings={"ready_s": round(ready, 3)}))
    return server


def _empty_config(data_dir: Path) -> Path:
    path = data_dir / "proxies.json"
    path.write_text("[]\n")
    return path


__all__ = [
    "TOXIPROXY_VERSION",
    "Proxy",
    "Toxiproxy",
    "ToxiproxyError",
    "fetch_toxiproxy",
    "start_toxiproxy",
    "toxiproxy_binary",
]
