"""The Slurm drain path against a real one-node Slurm (slurmctld, slurmd, munged, slurmrestd
from Debian's packages, started by the session fixture): a real batch job is signalled USR1,
the node drained and the job requeued, through slurmrestd where its API can and ``scontrol``
where it cannot; and without slurmrestd, through the command line alone."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.clock import WallClock
from agent.config import AgentConfig
from agent.drain.base import DrainPathImpl
from agent.drain.local import LocalDrain
from agent.drain.slurm import SlurmControl, SlurmDrain, expand_hostlist
from agent.drainer import Drainer, DrainOutcome
from agent.records import Recorder
from infra import servers
from schemas.events import CheckpointTriggered, DrainCompleted, Envelope
from tests.agent_support import bundle, config, notice, wait_for

JOB = """#!/bin/bash
#SBATCH --requeue
trap 'echo checkpoint >> {log}' USR1
echo "start ${{SLURM_RESTART_COUNT:-0}}" >> {log}
while true; do sleep 0.1; done
"""


def _env(slurm: servers.Server) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(servers.slurm_conf(slurm))}


def _slurm(slurm: servers.Server, *argv: str) -> str:
    return subprocess.run(
        list(argv), env=_env(slurm), capture_output=True, text=True, timeout=20, check=True
    ).stdout


@pytest.fixture
def node(slurm: servers.Server) -> Iterator[servers.Server]:
    """The node idle and empty before and after each test."""
    yield slurm
    _slurm(slurm, "scancel", "--user=root")  # running and pending (requeued) jobs alike
    _slurm(slurm, "scontrol", "update", "nodename=localhost", "state=resume")

    def idle() -> bool:
        return _slurm(slurm, "sinfo", "-h", "-n", "localhost", "-o", "%t").strip() == "idle"

    wait_for(idle, 30, "the node to be idle again")


def _submit(slurm: servers.Server, tmp_path: Path) -> tuple[int, Path]:
    log = tmp_path / "job.log"
    script = tmp_path / "job.sh"
    script.write_text(JOB.format(log=log))
    out = _slurm(slurm, "sbatch", "--parsable", "-o", "/dev/null", "-p", "batch", str(script))
    job_id = int(out.strip().split(";")[0])
    wait_for(lambda: log.exists() and "start 0" in log.read_text(), 30, "the job to start")
    return job_id, log


def _drain(
    cfg: AgentConfig, control: SlurmControl | None = None
) -> tuple[DrainOutcome, list[Envelope]]:
    events: list[Envelope] = []
    clock = WallClock()
    local = LocalDrain(cfg.local)
    path = SlurmDrain(cfg.slurm, cfg.drain, local, control=control)
    paths: dict[str, DrainPathImpl] = {"local": local, "slurm": path}
    drainer = Drainer(cfg, paths, Recorder(cfg.region, cfg.producer, clock, events.append), clock)  # type: ignore[arg-type]
    note = notice(cfg.instance_id, deadline_s=60)
    request = drainer.request_for(
        bundle(scheduler="slurm", checkpoint_method="slurm-requeue", restart_semantics="requeue"),
        workload_id="etl",
        trigger="notice",
        cause_event_id=note.event_id,
        deadline_at_us=note.deadline_at_us,
    )
    return drainer.run(request, path, time.monotonic()), events


def _config(tmp_path: Path, slurm: servers.Server, *, rest: bool) -> AgentConfig:
    table: dict[str, object] = {
        "node_name": "localhost",
        "conf": str(servers.slurm_conf(slurm)),
        "signal_grace_s": 1.0,
    }
    if rest:
        table["rest_socket"] = slurm.address.removeprefix("unix:")
    return config(tmp_path, slurm=table, drain={"safety_margin_s": 1.0})


def _state(slurm: servers.Server, job_id: int) -> str:
    return _slurm(slurm, "squeue", "-h", "-j", str(job_id), "-o", "%T").strip()


@pytest.mark.parametrize("rest", [True, False], ids=["slurmrestd", "command-line"])
def test_a_real_job_is_signalled_drained_and_requeued(
    tmp_path: Path, node: servers.Server, rest: bool
) -> None:
    job_id, log = _submit(node, tmp_path)
    cfg = _config(tmp_path, node, rest=rest)
    control = SlurmControl(cfg.slurm, cfg.drain.scheduler_call_timeout_s)
    outcome, events = _drain(cfg, control)
    assert outcome.result.path == "slurm" and outcome.result.verified
    assert not outcome.result.fell_back_to_local
    assert _state(node, job_id) == "PENDING"  # requeued: back in the queue, not lost
    assert "Restarts=1" in _slurm(node, "scontrol", "show", "job", str(job_id), "-o")
    assert _slurm(node, "sinfo", "-h", "-n", "localhost", "-o", "%t").strip() in ("drain", "drng")
    assert "checkpoint" in log.read_text()  # the batch script got its USR1
    interfaces = set(control.calls)
    if rest:
        assert {"rest:jobs", "rest:signal", "cli:drain", "cli:requeue"} <= interfaces
    else:
        assert {"cli:jobs", "cli:signal", "cli:drain", "cli:requeue"} <= interfaces
        assert not any(c.startswith("rest:") for c in interfaces)
    (done,) = [e.payload for e in events if isinstance(e.payload, DrainCompleted)]
    assert done.path == "slurm"
    (triggered,) = [e.payload for e in events if isinstance(e.payload, CheckpointTriggered)]
    assert triggered.outcome == "signalled"


def test_a_job_that_finishes_on_usr1_is_not_requeued(tmp_path: Path, node: servers.Server) -> None:
    log = tmp_path / "job.log"
    script = tmp_path / "job.sh"
    script.write_text(
        f"#!/bin/bash\ntrap 'echo done >> {log}; exit 0' USR1\necho start0 >> {log}\n"
        "while true; do sleep 0.1; done\n"
    )
    out = _slurm(node, "sbatch", "--parsable", "--requeue", "-o", "/dev/null", str(script))
    job_id = int(out.strip())
    wait_for(lambda: log.exists() and "start0" in log.read_text(), 30, "the job to start")
    cfg = _config(tmp_path, node, rest=True)
    control = SlurmControl(cfg.slurm, cfg.drain.scheduler_call_timeout_s)
    outcome, _ = _drain(cfg, control)
    assert outcome.result.verified
    assert "cli:requeue" not in control.calls
    assert _state(node, job_id) in ("", "COMPLETED")


def test_no_slurm_answering_means_the_local_path(tmp_path: Path) -> None:
    cfg = config(
        tmp_path,
        slurm={
            "node_name": "localhost",
            "rest_socket": str(tmp_path / "absent.sock"),
            "conf": str(tmp_path / "absent.conf"),
        },
    )
    outcome, _ = _drain(cfg)
    assert outcome.result.path == "local" and outcome.result.fell_back_to_local


def test_hostlists_expand_as_slurm_writes_them() -> None:
    assert expand_hostlist("localhost") == ["localhost"]
    assert expand_hostlist("node[01-03,7],gpu1") == ["node01", "node02", "node03", "node7", "gpu1"]
