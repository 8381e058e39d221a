"""A Slurm batch job for tests/test_checkpoint_slurm.py (run by its batch script as
``python -m tests.checkpoint_slurm_job``): it adds up the numbers 1..steps, one per step; on
Slurm's ``--signal`` it writes a final checkpoint through the client, requeues itself and
stops; a requeued run resumes from the newest generation; the sum is published once, when the
unit completes. Each run appends what it did to the log file as JSON lines."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from checkpoint import Checkpointer, UnitRunner
from checkpoint.integrations import slurm
from tests.checkpoint_support import client_from_env


def main() -> int:
    client, config = client_from_env()
    log = Path(config["log"])

    def note(**what: object) -> None:
        with log.open("a") as f:
            f.write(json.dumps({"run": slurm.restart_count(), "pid": os.getpid(), **what}) + "\n")

    checkpointer = Checkpointer(client, None)
    slurm.on_signal(checkpointer)
    requeue = False
    with UnitRunner(client, "resume").start() as attempt:
        if attempt.completed:
            note(already="completed")
            return 0
        state = {"step": 0, "total": 0}
        if attempt.restored is not None:
            state = json.loads(attempt.restored.parts["state"])
        note(started=state["step"], job=slurm.job_id())
        while state["step"] < config["steps"]:
            state["step"] += 1
            state["total"] += state["step"]
            time.sleep(config["step_s"])
            if checkpointer.due():
                generation = checkpointer.save(
                    {"state": json.dumps(state).encode()}, step=state["step"]
                )
                note(final=state["step"], generation=generation.generation)
                requeue = True
                break
        else:

            def publish() -> None:  # the unit's effect, once
                with Path(config["output"]).open("a") as out:
                    out.write(f"{state['total']}\n")

            attempt.complete(publish)
            note(completed=state["step"])
    if requeue:
        slurm.requeue()
        time.sleep(60)  # Slurm ends this run
    return 0


if __name__ == "__main__":
    sys.exit(main())
