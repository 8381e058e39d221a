"""A real Kubernetes API server: kube-apiserver v1.37.2 over Debian's etcd, on 127.0.0.1.

No kubelet, scheduler or controller-manager runs: what spotcap does with Kubernetes (cordon and
taint, evictions under PodDisruptionBudgets, RBAC, watches of pending pods, admission by a
ValidatingAdmissionPolicy) is served by kube-apiserver itself. What those controllers would
write (PDB status, pods' Running status, a namespace's ``default`` ServiceAccount) the tests
write themselves (``../shared/notes/kubernetes-on-this-machine.md``).

- etcd: Debian's ``etcd-server`` (3.4; ``make system-packages``), ``$SPOTCAP_ETCD`` overrides.
- kube-apiserver: no registry ships it, and ``go install`` cannot build it (kubernetes' go.mod
  replaces its staging modules with local paths); ``fetch_kube_apiserver`` builds it once with
  ``go build`` inside ``infra/kubernetes/apiserver`` (a module of ours whose go.mod requires
  k8s.io/kubernetes v1.37.2 and pins each staging module at v0.37.2; go.sum committed) into
  ``$SPOTCAP_CACHE/kube-apiserver-v1.37.2`` (~10 minutes of CPU cold, seconds with Go's build
  cache warm). ``$SPOTCAP_KUBE_APISERVER`` names another binary.

Authentication: a static token for an administrator (group ``system:masters``) chosen at start,
kept in ``data_dir/tokens.csv`` and ``data_dir/admin.kubeconfig`` (mode 0600), never on a
command line; service-account tokens signed with a key made at start (``openssl``), so
TokenRequest issues real, node-bound tokens. Authorization: RBAC only. The serving certificate
is the one kube-apiserver makes for itself (``data_dir/pki/apiserver.crt``, which the
kubeconfig names as its authority). The returned server's ``address`` is
``https://127.0.0.1:PORT``; ``kubeconfig(server)`` is the administrator's kubeconfig. Stopping
stops kube-apiserver, then etcd.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from infra.servers.gobuild import GoCommand, fetch_go_command
from infra.servers.process import (
    Server,
    ServerError,
    cache_dir,
    kill,
    live_companion,
    ports_had,
    ports_of,
    prepare_dir,
    read_state,
    running,
    spawn,
    state_of,
    stop,
    wait_probe,
    wait_ready,
    write_state,
)

KUBERNETES_VERSION = "v1.37.2"
KUBE_APISERVER_PACKAGE = "k8s.io/kubernetes/cmd/kube-apiserver"
BUILD_DIR = Path(__file__).resolve().parent.parent / "kubernetes" / "apiserver"
ADMIN_KUBECONFIG = "admin.kubeconfig"
BUILD_TIMEOUT_S = 3600  # ~10 minutes of CPU cold; far longer on a loaded machine
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
_ETCD_FIX = "apt-get install -y etcd-server (as root; `make system-packages`) or set SPOTCAP_ETCD"
_APISERVER_FIX = (
    "the log above says why; `make kube-apiserver` builds the binary (or set "
    "SPOTCAP_KUBE_APISERVER to a built one)"
)


def kube_apiserver_binary() -> Path:
    """Where the built binary lives (``$SPOTCAP_KUBE_APISERVER`` overrides)."""
    env = os.environ.get("SPOTCAP_KUBE_APISERVER")
    if env:
        return Path(env)
    return cache_dir() / f"kube-apiserver-{KUBERNETES_VERSION}" / "kube-apiserver"


def fetch_kube_apiserver() -> Path:
    """Return the kube-apiserver binary, building it with ``go build`` if it is not cached."""
    return fetch_go_command(
        GoCommand(
            "kube-apiserver",
            KUBE_APISERVER_PACKAGE,
            KUBERNETES_VERSION,
            kube_apiserver_binary(),
            # The build module lives in this repository: no VCS stamp of it is wanted.
            env={"GOFLAGS": "-buildvcs=false"},
            build_dir=BUILD_DIR,
            ldflags=f"-s -w -X k8s.io/component-base/version.gitVersion={KUBERNETES_VERSION}",
            go_fix="install Go 1.26+ or set SPOTCAP_GO (or SPOTCAP_KUBE_APISERVER to a binary)",
            build_fix="check access to the Go module proxy, the Go toolchain's version (1.26+) "
            "and the free space under ~/go and ~/.cache/go-build (about 3 GB)",
            timeout_s=BUILD_TIMEOUT_S,
        )
    )


def kubeconfig(server: Server) -> Path:
    """The administrator's kubeconfig of the server (mode 0600)."""
    return server.data_dir / ADMIN_KUBECONFIG


