"""A node enroller process for the crash test: `python -m tests.enroller_worker ...`.

It builds the actuator's follower of nodes as `spotcap run actuator` does
(`provider.nodes.nodes_from_env`: SPOTCAP_NODES_PKI_MOUNT, SPOTCAP_NODES_DIR, BAO_ADDR,
BAO_TOKEN) on a state folder, folds an ``instance_launched`` of each ``--launched`` instance
and an ``instance_deleted`` of each ``--deleted`` one (the same events each run, as a log read
again gives them), then drains and prints what it enrolled and cleaned as JSON. ``--kill
observed`` kills it with SIGKILL after folding and before draining (a death between a launch
seen and its enrolment); ``--kill issued`` right after OpenBao made the first enrolment token
it asked for, before the token reaches the node's folder (a death inside an enrolment).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from provider.nodes import NodeAuthority, NodeLifecycle, nodes_from_env  # noqa: E402
from schemas.events import Envelope, InstanceDeleted, InstanceLaunched  # noqa: E402
from schemas.ids import derived_event_id  # noqa: E402


def launched(region: str, instance: str) -> Envelope:
    payload = InstanceLaunched(instance, "c7.16.hall-a.reclaimable", "wl-a", 16, "reclaimable", {})
    event_id = derived_event_id("tests/enroller", instance, "launched")
    return Envelope(event_id, "instance_launched", 1, 1, region, instance, None, None, "test",
                    payload)  # fmt: skip


def deleted(region: str, instance: str) -> Envelope:
    payload = InstanceDeleted(instance, "pool-1", "wl-a", "orchestrator", "actuator", "drained")
    event_id = derived_event_id("tests/enroller", instance, "deleted")
    return Envelope(event_id, "instance_deleted", 2, 2, region, instance, None, None, "test",
                    payload)  # fmt: skip


def kill_after_the_first_issue() -> None:
    """SIGKILL this process as soon as OpenBao has made a node's enrolment token for it."""
    make = NodeAuthority.enrolment_token  # the exact point of the fault

    def issue_then_die(self: NodeAuthority, *args: Any, **kwargs: Any) -> str:
        make(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")

    NodeAuthority.enrolment_token = issue_then_die  # type: ignore[method-assign]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--region", required=True)
    parser.add_argument("--launched", action="append", default=[])
    parser.add_argument("--deleted", action="append", default=[])
    parser.add_argument("--kill", choices=["observed", "issued"])
    args = parser.parse_args()
    nodes = nodes_from_env(os.environ, args.state)
    assert isinstance(nodes, NodeLifecycle), "SPOTCAP_NODES_PKI_MOUNT or _DIR is not set"
    for instance in args.launched:
        nodes.observe(launched(args.region, instance))
    for instance in args.deleted:
        nodes.observe(deleted(args.region, instance))
    if args.kill == "observed":
        os.kill(os.getpid(), signal.SIGKILL)
    if args.kill == "issued":
        kill_after_the_first_issue()
    pending = nodes.drain()
    nodes.close()
    enroller = nodes.enroller
    enrolled = [i.instance_id for i in enroller.enrolled]
    print(json.dumps({"enrolled": enrolled, "cleaned": enroller.cleaned,
                      "pending": pending}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
