"""Slurm jobs that carry a spotcap contract, from a poll of slurmrestd.

A job carries a contract when it names its workload as the job_submit filter reads it
(infra/admission/job_submit.lua): ``spotcap:workload=<id>`` as a word of its comment (a comment
naming two workloads names none), else its wckey (less Slurm's default-marking '*'). Every
poll is a complete batch: ``GET /slurm/<version>/jobs`` lists every job slurmctld still holds
(finished ones for ``MinJobAge``, 300 s by default), so a job gone from the list has ended.
A job is `pending` while PENDING for a reason other than a hold, `held` while held (it waits
for a person, not for capacity), `running` while RUNNING, SUSPENDED, CONFIGURING or
COMPLETING, and `ended` in any other state. Its claim asks for the job's CPUs.

slurmrestd is reached on its Unix socket (``rest_auth/local``: the intake runs on the
controller, as a user slurmrestd trusts). The cluster's name is given (slurmrestd 22.05 does
not say it when the list is empty, and an empty list must still end the open claims).
"""

from __future__ import annotations

import http.client
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from streams.intake.claims import Batch, Sighting, Stage

log = logging.getLogger(__name__)

API_VERSION = "v0.0.38"
POLL_INTERVAL_S = 5.0
REST_TIMEOUT_S = 10.0
_WORKLOAD = re.compile(r"(?:^|[\s;,])spotcap:workload=([^\s;,]+)")
_RUNNING = {"RUNNING", "SUSPENDED", "CONFIGURING", "COMPLETING"}
_HELD = {"JobHeldUser", "JobHeldAdmin"}


class SlurmRestError(Exception):
    """slurmrestd did not answer, or not with a job list."""


def workload_of(comment: str | None, wckey: str | None) -> str | None:
    """The workload a job names, as the job_submit filter reads it."""
    named = set(_WORKLOAD.findall(comment or ""))
    if len(named) == 1:
        return str(named.pop())
    if len(named) > 1:
        return None
    key = (wckey or "").removeprefix("*")
    return key or None


def stage_of(job: dict[str, Any]) -> Stage:
    state = str(job.get("job_state") or "")
    if state == "PENDING":
        return "held" if str(job.get("state_reason") or "") in _HELD else "pending"
    return "running" if state in _RUNNING else "ended"


def claim_id(cluster: str, job: dict[str, Any]) -> str:
    """``slurm/<cluster>/<job id>/<submit time>``: a job id alone is not unique. slurmctld
    saves its state a few seconds after a change, and a slurmctld killed in between (seen:
    SIGKILL) comes back without the jobs submitted since and hands their ids out again; the
    second job 5 would have had the first's claim id, so its events the first's event ids, and
    readers would have dropped them as copies. A job given an id again is submitted after the
    restart, in a later second than the job it replaces."""
    return f"slurm/{cluster}/{int(job['job_id'])}/{int(job.get('submit_time') or 0)}"


def sighting(cluster: str, job: dict[str, Any], seen_at_us: int) -> Sighting | None:
    """The job as a claim's work, or None when it names no workload."""
    workload = workload_of(job.get("comment"), job.get("wckey"))
    if workload is None:
        return None
    stage = stage_of(job)
    moment_s = {"pending": job.get("submit_time"), "ended": job.get("end_time")}.get(stage)
    job_id = int(job["job_id"])
    return Sighting(
        claim_id=claim_id(cluster, job),
        workload_id=workload,
        scheduler="slurm",
        cluster=cluster,
        stage=stage,
        requested_vcpu=max(1, int(job.get("cpus") or 1)),
        what=f"Slurm job {job_id} ({job.get('name') or '?'}) in {job.get('partition') or '?'}",
        at_us=int(moment_s) * 1_000_000 if moment_s else seen_at_us,
    )


def get_jobs(rest_socket: Path, api_version: str = API_VERSION) -> list[dict[str, Any]]:
    """Every job slurmctld holds, from slurmrestd on its Unix socket."""
    conn = http.client.HTTPConnection("localhost", timeout=REST_TIMEOUT_S)
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.settimeout(REST_TIMEOUT_S)
    try:
        unix.connect(str(rest_socket))
        conn.sock = unix
        conn.request("GET", f"/slurm/{api_version}/jobs")
        answer = conn.getresponse()
        body = answer.read()
    except (OSError, http.client.HTTPException) as error:
        raise SlurmRestError(f"slurmrestd at {rest_socket}: {error!r}") from error
    finally:
        conn.close()
    try:
        jobs = json.loads(body).get("jobs") if answer.status == 200 else None
    except ValueError:
        jobs = None
    if not isinstance(jobs, list):
        raise SlurmRestError(f"slurmrestd at {rest_socket} answered {answer.status} without jobs")
    return jobs


class SlurmSource:
    """Polls one slurmrestd for the jobs that name a workload."""

    def __init__(
        self,
        rest_socket: Path,
        cluster: str,
        *,
        poll_interval_s: float = POLL_INTERVAL_S,
        clock_us: Callable[[], int] | None = None,
    ) -> None:
        self.rest_socket = rest_socket
        self.prefix = f"slurm/{cluster}/"
        self._cluster = cluster
        self._interval_s = poll_interval_s
        self._now_us = clock_us or (lambda: time.time_ns() // 1000)

    def batches(self, stop: threading.Event) -> Iterator[Batch]:
        """A complete batch every poll until `stop` is set; a poll that fails is logged and
        tried again at the next interval (no batch: nothing is taken as ended)."""
        while not stop.is_set():
            try:
                jobs = get_jobs(self.rest_socket)
            except SlurmRestError as error:
                log.warning("slurm %s: %s; retrying", self._cluster, error)
            else:
                now_us = self._now_us()
                found = [sighting(self._cluster, job, now_us) for job in jobs]
                yield Batch(self.prefix, [s for s in found if s is not None], True, now_us)
            stop.wait(self._interval_s)