def compact_etcd(server: Server, timeout_s: float = 30) -> int:
    """Compact the server's etcd at its current revision (every older version of every key
    dropped, as kube-apiserver's own compactor does every 5 minutes); that revision. Through
    etcd's HTTP gateway (Debian's etcd-server ships no etcdctl)."""
    state = read_state(server.data_dir)
    if state is None:
        raise ServerError("kubernetes", f"no state in {server.data_dir}", fix="start it first")
    base = f"http://127.0.0.1:{state['ports']['etcd']}/v3/kv"

    def post(path: str, body: dict[str, object]) -> dict[str, object]:
        request = urllib.request.Request(
            f"{base}/{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as answer:
                found: dict[str, object] = json.loads(answer.read())
        except (OSError, ValueError) as error:
            raise ServerError(
                "kubernetes", f"etcd's {path} at {base} failed: {error}", fix="is etcd running?"
            ) from error
        return found

    header = post("range", {"key": "AA==", "limit": 1})["header"]  # any key: the revision
    assert isinstance(header, dict)
    revision = int(header["revision"])
    post("compaction", {"revision": str(revision), "physical": True})
    return revision


def _etcd_binary() -> str:
    return os.environ.get("SPOTCAP_ETCD") or shutil.which("etcd") or "/usr/bin/etcd"


def _secret_file(path: Path, text: str) -> None:
    path.unlink(missing_ok=True)
    path.touch(mode=0o600)
    path.write_text(text)


def _service_account_keys(pki: Path) -> tuple[Path, Path]:
    """An RSA key pair that signs (and checks) the service-account tokens."""
    key, pub = pki / "sa.key", pki / "sa.pub"
    if key.exists() and pub.exists():  # a restart keeps the tokens it issued valid
        return key, pub
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ServerError("kubernetes", "openssl is not installed", fix="apt-get install openssl")
    key.unlink(missing_ok=True)
    key.touch(mode=0o600)
    for argv in ([openssl, "genrsa", "-out", str(key), "2048"],
                 [openssl, "rsa", "-in", str(key), "-pubout", "-out", str(pub)]):  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise ServerError("kubernetes", f"{' '.join(argv[:2])} failed: {done.stderr.strip()}")
    return key, pub


def _admin_token(data_dir: Path) -> str:
    tokens = data_dir / "tokens.csv"
    if tokens.exists():
        return tokens.read_text().split(",", 1)[0]
    token = secrets.token_urlsafe(32)
    _secret_file(tokens, f'{token},spotcap-admin,spotcap-admin,"system:masters"\n')
    return token


def _write_kubeconfig(path: Path, address: str, ca: Path, token: str) -> None:
    # JSON is YAML: the Python client and kubectl read it alike.
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "spotcap", "cluster": {"server": address, "certificate-authority": str(ca)}}
        ],
        "users": [{"name": "spotcap-admin", "user": {"token": token}}],
        "contexts": [
            {"name": "spotcap", "context": {"cluster": "spotcap", "user": "spotcap-admin"}}
        ],
        "current-context": "spotcap",
    }
    _secret_file(path, json.dumps(config, indent=2) + "\n")


