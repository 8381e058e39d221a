"""A node revoker process for the crash test: `python -m tests.revoker_worker ...`.

It builds the actuator's revoker as `spotcap run actuator` does (`provider.nodes.revoker_from_env`:
SPOTCAP_NODES_PKI_MOUNT, BAO_ADDR, BAO_TOKEN) on a journal, folds an ``instance_deleted`` of
each ``--deleted`` instance (the same event each run, as a log read again gives it), then
drains and prints what it revoked as JSON. With ``--kill`` it kills itself with SIGKILL after
folding and before draining: a death between a deletion seen and its revocation.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from provider.nodes import revoker_from_env  # noqa: E402
from schemas.events import Envelope, InstanceDeleted  # noqa: E402
from schemas.ids import derived_event_id  # noqa: E402


def deleted(region: str, instance: str) -> Envelope:
    payload = InstanceDeleted(instance, "pool-1", "wl-a", "orchestrator", "actuator", "drained")
    event_id = derived_event_id("tests/revoker", instance)
    return Envelope(event_id, "instance_deleted", 1, 1, region, instance, None, None, "test",
                    payload)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--journal", type=Path, required=True)
    parser.add_argument("--region", required=True)
    parser.add_argument("--deleted", action="append", default=[])
    parser.add_argument("--kill", action="store_true")
    args = parser.parse_args()
    revoker = revoker_from_env(os.environ, args.journal)
    assert revoker is not None, "SPOTCAP_NODES_PKI_MOUNT is not set"
    for instance in args.deleted:
        revoker.observe(deleted(args.region, instance))
    if args.kill:
        os.kill(os.getpid(), signal.SIGKILL)
    pending = revoker.drain()
    revoker.close()
    print(json.dumps({"revoked": revoker.revoked, "pending": pending}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
