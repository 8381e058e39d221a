"""The actuator: the I/O half of the actuator guard (ADR-11, ADR-12, docs/operating.md).

The guard (``streams/deciders/actuator.py``, pure) orders every provider call it allows
(`actuation_ordered`); the actuator carries the orders out through the provider seam, each
once, and writes the provider's answers to the log as events caused by the decisions.

* `book`: the fold of a region's log into the orders, the tags each launch carries and what is
  done (the simulator's loop keeps one too);
* `actuator`: the calls, their answers as events, and the recovery of calls a crash cut short;
* `service`: `spotcap run actuator`, following the log on Kafka or the embedded log.

What it may import: `schemas`, `contracts`, `streams` (the log, the merged history, the deciders'
tag names), `provider`. Who calls it: the simulator's loop (the book), the command line.
"""

from provider.actuator.actuator import MAX_AGE_S, Actuator, Counts, Journal, launch_failed
from provider.actuator.book import ACTUATOR, Cause, Order, OrderBook, failure_id, refusal_id
from provider.actuator.service import (
    TOPICS,
    ActuatorOptions,
    ActuatorService,
    ActuatorState,
    ActuatorStateError,
    Progress,
    run_actuator,
)

__all__ = [
    "ACTUATOR",
    "MAX_AGE_S",
    "TOPICS",
    "Actuator",
    "ActuatorOptions",
    "ActuatorService",
    "ActuatorState",
    "ActuatorStateError",
    "Cause",
    "Counts",
    "Journal",
    "Order",
    "OrderBook",
    "Progress",
    "failure_id",
    "launch_failed",
    "refusal_id",
    "run_actuator",
]
