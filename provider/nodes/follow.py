"""The region's releases on the log (ADR-32): the bundle service's follower, `spotcap canary
status`'s read and an operator's rollback (`spotcap canary roll-back`).

The fold itself is `releases.Releases` (pure); this module reads the three topics that hold
what it folds (demand, lifecycle, decisions) and writes the operator's `bundle_rolled_back`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from provider.nodes.releases import TOPICS, Releases
from schemas.codec import Codec
from schemas.events import BundleRolledBack, Envelope
from schemas.ids import derived_event_id
from streams.log import EventLog
from streams.merged import MergedHistory
from streams.topics import region_topics, topic_name
from streams.writer import publish

log = logging.getLogger("spotcap.bundles")

OPERATOR = "operator/canary"
"""The producer of an operator's rollback (`roll_back`)."""


class NoCanaryError(ValueError):
    """An operator's rollback names a workload with no canary running."""


def _history(log_: EventLog, codec: Codec, region: str, *, tail: bool) -> MergedHistory:
    wanted = {topic_name(region, t) for t in TOPICS}
    log_.apply_topics([spec for spec in region_topics(region) if spec.name in wanted])
    if tail:
        return MergedHistory(log_, codec, region, TOPICS, until=None, poll_records=2000)
    return MergedHistory(log_, codec, region, TOPICS, poll_records=2000)


def releases_of(log_: EventLog, codec: Codec, region: str) -> Releases:
    """The region's releases as its log holds them now (`spotcap canary status`; reads the
    three topics' whole retention, as `spotcap drill report` does)."""
    releases = Releases()
    history = _history(log_, codec, region, tail=False)
    try:
        for decoded in history:
            releases.observe(decoded.envelope)
    finally:
        history.close()
    return releases


def follow(
    log_: EventLog, codec: Codec, region: str, releases: Releases, should_stop: Callable[[], bool]
) -> None:
    """Fold the region's events into `releases` as they come, until `should_stop`: from the
    start of the log, then tailing. A log that fails is opened again after a pause (the
    service keeps serving from what it has folded: a node keeps the bundle it was on)."""
    while not should_stop():
        try:
            history = _history(log_, codec, region, tail=True)
            try:
                while not should_stop():
                    for decoded in history.read(2000, timeout_s=0.5):
                        releases.observe(decoded.envelope)
            finally:
                history.close()
        except Exception as error:  # the thread must outlive a broker restart
            log.warning("bundle service: following the releases of %s: %s", region, error)
            time.sleep(5.0)


def followed(
    log_: EventLog, codec: Codec, region: str, should_stop: Callable[[], bool]
) -> Releases:
    """`Releases` folded by a daemon thread that follows the region's log (`follow`)."""
    releases = Releases()
    threading.Thread(
        target=follow, args=(log_, codec, region, releases, should_stop),
        name="bundle-releases", daemon=True,
    ).start()  # fmt: skip
    return releases


def roll_back(log_: EventLog, codec: Codec, region: str, workload: str, reason: str,
              *, now_us: int | None = None) -> Envelope:  # fmt: skip
    """Write an operator's rollback of `workload`'s running canary (`spotcap canary roll-back`)
    and wait until the log has it: the canary decider reads it as an input and ends the canary;
    the bundle service then serves the canary's nodes the bundle in force again."""
    releases = releases_of(log_, codec, region)
    running = releases.running.get(workload)
    if running is None:
        raise NoCanaryError(f"workload {workload} has no canary running in region {region}")
    # Now, and after everything the log already holds (a region whose event time runs ahead of
    # this machine's clock, a simulated one): the decider must read it after the canary.
    at_us = max(time.time_ns() // 1000 if now_us is None else now_us, releases.last_us + 1)
    payload = BundleRolledBack(
        running.workload_id, running.contract_version, running.contract_sha256,
        running.previous_contract_sha256, "operator", reason, 0, None, (running.event_id,),
    )  # fmt: skip
    event = Envelope(
        derived_event_id(running.event_id, payload.EVENT_TYPE, OPERATOR), payload.EVENT_TYPE,
        at_us, at_us, region, workload, running.event_id, None, OPERATOR, payload,
    )  # fmt: skip
    publish(log_, codec, region, [event])
    return event
