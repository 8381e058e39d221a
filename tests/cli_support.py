"""Running the real `spotcap` entry point in a child process, as a person would."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

SPOTCAP = str(Path(sys.executable).with_name("spotcap"))


def spotcap(
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 300.0,
    prefix: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """Run ``spotcap ARGS`` (after `prefix`, e.g. ``unshare -m sh -c``), capturing its output."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SPOTCAP_")}
    environment.update(env or {})
    return subprocess.run(
        [*prefix, SPOTCAP, *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def assert_one_sentence(
    result: subprocess.CompletedProcess[str], *needles: str, code: int = 1
) -> None:
    """Exit `code`, no traceback, one ``error:`` sentence holding every needle."""
    err = result.stderr
    assert result.returncode == code, (result.returncode, result.stdout[-500:], err[-2000:])
    assert "Traceback" not in err and 'File "' not in err, err
    errors = [line for line in err.splitlines() if line.startswith(("error:", "Error:"))]
    assert len(errors) == 1, err
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
