"""A small PyTorch training job for tests/test_checkpoint_pytorch.py (run as
``python -m tests.checkpoint_torch_job``): a two-layer CPU model with dropout, SGD with
momentum, a batch chosen by the step; it resumes from its newest generation, saves every
``every`` steps through the checkpoint client, and prints each step's loss as a JSON line."""

from __future__ import annotations

import json
import sys
import time

import torch

from checkpoint.integrations.pytorch import load_state, state_parts
from tests.checkpoint_support import client_from_env


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(32, 8, generator=generator)
    return x, (x[:, :1] * 2 - x[:, 1:2]).tanh()


def main() -> int:
    torch.set_num_threads(1)  # one thread: the same arithmetic in every run
    torch.manual_seed(7)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    client, config = client_from_env()
    restored = client.restore()
    step = load_state(restored, model, optimizer)[0] if restored is not None else 0
    print(json.dumps({"resumed_from": step}), flush=True)
    while step < config["steps"]:
        step += 1
        x, y = batch(step)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        print(json.dumps({"step": step, "loss": loss.item()}), flush=True)
        if step % config["every"] == 0:
            client.save(state_parts(model, optimizer, step=step), step=step)
        time.sleep(config["step_s"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
