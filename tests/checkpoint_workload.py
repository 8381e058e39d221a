"""A workload unit for the agent's tests (run as ``python -m tests.checkpoint_workload``): it
resumes from its newest generation, takes steps, checkpoints every ``interval_s`` through the
client, and writes a final checkpoint and stops when its node's agent sends a notice. Its
configuration (and its own credentials) come in the environment (`checkpoint_support`)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from checkpoint import AgentChannel, Checkpointer
from tests.checkpoint_support import client_from_env


def main() -> int:
    client, config = client_from_env()
    channel = AgentChannel(client.workload_id, client.unit_id, path=Path(config["socket"]))
    welcome = channel.connect()
    client.reporter = channel
    checkpointer = Checkpointer(client, config["interval_s"], channel=channel)
    restored = client.restore()
    step = restored.step if restored is not None else 0
    print(json.dumps({"ready": step, "method": welcome and welcome.checkpoint_method}), flush=True)
    while step < config["steps"]:
        step += 1
        time.sleep(config["step_s"])
        if checkpointer.due():
            checkpointer.save({"state": json.dumps({"step": step}).encode()}, step=step)
            if checkpointer.stopping:
                print(json.dumps({"final": step}), flush=True)
                channel.close()
                return 0
    print(json.dumps({"done": step}), flush=True)
    channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