def _etcd_probe(port: int) -> Callable[[float], bool]:
    def probe(budget_s: float) -> bool:
        url = f"http://127.0.0.1:{port}/health"
        try:
            with urllib.request.urlopen(url, timeout=min(budget_s, 2.0)) as answer:
                return bool(json.loads(answer.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    return probe


def _apiserver_probe(address: str, ca: Path, token: str) -> Callable[[float], bool]:
    def probe(budget_s: float) -> bool:
        if not ca.exists():  # kube-apiserver writes its certificate when it starts
            return False
        request = urllib.request.Request(
            f"{address}/readyz", headers={"Authorization": f"Bearer {token}"}
        )
        try:
            context = ssl.create_default_context(cafile=str(ca))
            with urllib.request.urlopen(
                request, timeout=min(budget_s, 2.0), context=context
            ) as answer:
                return bool(answer.status == 200)
        except (OSError, ssl.SSLError, urllib.error.HTTPError):
            return False

    return probe


def start_kubernetes(
    data_dir: Path, timeout_s: float = 120, *, watch_cache: bool | None = None
) -> Server:
    """Start etcd and kube-apiserver; return when ``/readyz`` answers 200.

    Either part found stopped beside the other (killed, or crashed) is started again alone, on
    the ports it had, and kube-apiserver keeps its serving certificate: a client that knew the
    server (its address, the CA its kubeconfig names) reconnects by itself.

    `watch_cache` False serves every watch from etcd itself (``--watch-cache=false``): a watch
    from a revision etcd has compacted away is then answered 410 Gone, as a cluster's is once
    its cache no longer holds that version. None keeps what the server was started with (the
    cache on, at first)."""
    name = "kubernetes"
    data_dir = prepare_dir(data_dir)
    state = read_state(data_dir)
    if watch_cache is None:
        watch_cache = bool((state or {}).get("watch_cache", True))
    api_running = running(data_dir, name)
    etcd_pid = live_companion(state, "etcd", data_dir)
    if api_running is not None and etcd_pid is not None:
        return api_running
    had = ports_had(data_dir, 3)
    if (api_running is not None or etcd_pid is not None) and (had is None or state is None):
        stop(data_dir)  # a part runs but its ports are unknown: start both anew
        api_running, etcd_pid, state = None, None, None
    etcd, binary = _binaries()
    pki, token = _credentials(data_dir)
    if api_running is None and etcd_pid is None:
        client_port, peer_port, api_port = ports_of(data_dir, 3)
    else:
        assert had is not None
        client_port, peer_port, api_port = had
    etcd_ready = 0.0
    if etcd_pid is None:
        etcd_pid, etcd_ready = _start_etcd(etcd, data_dir, client_port, peer_port, timeout_s)
    log_path = data_dir / "kube-apiserver.log"
    address = f"https://127.0.0.1:{api_port}"
    ca = pki / "apiserver.crt"
    if api_running is None:
        try:
            api = _spawn_apiserver(binary, data_dir, client_port, api_port, watch_cache)
        except ServerError:
            kill(etcd_pid, "etcd")
            raise
        server = Server(name, address, api.pid, data_dir, log_path)
    else:
        server = api_running
    _write_kubeconfig(data_dir / ADMIN_KUBECONFIG, address, ca, token)
    state = state_of(
        server,
        companions=[{"name": "etcd", "pid": etcd_pid, "match": str(data_dir), "after": True}],
        kubeconfig=str(data_dir / ADMIN_KUBECONFIG),
        ports={"etcd": client_port, "etcd_peer": peer_port, "kube-apiserver": api_port},
        watch_cache=watch_cache,
    )
    write_state(data_dir, state)
    probe = _apiserver_probe(address, ca, token)
    try:
        if api_running is None:
            ready = wait_ready(name, api, probe, timeout_s, log_path=log_path, fix=_APISERVER_FIX)
        else:  # it was waiting for etcd: ready again once it reaches it
            ready = wait_probe(name, probe, timeout_s, log_path=log_path, fix=_APISERVER_FIX)
    except ServerError:
        stop(data_dir)  # etcd too
        raise
    state["timings"] = {"etcd_ready_s": round(etcd_ready, 3), "ready_s": round(ready, 3)}
    write_state(data_dir, state)
    return server


def _credentials(data_dir: Path) -> tuple[Path, str]:
    """The folder of keys and certificates (the service accounts' keys made if missing) and
    the administrator's token."""
    pki = data_dir / "pki"
    pki.mkdir(exist_ok=True)
    _service_account_keys(pki)
    return pki, _admin_token(data_dir)


def _binaries() -> tuple[str, Path]:
    etcd = _etcd_binary()
    if not Path(etcd).is_file():
        raise ServerError("kubernetes", f"{etcd} is not installed", fix=_ETCD_FIX)
    return etcd, fetch_kube_apiserver()


def _start_etcd(
    etcd: str, data_dir: Path, client_port: int, peer_port: int, timeout_s: float
) -> tuple[int, float]:
    """etcd on its ports, from its data folder; its pid and how long it took to answer."""
    etcd_log = data_dir / "etcd.log"
    peer = f"http://127.0.0.1:{peer_port}"
    proc = spawn(
        "etcd",
        [etcd, "--name", "spotcap", "--data-dir", str(data_dir / "etcd"),
         "--listen-client-urls", f"http://127.0.0.1:{client_port}",
         "--advertise-client-urls", f"http://127.0.0.1:{client_port}",
         "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
         "--initial-cluster", f"spotcap={peer}", "--log-level", "warn"],
        etcd_log,
        data_dir,
    )  # fmt: skip
    ready = wait_ready(
        "etcd", proc, _etcd_probe(client_port), timeout_s, log_path=etcd_log, fix=_ETCD_FIX
    )
    return proc.pid, ready


def _spawn_apiserver(
    binary: Path, data_dir: Path, client_port: int, api_port: int, watch_cache: bool
) -> subprocess.Popen[bytes]:
    pki = data_dir / "pki"
    # kube-apiserver makes its certificate when it finds none, and keeps the one it finds: a
    # restart keeps the authority its clients' kubeconfigs name.
    if not ((pki / "apiserver.crt").exists() and (pki / "apiserver.key").exists()):
        for made in (pki / "apiserver.crt", pki / "apiserver.key"):
            made.unlink(missing_ok=True)
    return spawn(
        "kubernetes",
        [str(binary), f"--etcd-servers=http://127.0.0.1:{client_port}",
         "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
         f"--secure-port={api_port}", f"--cert-dir={pki}",
         # A loopback advertise address is refused by the endpoint reconciler.
         "--endpoint-reconciler-type=none",
         f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
         f"--service-account-key-file={pki / 'sa.pub'}",
         f"--service-account-signing-key-file={pki / 'sa.key'}",
         f"--token-auth-file={data_dir / 'tokens.csv'}",
         "--authorization-mode=RBAC", "--anonymous-auth=false",
         f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
         f"--watch-cache={str(watch_cache).lower()}"],
        data_dir / "kube-apiserver.log",
        data_dir,
    )  # fmt: skip
