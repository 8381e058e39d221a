"""PyTorch: a training loop's state as one part (model, optimiser, RNG, step).

`state_parts` serialises with ``torch.save`` the model's and the optimiser's ``state_dict``,
the CPU random number generator's state and the step (plus any plain ``extra``); `load_state`
puts them back and returns the step to continue after. With the RNG restored and the data
chosen by step, a run killed and resumed computes the same loss curve as one never interrupted
(tests/test_checkpoint_pytorch.py checks it to the bit). Loading uses ``weights_only=True``:
a checkpoint is data, never code.
"""

from __future__ import annotations

import io
from typing import Any

import torch

from checkpoint.client import Restored

__all__ = ["PART", "load_state", "state_parts"]

PART = "torch-state"


def state_parts(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    step: int,
    extra: dict[str, Any] | None = None,
) -> dict[str, bytes]:
    """The parts of a generation holding the training state at `step`."""
    buffer = io.BytesIO()
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "rng": torch.get_rng_state(),
            "step": step,
            "extra": extra or {},
        },
        buffer,
    )
    return {PART: buffer.getvalue()}


def load_state(
    restored: Restored, model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[int, dict[str, Any]]:
    """Put a restored generation's state back; (the step it was taken at, its extra)."""
    state = torch.load(io.BytesIO(restored.parts[PART]), weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"])
    return int(state["step"]), dict(state["extra"])
