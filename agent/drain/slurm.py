"""The Slurm path (ADR-14): drain the node, USR1 its jobs, requeue or TERM them, verify.

Every call goes to slurmrestd over its Unix socket first and falls back to the command line
(``scontrol``, ``scancel``, ``squeue``) when the REST API is not configured, does not answer
within the cap, or does not offer the operation: Slurm 22.05's ``openapi/v0.0.38`` lists and
signals jobs but cannot update a node or requeue a job, so those two always use ``scontrol``.

Sequence: the node is set DRAIN (no new work lands); each job running on it gets SIGUSR1 (the
batch script and its steps: the checkpoint signal of ``sbatch --signal`` conventions); jobs
still running after the grace time (``signal_grace_s``, capped by the notice's deadline) are
requeued when they are requeueable and the contract restarts them (``resume``/``requeue``),
otherwise sent SIGTERM. Verification polls until no job is running on the node any more
(requeued jobs are PENDING, others finished). When neither the REST API nor ``scontrol``
answers, the local path signals the workload processes.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import re
import socket
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from agent.config import DrainConfig, SlurmConfig
from agent.drain.base import DrainContext, DrainResult
from agent.drain.local import LocalDrain
from schemas.events import DrainPath

log = logging.getLogger(__name__)

RUNNING_STATES = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STOPPED"})


class SlurmUnavailableError(Exception):
    """Neither slurmrestd nor the command line answered in time."""


@dataclass(frozen=True, slots=True)
class Job:
    job_id: int
    state: str
    requeue: bool


def expand_hostlist(expression: str) -> list[str]:
    """``node[01-03,7],gpu1`` -> the host names (Slurm's hostlist syntax, one bracket level)."""
    hosts: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", expression):
        match = re.fullmatch(r"(.*)\[([^\]]*)\](.*)", part)
        if not match:
            hosts.append(part)
            continue
        prefix, ranges, suffix = match.groups()
        for item in ranges.split(","):
            low, _, high = item.partition("-")
            if not high:
                hosts.append(f"{prefix}{low}{suffix}")
                continue
            width = len(low)
            hosts.extend(f"{prefix}{n:0{width}d}{suffix}" for n in range(int(low), int(high) + 1))
    return hosts


class SlurmRest:
    """slurmrestd over its Unix socket; every request bounded by `timeout_s`."""

    def __init__(self, socket_path: str, api_version: str, timeout_s: float) -> None:
        self._socket_path = socket_path
        self._prefix = f"/slurm/{api_version}"
        self._timeout_s = timeout_s

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("localhost", timeout=self._timeout_s)
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix.settimeout(self._timeout_s)
        try:
            unix.connect(self._socket_path)
            conn.sock = unix
            payload = json.dumps(body).encode() if body is not None else None
            headers = {"Content-Type": "application/json"} if payload else {}
            conn.request(method, self._prefix + path, body=payload, headers=headers)
            answer = conn.getresponse()
            raw = answer.read()
        except (OSError, http.client.HTTPException) as error:
            raise SlurmUnavailableError(f"slurmrestd {method} {path}: {error!r}") from error
        finally:
            conn.close()
        try:
            return answer.status, json.loads(raw) if raw else None
        except ValueError:
            return answer.status, None


class SlurmControl:
    """The operations the drain needs, REST first, then the command line."""

    def __init__(self, config: SlurmConfig, timeout_s: float) -> None:
        if not config.node_name:
            raise ValueError("[slurm] node_name is required for the Slurm drain path")
        self.node = config.node_name
        self._bin = config.bin_dir
        self._timeout_s = timeout_s
        self._env = dict(os.environ)
        if config.conf is not None:
            self._env["SLURM_CONF"] = str(config.conf)
        self.rest = (
            SlurmRest(str(config.rest_socket), config.api_version, timeout_s)
            if config.rest_socket is not None
            else None
        )
        self.calls: list[str] = []
        """Which interface served each operation, e.g. ``rest:signal``, ``cli:drain``."""

    def _cli(self, *argv: str) -> str:
        try:
            done = subprocess.run(
                [str(self._bin / argv[0]), *argv[1:]],
                env=self._env,
                capture_output=True,
                text=True,
                timeout=self._timeout_s,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise SlurmUnavailableError(f"{argv[0]}: {error!r}") from error
        if done.returncode != 0:
            raise SlurmUnavailableError(f"{' '.join(argv[:2])}: {done.stderr.strip()[:200]}")
        return done.stdout

    def _rest(self, method: str, path: str, body: Any = None) -> Any:
        """The JSON answer of a 200, or None when REST is absent or cannot do it."""
        if self.rest is None:
            return None
        try:
            status, answer = self.rest.request(method, path, body)
        except SlurmUnavailableError as why:
            log.info("slurmrestd did not answer, using the command line: %s", why)
            return None
        if status != 200 or (isinstance(answer, dict) and answer.get("errors")):
            return None
        return answer if answer is not None else {}

    def drain_node(self, reason: str) -> None:
        body = {"state": ["DRAIN"], "reason": reason}
        if self._rest("POST", f"/node/{self.node}", body) is not None:
            self.calls.append("rest:drain")
            return
        self._cli("scontrol", "update", f"nodename={self.node}", "state=DRAIN", f"reason={reason}")
        self.calls.append("cli:drain")

    def jobs_on_node(self) -> list[Job]:
        """The jobs running (or starting, or completing) on this node."""
        answer = self._rest("GET", "/jobs")
        if isinstance(answer, dict) and isinstance(answer.get("jobs"), list):
            self.calls.append("rest:jobs")
            return [
                Job(int(j["job_id"]), str(j.get("job_state", "")), bool(j.get("requeue")))
                for j in answer["jobs"]
                if str(j.get("job_state", "")) in RUNNING_STATES
                and self.node in expand_hostlist(str(j.get("nodes") or ""))
            ]
        # Not `squeue -w`: it resolves the name as a host and refuses e.g. "localhost".
        out = self._cli("squeue", "-h", "-t", "R,CF,CG,S,ST", "-o", "%i %T %N")
        self.calls.append("cli:jobs")
        jobs = []
        for line in out.splitlines():
            fields = line.split()
            if len(fields) == 3 and fields[0].isdigit() and self.node in expand_hostlist(fields[2]):
                job_id = int(fields[0])
                jobs.append(Job(job_id, fields[1], self._requeueable_cli(job_id)))
        return jobs

    def _requeueable_cli(self, job_id: int) -> bool:
        return "Requeue=1" in self._cli("scontrol", "show", "job", str(job_id), "-o")

    def job_state(self, job_id: int) -> str:
        answer = self._rest("GET", f"/job/{job_id}")
        if isinstance(answer, dict) and answer.get("jobs"):
            self.calls.append("rest:job")
            return str(answer["jobs"][0].get("job_state", ""))
        out = self._cli("scontrol", "show", "job", str(job_id), "-o")
        self.calls.append("cli:job")
        match = re.search(r"JobState=(\S+)", out)
        return match.group(1) if match else ""

    def signal(self, job_id: int, name: str) -> None:
        """Send SIG<name> to the job's batch script and steps."""
        if self._rest("DELETE", f"/job/{job_id}?signal=SIG{name}") is not None:
            self.calls.append("rest:signal")
            return
        self._cli("scancel", "--full", f"--signal={name}", str(job_id))
        self.calls.append("cli:signal")

    def requeue(self, job_id: int) -> None:
        self._cli("scontrol", "requeue", str(job_id))
        self.calls.append("cli:requeue")


class SlurmDrain:
    name: DrainPath = "slurm"

    def __init__(
        self,
        config: SlurmConfig,
        drain: DrainConfig,
        local: LocalDrain,
        *,
        control: SlurmControl | None = None,
    ) -> None:
        self.control = control or SlurmControl(config, drain.scheduler_call_timeout_s)
        self._grace_s = config.signal_grace_s
        self._local = local

    def drain(self, ctx: DrainContext) -> DrainResult:
        control = self.control
        reason = f"spotcap {ctx.request.trigger} {ctx.request.cause_event_id[:8]}"
        try:
            control.drain_node(reason)
            ctx.mark_signal()
            jobs = control.jobs_on_node()
        except SlurmUnavailableError as why:
            log.warning("node %s: Slurm did not answer (%s); draining locally", control.node, why)
            result = self._local.drain(ctx)
            return DrainResult("local", result.verified, True, f"{why}; {result.detail}", 0)
        signalled = 0
        for job in jobs:
            try:
                control.signal(job.job_id, "USR1")
                signalled += 1
            except SlurmUnavailableError as why:
                log.warning("job %d: USR1 not delivered: %s", job.job_id, why)
        running = self._wait_not_running([j.job_id for j in jobs], ctx.deadline.cap(self._grace_s))
        restartable = ctx.request.restart_semantics in ("resume", "requeue")
        for job in jobs:
            if job.job_id not in running:
                continue
            try:
                if job.requeue and restartable:
                    control.requeue(job.job_id)
                else:
                    control.signal(job.job_id, "TERM")
            except SlurmUnavailableError as why:
                log.warning("job %d: requeue/TERM failed: %s", job.job_id, why)
        left = self._wait_not_running(list(running), ctx.deadline.cap(ctx.deadline.left_s()))
        detail = f"{len(jobs)} jobs, {signalled} sent USR1"
        if left:
            detail += f"; still running: {sorted(left)}"
        return DrainResult("slurm", not left, False, detail, signalled)

    def _wait_not_running(self, job_ids: list[int], timeout_s: float) -> set[int]:
        deadline = time.monotonic() + timeout_s
        left = set(job_ids)
        while left:
            for job_id in list(left):
                try:
                    state = self.control.job_state(job_id)
                except SlurmUnavailableError:
                    continue
                if state not in RUNNING_STATES:
                    left.discard(job_id)
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        return left
