"""Slurm through the checkpoint client (ADR-18, ADR-21) on the real one-node Slurm: a batch job
submitted with ``--requeue --signal=B:USR1@...`` is signalled before its deadline, writes a
final checkpoint through the client on the real versitygw and OpenBao, requeues itself, and the
requeued run resumes from that generation and completes; its output is published once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra import servers
from tests.agent_support import wait_for
from tests.checkpoint_support import make_workload

REPO = Path(__file__).resolve().parent.parent
STEPS = 180
"""45 s of work (0.25 s a step): longer than the latest moment Slurm signals a run (40 s after
its start), so the first run is always signalled before it could finish; shorter than the
1-minute limit."""


def _slurm(slurm: servers.Server, *argv: str, check: bool = True) -> str:
    env = {**os.environ, "SLURM_CONF": str(servers.slurm_conf(slurm))}
    return subprocess.run(
        list(argv), env=env, capture_output=True, text=True, timeout=30, check=check
    ).stdout


@pytest.fixture
def node(slurm: servers.Server) -> Iterator[servers.Server]:
    """The node idle and empty after the test."""
    yield slurm
    _slurm(slurm, "scancel", "--user=root")

    def idle() -> bool:
        return _slurm(slurm, "sinfo", "-h", "-n", "localhost", "-o", "%t").strip() == "idle"

    wait_for(idle, 60, "the node to be idle again")


def test_a_signalled_job_checkpoints_requeues_and_resumes(
    tmp_path: Path, node: servers.Server, versitygw: servers.Server, openbao: servers.Server
) -> None:
    wl = make_workload(versitygw, openbao)
    log, output = tmp_path / "job.log", tmp_path / "output"
    script = tmp_path / "job.sh"
    # exec: the Python process is the batch script, so the B: signal reaches it; ignored until
    # Python has its handler (a signal lost that early only lets the run go on).
    job = f"exec {sys.executable} -m tests.checkpoint_slurm_job"
    script.write_text(f"#!/bin/bash\ncd {REPO}\ntrap '' USR1\n{job}\n")
    env = wl.child_env("slurm-unit", log=str(log), output=str(output), steps=STEPS, step_s=0.25)
    env["SLURM_CONF"] = str(servers.slurm_conf(node))
    submitted = subprocess.run(
        ["sbatch", "--parsable", "--requeue", "--time=1", "--signal=B:USR1@20", "-o",
         str(tmp_path / "slurm-%j.out"), "-p", "batch", str(script)],
        env=env, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    job_id = submitted.stdout.strip().split(";")[0]

    def entries() -> list[dict[str, object]]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    # Slurm signals a run when its end is less than 20 s + 30 s away, at its deadline check
    # (every 30 s): 10 to 40 s after it starts. The 45 s of work take two runs or more, each
    # resuming where the last one stopped.
    wait_for(lambda: any("completed" in e for e in entries()), 600, "the job to complete")
    runs = entries()
    finals = [e for e in runs if "final" in e]
    starts = [e for e in runs if "started" in e]
    assert finals and finals[0]["run"] == 0  # the first run was signalled and checkpointed
    assert [s["run"] for s in starts] == list(range(len(finals) + 1))
    assert [s["started"] for s in starts] == [0] + [f["final"] for f in finals]
    (done,) = [e for e in runs if "completed" in e]
    assert done["completed"] == STEPS
    assert output.read_text() == f"{STEPS * (STEPS + 1) // 2}\n"  # published once

    def shown() -> str:
        return _slurm(node, "scontrol", "show", "job", job_id, "-o")

    wait_for(lambda: "JobState=COMPLETED" in shown(), 60, "Slurm to see the job completed")
    assert f"Restarts={len(finals)}" in shown()
    generations = wl.client("slurm-unit").generations()
    assert any(g.final and g.step == finals[0]["final"] for g in generations)
