"""The final checkpoint, triggered through the method the workload's contract declares (ADR-18).

The platform's checkpoint integrations (Spark, PyTorch, Slurm, the application client) are
reached through one command per method, configured at launch (``[checkpoint]``). The agent runs
it next to the drain, never after it (the work is gone by then), with the notice's deadline as
its time limit, and reads the outcome from it: exit 0 with a last line of JSON
``{"written_bytes": N, "generation": G}`` is a written checkpoint; exit 0 without it means the
trigger was delivered and the workload reports nothing back; anything else failed. The command
sees ``SPOTCAP_INSTANCE_ID``, ``SPOTCAP_WORKLOAD_ID``, ``SPOTCAP_CHECKPOINT_METHOD``,
``SPOTCAP_DEADLINE_AT_US`` and ``SPOTCAP_SECONDS_LEFT``.

For ``slurm-requeue`` without a command, the USR1 the Slurm path sends is the trigger.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass

from agent.config import CheckpointConfig
from agent.drain.base import Deadline, DrainRequest
from schemas.events import CheckpointOutcome


@dataclass(frozen=True, slots=True)
class CheckpointReport:
    outcome: CheckpointOutcome
    duration_s: float
    detail: str | None = None
    written_bytes: int | None = None
    generation: int | None = None


def run_trigger(
    config: CheckpointConfig, request: DrainRequest, deadline: Deadline
) -> CheckpointReport | None:
    """Run the method's trigger; None when the contract declares no checkpoint, or for
    slurm-requeue without a command (the Slurm path's USR1 delivers it)."""
    argv = config.commands.get(request.checkpoint_method)
    if request.checkpoint_method == "none":
        return None
    if not argv:
        if request.checkpoint_method == "slurm-requeue":
            return None  # the Slurm path's USR1 is the trigger
        return CheckpointReport(
            "failed",
            0.0,
            f"no trigger command for method {request.checkpoint_method!r} in [checkpoint]",
        )
    timeout_s = deadline.cap(config.timeout_s)
    env = {
        **os.environ,
        "SPOTCAP_INSTANCE_ID": request.instance_id,
        "SPOTCAP_WORKLOAD_ID": request.workload_id,
        "SPOTCAP_CHECKPOINT_METHOD": request.checkpoint_method,
        "SPOTCAP_DEADLINE_AT_US": str(request.deadline_at_us),
        "SPOTCAP_SECONDS_LEFT": f"{timeout_s:.1f}",
    }
    started = time.monotonic()
    if timeout_s <= 0:
        return CheckpointReport("timed_out", 0.0, "no time left before the deadline")
    try:
        done = subprocess.run(
            list(argv),
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return CheckpointReport(
            "timed_out", time.monotonic() - started, f"no answer within {timeout_s:.1f} s"
        )
    except OSError as error:
        return CheckpointReport("failed", time.monotonic() - started, f"cannot run: {error}")
    duration_s = time.monotonic() - started
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        return CheckpointReport("failed", duration_s, f"exit {done.returncode}: {tail[0][:200]}")
    lines = done.stdout.strip().splitlines()
    try:
        report = json.loads(lines[-1]) if lines else None
    except ValueError:
        report = None
    if (
        isinstance(report, dict)
        and isinstance(report.get("written_bytes"), int)
        and isinstance(report.get("generation"), int)
    ):
        return CheckpointReport(
            "written",
            duration_s,
            f"generation {report['generation']}, {report['written_bytes']} bytes",
            report["written_bytes"],
            report["generation"],
        )
    return CheckpointReport("signalled", duration_s, "delivered; the workload reported nothing")
