"""PyTorch through the checkpoint client (ADR-18): a small CPU model trained for a few steps is
killed mid-run (SIGKILL), resumes from its newest generation on the real versitygw and
OpenBao, and computes afterwards the same losses, to the bit, as a run never interrupted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from infra import servers
from tests.checkpoint_support import make_workload

REPO = Path(__file__).resolve().parent.parent
STEPS, EVERY = 30, 5


def _job(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.checkpoint_torch_job"], env=env, cwd=REPO,
        stdout=subprocess.PIPE,
    )  # fmt: skip


def _losses(lines: list[str]) -> dict[int, float]:
    return {d["step"]: d["loss"] for d in map(json.loads, lines) if "step" in d}


def test_a_killed_training_run_resumes_with_the_same_loss_curve(
    versitygw: servers.Server, openbao: servers.Server
) -> None:
    wl = make_workload(versitygw, openbao)
    whole = _job(wl.child_env("uninterrupted", steps=STEPS, every=EVERY, step_s=0.0))
    reference = _losses(whole.communicate(timeout=300)[0].decode().splitlines())
    assert whole.returncode == 0 and sorted(reference) == list(range(1, STEPS + 1))

    env = wl.child_env("interrupted", steps=STEPS, every=EVERY, step_s=0.05)
    first = _job(env)
    assert first.stdout is not None
    seen: list[str] = []
    try:
        for raw in first.stdout:
            seen.append(raw.decode())
            if 13 in _losses(seen[-1:]):  # mid-run, after the save at step 10
                first.kill()
                break
    finally:
        first.kill()
        first.wait(30)
        seen.extend(line.decode() for line in first.stdout)  # what it printed before dying
        first.stdout.close()
    assert first.returncode == -9
    killed_at = max(_losses(seen))
    assert 13 <= killed_at < STEPS

    second = _job(env)
    lines = second.communicate(timeout=300)[0].decode().splitlines()
    assert second.returncode == 0
    resumed_from = json.loads(lines[0])["resumed_from"]
    assert resumed_from % EVERY == 0 and 10 <= resumed_from <= killed_at
    after = _losses(lines)
    assert sorted(after) == list(range(resumed_from + 1, STEPS + 1))
    assert after == {step: reference[step] for step in after}  # bit for bit
    before = _losses(seen)
    assert before == {step: reference[step] for step in before}
