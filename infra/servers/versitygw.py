"""versitygw: an S3 server that enforces Object Lock in compliance mode, for the archive's tests.

versitygw (Apache-2.0) is a Go module: ``fetch_versitygw`` builds it once with ``go install``
into ``$SPOTCAP_CACHE/versitygw-v1.8.0`` (about 8 minutes of CPU; the cache makes it once per
machine, like the Kafka jars). ``start_versitygw`` runs its posix backend on 127.0.0.1 with a
versioning directory (required for versioning, hence for Object Lock); the data directory must
be on a filesystem with extended attributes. The root credentials are chosen at start and kept
in ``data_dir/credentials.json`` (mode 0600), passed through the environment, never the
command line. It was the only server here that refused every compliance violation tried
(deleting a locked version, shortening or downgrading its retention, suspending versioning),
and it keeps them across a restart (../shared/notes/s3-object-lock-on-this-machine.md).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from infra.servers.gobuild import GoCommand, fetch_go_command
from infra.servers.process import (
    Server,
    ServerError,
    ports_of,
    prepare_dir,
    running,
    spawn,
    state_of,
    wait_ready,
    write_state,
)

VERSITYGW_VERSION = "v1.8.0"
VERSITYGW_MODULE = "github.com/versity/versitygw/cmd/versitygw"
CREDENTIALS_FILE = "credentials.json"
BUILD_TIMEOUT_S = 3600  # ~8 minutes of CPU on an idle machine; far longer on a loaded one


def _cache_dir() -> Path:
    return Path(os.environ.get("SPOTCAP_CACHE") or Path.home() / ".cache" / "spotcap").expanduser()


def versitygw_binary() -> Path:
    """Where the built binary lives (``$SPOTCAP_VERSITYGW`` overrides)."""
    env = os.environ.get("SPOTCAP_VERSITYGW")
    if env:
        return Path(env)
    return _cache_dir() / f"versitygw-{VERSITYGW_VERSION}" / "versitygw"


def fetch_versitygw() -> Path:
    """Return the versitygw binary, building it with ``go install`` first if it is not cached."""
    return fetch_go_command(
        GoCommand(
            "versitygw",
            VERSITYGW_MODULE,
            VERSITYGW_VERSION,
            versitygw_binary(),
            # -buildvcs=false: building outside a repository would fail on the VCS stamp.
            env={"GOFLAGS": "-buildvcs=false"},
            go_fix="install Go 1.22+ or set SPOTCAP_GO (or SPOTCAP_VERSITYGW to a built binary)",
            build_fix="check access to the Go module proxy and the Go toolchain's version",
            timeout_s=BUILD_TIMEOUT_S,
        )
    )


def versitygw_credentials(server_or_data_dir: Server | Path | str) -> tuple[str, str]:
    """(access key, secret key) of the server running from that directory."""
    data_dir = (
        server_or_data_dir.data_dir
        if isinstance(server_or_data_dir, Server)
        else Path(server_or_data_dir).expanduser().resolve()
    )
    data = json.loads((data_dir / CREDENTIALS_FILE).read_text())
    return str(data["access_key"]), str(data["secret_key"])


def versitygw_create_user(
    server: Server, access_key: str, secret_key: str, role: str = "user"
) -> None:
    """Create an account on the running server (its internal IAM, ``--iam-dir``) with the
    admin CLI, authenticated as root through the environment. A ``user`` account sees only
    the buckets it owns or that a bucket policy grants it."""
    root_access, root_secret = versitygw_credentials(server)
    argv = [str(fetch_versitygw()), "admin", "--endpoint-url", server.address, "create-user",
            "--access", access_key, "--secret", secret_key, "--role", role]  # fmt: skip
    env = {**os.environ, "ADMIN_ACCESS_KEY": root_access, "ADMIN_SECRET_KEY": root_secret}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        raise ServerError("versitygw", f"create-user {access_key} failed: {tail[0][:200]}")


def _probe(address: str) -> Callable[[float], bool]:
    def probe(budget_s: float) -> bool:
        try:
            with urllib.request.urlopen(address, timeout=min(budget_s, 2.0)):
                return True
        except urllib.error.HTTPError:
            return True  # an S3 error answer (403 without credentials): it is serving
        except OSError:
            return False

    return probe


def start_versitygw(data_dir: Path, timeout_s: float = 30) -> Server:
    """Start versitygw (posix backend, versioning on) on 127.0.0.1; credentials in the dir."""
    name = "versitygw"
    data_dir = prepare_dir(data_dir)
    existing = running(data_dir, name)
    if existing is not None:
        return existing
    binary = fetch_versitygw()
    log_path = data_dir / "versitygw.log"
    root, versions = data_dir / "root", data_dir / "versions"
    root.mkdir(exist_ok=True)
    versions.mkdir(exist_ok=True)
    credentials = data_dir / CREDENTIALS_FILE
    if not credentials.exists():  # a restart keeps the buckets' owner
        credentials.touch(mode=0o600)
        credentials.write_text(
            json.dumps(
                {
                    "access_key": "spotcap" + secrets.token_hex(6),
                    "secret_key": secrets.token_urlsafe(30),
                }
            )
        )
    access_key, secret_key = versitygw_credentials(data_dir)
    (port,) = ports_of(data_dir, 1)
    address = f"http://127.0.0.1:{port}"
    iam = data_dir / "iam"  # internal accounts (versitygw_create_user), kept across restarts
    iam.mkdir(exist_ok=True)
    argv = [str(binary), "--port", f"127.0.0.1:{port}", "--iam-dir", str(iam), "posix",
            "--versioning-dir", str(versions), str(root)]  # fmt: skip
    env = {"ROOT_ACCESS_KEY": access_key, "ROOT_SECRET_KEY": secret_key}
    proc = spawn(name, argv, log_path, data_dir, env=env)
    server = Server(name, address, proc.pid, data_dir, log_path)
    extra = {"credentials_file": str(credentials)}
    write_state(data_dir, state_of(server, **extra))
    ready = wait_ready(
        name,
        proc,
        _probe(address),
        timeout_s,
        log_path=log_path,
        fix="run `python -m infra.servers fetch-versitygw`, and keep the data directory on a "
        "filesystem with extended attributes (ext4, xfs)",
    )
    write_state(data_dir, state_of(server, **extra, timings={"ready_s": round(ready, 3)}))
    return server
