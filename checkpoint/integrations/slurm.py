"""Slurm: a batch job that checkpoints on the signal Slurm sends before its deadline, requeues
itself and resumes (ADR-18, ADR-21).

Submit with ``sbatch --requeue --signal=B:USR1@<seconds>``: Slurm sends SIGUSR1 to the batch
script that many seconds before the job's end (the node agent's Slurm drain path sends the same
signal on a reclaim notice). `on_signal` makes the signal ask the `Checkpointer` for a final
checkpoint at the next step boundary (a handler only sets a flag); the job then writes it and
calls `requeue`, which puts it back in the queue (``scontrol requeue``); the next run, with
``SLURM_RESTART_COUNT`` one higher, resumes from that generation.
"""

from __future__ import annotations

import os
import signal
import subprocess

from checkpoint.periodic import Checkpointer

__all__ = ["job_id", "on_signal", "requeue", "restart_count"]


def on_signal(checkpointer: Checkpointer, signum: int = signal.SIGUSR1) -> None:
    """Let `signum` (Slurm's ``--signal``) request a final checkpoint."""
    name = signal.Signals(signum).name
    signal.signal(signum, lambda _s, _f: checkpointer.request_final(f"slurm {name}"))


def job_id() -> str | None:
    return os.environ.get("SLURM_JOB_ID")


def restart_count() -> int:
    """How many times Slurm has requeued this job (0 on its first run)."""
    return int(os.environ.get("SLURM_RESTART_COUNT") or 0)


def requeue(scontrol: str = "scontrol", timeout_s: float = 30.0) -> None:
    """Put this job back in the queue; Slurm ends this run and starts it again later."""
    current = job_id()
    if current is None:
        raise RuntimeError("not in a Slurm job (no SLURM_JOB_ID)")
    subprocess.run([scontrol, "requeue", current], check=True, timeout=timeout_s,
                   capture_output=True)  # fmt: skip
