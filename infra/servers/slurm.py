"""A one-node Slurm (slurmctld, slurmd, munged, slurmrestd) from Debian's packages.

``apt-get install -y slurm-wlm slurmrestd munge`` (``make system-packages`` does it) gives Slurm
22.05. Everything runs as root from ``data_dir`` on free ports of 127.0.0.1: the node is
``localhost`` with 2 CPUs and a partition ``batch`` that requeues. munged runs as the ``munge``
user from its own socket folder under /run (its socket folder and every parent must be
traversable by that user, which pytest's private temporary folders are not). slurmrestd answers
on the Unix socket ``data_dir/rest.sock`` with the ``openapi/v0.0.38`` plugin (the dbv plugin
stops it without slurmdbd). See ``../shared/notes/slurm-on-this-machine.md``.

The returned server's ``address`` is ``unix:<data_dir>/rest.sock``; ``slurm_conf(server)`` is the
configuration file to put in ``SLURM_CONF`` for ``sbatch``, ``scontrol`` and friends. Stopping
cancels every job first (``scancel``), then stops slurmrestd, slurmd and munged, then slurmctld.

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
    ports_of,
    prepare_dir,
    running,
    spawn,
    state_of,
    stop,
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


def rest_socket(server: Server) -> Path:
    return server.data_dir / "rest.sock"


def _munge_dir(data_dir: Path) -> Path:
    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]
    return Path("/run") / f"spotcap-munge-{digest}"


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
    (data_dir / "spool").mkdir(exist_ok=True)
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
                f"SlurmdSpoolDir={data_dir / 'spool'}",
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


def _probe(conf: Path, sock: Path) -> Callable[[float], bool]:
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
            if state != "idle":
                return False
            return _rest_get(sock, f"/slurm/{API_VERSION}/ping", min(budget_s, 2.0)) == 200
        except (OSError, subprocess.SubprocessError, http.client.HTTPException):
            return False

    return probe


def start_slurm(data_dir: Path, timeout_s: float = 60) -> Server:
    """Start munged, slurmctld, slurmd and slurmrestd; return when the node is idle and the
    REST API answers."""
    name = "slurm"
    data_dir = prepare_dir(data_dir)
    existing = running(data_dir, name)
    if existing is not None:
        return existing
    for binary in ("munged", "slurmctld", "slurmd", "slurmrestd"):
        if not (_SBIN / binary).exists():
            raise ServerError(name, f"{_SBIN / binary} is not installed", fix=_FIX)
    log_path = data_dir / "slurm.log"
    munge = _prepare_munge(data_dir)
    munge_socket = munge / "munge.sock"
    ctld_port, slurmd_port = ports_of(data_dir, 2)
    conf = _write_conf(data_dir, munge_socket, ctld_port, slurmd_port)
    # slurmctld reads job_submit.lua from slurm.conf's folder.
    shutil.copyfile(JOB_SUBMIT_FILTER, data_dir / "job_submit.lua")
    published = data_dir / PUBLISHED_CONTRACTS
    if not published.exists():
        published.write_text("# workload id, bundle sha256 (spotcap contracts compile)\n")
    sock = data_dir / "rest.sock"
    sock.unlink(missing_ok=True)
    env = {"SLURM_CONF": str(conf)}
    munged = spawn(
        "munged",
        [
            "setpriv",
            "--reuid=munge",
            "--regid=munge",
            "--init-groups",
            str(_SBIN / "munged"),
            "--foreground",
            f"--socket={munge_socket}",
            f"--key-file={munge / 'munge.key'}",
            f"--pid-file={munge / 'munged.pid'}",
            f"--log-file={munge / 'munged.log'}",
            f"--seed-file={munge / 'munged.seed'}",
        ],
        data_dir / "munged.log",
        data_dir,
    )
    ctld = spawn(
        name,
        [str(_SBIN / "slurmctld"), "-D", "-f", str(conf)],
        log_path,
        data_dir,
        env={
            **env,
            "SPOTCAP_PUBLISHED_CONTRACTS": str(published),
            "SPOTCAP_RECLAIMABLE_PARTITIONS": RECLAIMABLE_PARTITION,
        },
    )
    slurmd = spawn(
        "slurmd",
        [str(_SBIN / "slurmd"), "-D", "-N", "localhost", "-f", str(conf)],
        data_dir / "slurmd.out",
        data_dir,
    )
    rest = spawn(
        "slurmrestd",
        [
            str(_SBIN / "slurmrestd"),
            "-f",
            str(conf),
            "-a",
            "rest_auth/local",
            "-s",
            f"openapi/{API_VERSION}",
            f"unix:{sock}",
        ],
        data_dir / "slurmrestd.log",
        data_dir,
        env={**env, "SLURMRESTD_SECURITY": "disable_user_check"},
    )
    server = Server(name, f"unix:{sock}", ctld.pid, data_dir, log_path)
    state = state_of(
        server,
        companions=[
            {"name": "slurmrestd", "pid": rest.pid, "match": str(data_dir)},
            {"name": "slurmd", "pid": slurmd.pid, "match": str(data_dir)},
            {"name": "munged", "pid": munged.pid, "match": str(munge)},
        ],
        pre_stop=["scancel", "--full", "--signal=KILL", "--user=root"],
        pre_stop_env=env,
        ports={"slurmctld": ctld_port, "slurmd": slurmd_port},
    )
    write_state(data_dir, state)
    try:
        ready = wait_ready(name, ctld, _probe(conf, sock), timeout_s, log_path=log_path, fix=_FIX)
    except ServerError:
        stop(data_dir)  # the companions too
        raise
    state["timings"] = {"ready_s": round(ready, 3)}
    write_state(data_dir, state)
    return server
