"""An actuator process for the crash tests: `python -m tests.actuator_worker ...`.

It runs the actuator service (`provider.actuator.ActuatorService`) on an embedded log with the
OpenStack adapter of a provider file (a served cloud), until every order is done and it has
caught up, then exits 0. With ``--kill STEP:N`` it kills itself with SIGKILL the N-th time the
actuator reaches STEP (``started``, ``called``, ``answered``, ``done``): a crash at a chosen
point of a call.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from provider.actuator import ActuatorOptions, ActuatorService  # noqa: E402
from provider.openstack.config import open_openstack  # noqa: E402
from schemas.codec import Codec  # noqa: E402
from streams.embedded import EmbeddedLog  # noqa: E402


def killer(spec: str | None) -> Callable[[str], None] | None:
    if not spec:
        return None
    step, _, nth = spec.partition(":")
    count = {"n": 0}

    def hook(name: str) -> None:
        if name == step:
            count["n"] += 1
            if count["n"] == int(nth or 1):
                os.kill(os.getpid(), signal.SIGKILL)

    return hook


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--provider", type=Path, required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--owner", required=True)
    parser.add_argument("--kill")
    parser.add_argument("--patience-s", type=float, default=300.0)
    args = parser.parse_args()
    provider = open_openstack(args.provider, orchestrator_id=args.owner)
    service = ActuatorService(
        EmbeddedLog(args.log, share_writes_s=120.0),  # the test writes it too
        Codec(),
        provider,
        args.state,
        orchestrator_id=args.owner,
        options=ActuatorOptions(snapshot_every_s=0.0, poll_s=0.05),
    )
    service.on_step = killer(args.kill)
    deadline = time.monotonic() + args.patience_s
    with service:
        while not (service.caught_up and not service.book.open_orders):
            if time.monotonic() > deadline:
                print(f"orders still open: {service.book.orders()}", file=sys.stderr)
                return 1
            service.step()
    print(f"settled: {service.counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
