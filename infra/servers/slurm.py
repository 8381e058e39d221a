"""A one-node Slurm (slurmctld, slurmd, munged, slurmrestd) from Debian's packages.

``apt-get install -y slurm-wlm slurmrestd munge`` (``make system-packages`` does it) gives Slurm
22.05. Everything runs as root from ``data_dir`` on free ports of 127.0.0.1: the node is
``localhost`` with 2 CPUs and a partition ``batch`` that requeues. munged runs as the ``munge``
user from its own socket folder under /run (its socket folder and every parent must be
traversable by that user, which pytest's private temporary folders are not); slurmd's spool is
under /run too (slurmstepd's socket there must have a short path). slurmrestd answers
on the Unix socket ``data_dir/rest.sock`` with the ``openapi/v0.0.38`` plugin (the dbv plugin
stops it without slurmdbd). See ``../shared/notes/slurm-on-this-machine.md``.

The returned server's ``address`` is ``unix:<data_dir>/rest.sock``; ``slurm_conf(server)`` is the
configuration file to put in ``SLURM_CONF`` for ``sbatch``, ``scontrol`` and friends. Stopping
cancels every job first (``scancel``), then stops slurmrestd, slurmd and munged, then slurmctld,
and removes its two folders under /run.

Admission (ADR-04): slurmctld loads spotcap's filter, ``infra/admission/job_submit.lua``
(``JobSubmitPlugins=lua``, the script beside slurm.conf), with a second partition
``reclaimable`` on the same node that the filter guards; the list of published contracts it
reads on every submission is ``published_contracts(server)`` (empty at start: a job on
``reclaimable`` is refused until a test writes a workload there). ``batch`` is not guarded.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import pwd
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

from infra.servers.process import (
    Server,
    ServerError,
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

API_VERSION = "v0.0.38"
JOB_SUBMIT_FILTER = Path(__file__).resolve().parent.parent / "admission" / "job_submit.lua"
RECLAIMABLE_PARTITION = "reclaimable"
PUBLISHED_CONTRACTS = "published-contracts.slurm"
_FIX = "apt-get install -y slurm-wlm slurmrestd munge (as root; `make system-packages`)"
_SBIN = Path("/usr/sbin")


def slurm_conf(server: Server) -> Path:
    return server.data_dir / "slurm.conf"


def published_contracts(server: Server) -> Path:
    """The list of published Slurm contracts the job_submit filter reads (one
    ``<workload id> <bundle sha256>`` a line, as ``spotcap contracts compile`` writes it)."""
    return server.data_dir / PUBLISHED_CONTRACTS


def job_state_holds(server: Server, marker: str) -> bool:
    """slurmctld's saved job state (``StateSaveLocation/job_state``, what a slurmctld started
    again recovers its jobs from) holds `marker`: a job's unique name or admin comment.

    slurmctld saves its state on a thread of its own, up to 5 s after a change (its
    SAVE_MAX_WAIT; longer on a loaded machine), so a slurmctld killed with SIGKILL comes back
    without the jobs and changes of its last seconds. It writes ``job_state.new`` and renames
    it, so the file read here is whole."""
    try:
        return marker.encode() in (server.data_dir / "state" / "job_state").read_bytes()
    except FileNotFoundError:
        return False


def rest_socket(server: Server) -> Path:
    return server.data_dir / "rest.sock"


def _munge_dir(data_dir: Path) -> Path:
    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]
    return Path("/run") / f"spotcap-munge-{digest}"


def _spool_dir(data_dir: Path) -> Path:
    """slurmd's spool, under /run: slurmstepd makes its Unix socket there
    (``localhost_<job>.<step>``, the batch step 4294967291), and a socket's path has at most
    108 bytes; under a deep ``data_dir`` (pytest's temporary folders in CI) every job's
    launch failed ("Unix socket path ... is too long") and the job was requeued held."""
    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]
    return Path("/run") / f"spotcap-slurmd-{digest}"


def _prepare_munge(data_dir: Path) -> Path:
    try:
        munge = pwd.getpwnam("munge")
    except KeyError as exc:
        raise ServerError("slurm", "there is no 'munge' user", fix=_FIX) from exc
    folder = _munge_dir(data_dir)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    key = folder / "munge.key"
    system_key = Path("/etc/munge/munge.key")
    key.write_bytes(system_key.read_bytes() if system_key.exists() else os.urandom(1024))
    for path in (folder, key):
        os.chown(path, munge.pw_uid, munge.pw_gid)
    key.chmod(0o400)
    folder.chmod(0o711)  # munged insists the socket folder be traversable by everyone
    return folder


def _write_conf(data_dir: Path, munge_socket: Path, ctld_port: int, slurmd_port: int) -> Path:
    (data_dir / "state").mkdir(exist_ok=True)
    spool = _spool_dir(data_dir)
    shutil.rmtree(spool, ignore_errors=True)
    spool.mkdir(parents=True)
    conf = data_dir / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=spotcap",
                "SlurmctldHost=localhost",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                # cred_expire (default 120 s) is also how long a requeued job waits before it
                # can start again: 15 s lets the checkpoint tests' requeued jobs resume soon.
                f"AuthInfo=socket={munge_socket},cred_expire=15",
                "CredType=cred/munge",
                f"SlurmctldPort={ctld_port}",
                f"SlurmdPort={slurmd_port}",
                f"StateSaveLocation={data_dir / 'state'}",
                f"SlurmdSpoolDir={spool}",
                f"SlurmctldPidFile={data_dir / 'slurmctld.pid'}",
                f"SlurmdPidFile={data_dir / 'slurmd.pid'}",
                f"SlurmctldLogFile={data_dir / 'slurmctld.log'}",
                f"SlurmdLogFile={data_dir / 'slurmd.log'}",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "JobAcctGatherType=jobacct_gather/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core",
                "ReturnToService=2",
                "KillWait=5",
                "MpiDefault=none",
                "SwitchType=switch/none",
                "JobSubmitPlugins=lua",
                "NodeName=localhost CPUs=2 RealMemory=1000 State=UNKNOWN",
                "PartitionName=batch Nodes=localhost Default=YES MaxTime=INFINITE State=UP "
                "PreemptMode=REQUEUE",
                f"PartitionName={RECLAIMABLE_PARTITION} Nodes=localhost Default=NO "
                "MaxTime=INFINITE State=UP PreemptMode=REQUEUE",
                "",
            ]
        )
    )
    return conf


def _rest_get(sock: Path, path: str, timeout_s: float) -> int:
    conn = http.client.HTTPConnection("localhost", timeout=timeout_s)
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.settimeout(timeout_s)
    try:
        unix.connect(str(sock))
        conn.sock = unix
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


def _serving(node_state: str) -> bool:
    """The node answers slurmctld and takes jobs: idle, mixed or allocated ('*' means it
    does not answer)."""
    return node_state in ("idle", "mix", "alloc", "comp")


def _probe(conf: Path, sock: Path, *, any_state: bool = False) -> Callable[[float], bool]:
    env = {**os.environ, "SLURM_CONF": str(conf)}

    def probe(budget_s: float) -> bool:
        try:
            state = subprocess.run(
                ["sinfo", "-h", "-n", "localhost", "-o", "%t"],
                env=env,
                capture_output=True,
                text=True,
                timeout=min(budget_s, 5.0),
                check=False,
            ).stdout.strip()
            if state != "idle" and not (any_state and _serving(state)):
                return False
            return _rest_get(sock, f"/slurm/{API_VERSION}/ping", min(budget_s, 2.0)) == 200
        except (OSError, subprocess.SubprocessError, http.client.HTTPException):
            return False

    return probe


def start_slurm(data_dir: Path, timeout_s: float = 60) -> Server:
    """Start munged, slurmctld, slurmd and slurmrestd; return when the node is idle and the
    REST API answers.

    Parts found stopped beside others still running (slurmctld or slurmrestd killed, say) are
    started again alone, on the ports and the socket they had; slurmctld recovers its jobs
    from its state folder. Then it returns once the node answers in any state (its jobs may
    run) and the REST API answers."""
    name = "slurm"
    data_dir = prepare_dir(data_dir)
    state = read_state(data_dir)
    main = running(data_dir, name)
    live = {part: live_companion(state, part, data_dir) for part in _COMPANIONS}
    if main is not None and all(live.values()):
        return main
    _check_installed()
    _check_socket_path(data_dir / "rest.sock")
    log_path = data_dir / "slurm.log"
    had = ports_had(data_dir, 2)
    conf = data_dir / "slurm.conf"
    partial = (main is not None or any(live.values())) and had is not None and conf.exists()
    if not partial:
        if main is not None or any(live.values()):
            stop(data_dir)  # parts run, but not as this function can take them back: anew
        live = dict.fromkeys(_COMPANIONS)
        munge, conf, (ctld_port, slurmd_port) = _prepare(data_dir)
    else:
        assert had is not None
        munge = _munge_dir(data_dir)
        ctld_port, slurmd_port = had
    published = data_dir / PUBLISHED_CONTRACTS
    if not published.exists():
        published.write_text("# workload id, bundle sha256 (spotcap contracts compile)\n")
    sock = data_dir / "rest.sock"
    env = {"SLURM_CONF": str(conf)}
    pids = {part: pid for part, pid in live.items() if pid is not None}
    ctld = _spawn_missing(data_dir, conf, munge, pids, main is not None)
    server = main or Server(name, f"unix:{sock}", ctld.pid if ctld else 0, data_dir, log_path)
    match = {"slurmrestd": str(data_dir), "slurmd": str(data_dir), "munged": str(munge)}
    state = state_of(
        server,
        companions=[{"name": p, "pid": pids[p], "match": match[p]} for p in _COMPANIONS],
        pre_stop=["scancel", "--full", "--signal=KILL", "--user=root"],
        pre_stop_env=env,
        ports={"slurmctld": ctld_port, "slurmd": slurmd_port},
        remove_after_stop=[str(munge), str(_spool_dir(data_dir))],  # a start makes them anew
    )
    write_state(data_dir, state)
    probe = _probe(conf, sock, any_state=partial)
    try:
        if ctld is not None:
            ready = wait_ready(name, ctld, probe, timeout_s, log_path=log_path, fix=_FIX)
        else:
            ready = wait_probe(name, probe, timeout_s, log_path=log_path, fix=_FIX)
    except ServerError:
        stop(data_dir)  # the companions too
        raise
    state["timings"] = {"ready_s": round(ready, 3)}
    write_state(data_dir, state)
    return server


def _spawn_missing(
    data_dir: Path, conf: Path, munge: Path, pids: dict[str, int], ctld_runs: bool
) -> subprocess.Popen[bytes] | None:
    """Start the parts not running, in order; adds the companions' pids to `pids` and
    returns slurmctld's process when it was started."""
    ctld = None
    for part in ("munged", "slurm", "slurmd", "slurmrestd"):  # the order they start in
        if (part == "slurm" and ctld_runs) or part in pids:
            continue
        if part == "slurmrestd":
            (data_dir / "rest.sock").unlink(missing_ok=True)
        if part == "slurmd":
            _spool_dir(data_dir).mkdir(parents=True, exist_ok=True)
        argv, log, env = _part(part, data_dir, conf, munge)
        proc = spawn(part, argv, log, data_dir, env={"SLURM_CONF": str(conf), **env})
        if part == "slurm":
            ctld = proc
        else:
            pids[part] = proc.pid
    return ctld


def _check_installed() -> None:
    for binary in ("munged", "slurmctld", "slurmd", "slurmrestd"):
        if not (_SBIN / binary).exists():
            raise ServerError("slurm", f"{_SBIN / binary} is not installed", fix=_FIX)


def _check_socket_path(sock: Path) -> None:
    if len(os.fsencode(sock)) > 107:  # a Unix socket's path: 108 bytes with its NUL
        raise ServerError("slurm", f"slurmrestd's socket path {sock} is longer than 107 bytes",
                          fix="start Slurm from a shorter data folder")  # fmt: skip


def _prepare(data_dir: Path) -> tuple[Path, Path, list[int]]:
    """A first start's munge folder, ports and slurm.conf (with the job_submit filter, which
    slurmctld reads from slurm.conf's folder)."""
    munge = _prepare_munge(data_dir)
    ports = ports_of(data_dir, 2)
    conf = _write_conf(data_dir, munge / "munge.sock", ports[0], ports[1])
    shutil.copyfile(JOB_SUBMIT_FILTER, data_dir / "job_submit.lua")
    return munge, conf, ports


_COMPANIONS = ("slurmrestd", "slurmd", "munged")
"""Stopped in this order before slurmctld (the state file's order)."""


def _part(
    part: str, data_dir: Path, conf: Path, munge: Path
) -> tuple[list[str], Path, dict[str, str]]:
    """How a part of the server starts: its command line, its log, its environment."""
    sbin = str(_SBIN)
    if part == "munged":
        return [
            "setpriv", "--reuid=munge", "--regid=munge", "--init-groups", f"{sbin}/munged",
            "--foreground", f"--socket={munge / 'munge.sock'}",
            f"--key-file={munge / 'munge.key'}", f"--pid-file={munge / 'munged.pid'}",
            f"--log-file={munge / 'munged.log'}", f"--seed-file={munge / 'munged.seed'}",
        ], data_dir / "munged.log", {}  # fmt: skip
    if part == "slurmd":
        argv = [f"{sbin}/slurmd", "-D", "-N", "localhost", "-f", str(conf)]
        return argv, data_dir / "slurmd.out", {}
    if part == "slurmrestd":
        return [
            f"{sbin}/slurmrestd", "-f", str(conf), "-a", "rest_auth/local",
            "-s", f"openapi/{API_VERSION}", f"unix:{data_dir / 'rest.sock'}",
        ], data_dir / "slurmrestd.log", {"SLURMRESTD_SECURITY": "disable_user_check"}  # fmt: skip
    return [f"{sbin}/slurmctld", "-D", "-f", str(conf)], data_dir / "slurm.log", {
        "SPOTCAP_PUBLISHED_CONTRACTS": str(data_dir / PUBLISHED_CONTRACTS),
        "SPOTCAP_RECLAIMABLE_PARTITIONS": RECLAIMABLE_PARTITION,
    }  # fmt: skip
