"""The runtime's own topics on Kafka, and the format of their records.

**The journal** (``<region>.deciders-journal``, one partition) holds the region's items
(`core`: input facts and clocks) in the one order every stage uses; an item's **position** is
its offset there. It is written by the region's one sequencer (`sequencer`) and read by the
router, which copies each item to the stage topics that need it, and by the stages that need
every item (the workload stage's region view, the actuator stage).

A journal record says the position its writer expected it to get (header ``p``); a record whose
offset differs was written by a second sequencer racing the first and is ignored by every
reader (the sequencer that wrote it stops). Records keep the input's encoded event as value.

**Stage topics** carry copies with the same value and position: ``deciders-pool`` (by pool, for
the exclusion watcher), ``deciders-workload`` (by workload, for the planner, the replacement
decider and the fallback arbiter), ``deciders-scorer`` (the region), and ``deciders-actuator``
(the region: the workload stage's decisions with their places, and its progress).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from streams.log import TopicSpec

DAY_MS = 86_400_000
RUNTIME_RETENTION_MS = 30 * DAY_MS  # stages snapshot every minute; a month is plenty to catch up

Kind = Literal["fact", "clock", "progress", "decision"]
_KIND_CODE: dict[Kind, bytes] = {
    "fact": b"f",
    "clock": b"c",
    "progress": b"g",
    "decision": b"d",
}
_CODE_KIND: dict[bytes, Kind] = {v: k for k, v in _KIND_CODE.items()}


@dataclass(frozen=True, slots=True)
class RuntimeTopics:
    """The names and partition counts of one region's runtime topics."""

    region: str
    pool_partitions: int = 3
    workload_partitions: int = 3

    @property
    def app_id(self) -> str:
        return f"spotcap-deciders-{self.region}"

    @property
    def journal(self) -> str:
        return f"{self.region}.deciders-journal"

    @property
    def pool(self) -> str:
        return f"{self.region}.deciders-pool"

    @property
    def workload(self) -> str:
        return f"{self.region}.deciders-workload"

    @property
    def scorer(self) -> str:
        return f"{self.region}.deciders-scorer"

    @property
    def actuator(self) -> str:
        return f"{self.region}.deciders-actuator"

    def changelog(self, table: str) -> str:
        """Faust's name for a table's changelog topic."""
        return f"{self.app_id}-{table}-changelog"

    @property
    def stage_partitions(self) -> Mapping[str, int]:
        """Each stage's table and its partition count (that of the topic it reads)."""
        return {
            "pool": self.pool_partitions,
            "scorer": 1,
            "workload": self.workload_partitions,
            "actuator": 1,
        }

    def specs(self) -> list[TopicSpec]:
        """Every topic the runtime uses, Faust's own included (Faust must find them made:
        a table whose changelog topic is missing at start stalls its agent)."""
        keep = RUNTIME_RETENTION_MS
        specs = [
            TopicSpec(self.journal, 1, keep, doc="the deciders' items in their one order"),
            TopicSpec(self.pool, self.pool_partitions, keep, doc="items by pool"),
            TopicSpec(self.workload, self.workload_partitions, keep, doc="items by workload"),
            TopicSpec(self.scorer, 1, keep, doc="the scorer's items"),
            TopicSpec(self.actuator, 1, keep, doc="workload decisions for the actuator"),
            TopicSpec(f"{self.app_id}-__assignor-__leader", 1, keep, doc="Faust's leader"),
        ]
        for table, partitions in self.stage_partitions.items():
            specs.append(
                TopicSpec(
                    self.changelog(table),
                    partitions,
                    -1,
                    compacted=True,
                    doc=f"the {table} stage's snapshots",
                    extra_config={"min.compaction.lag.ms": "0", "max.message.bytes": "2097152"},
                )
            )
        return specs


@dataclass(frozen=True, slots=True)
class Routing:
    """Which stage topics a fact goes to (computed once, by the sequencer)."""

    pool: str | None = None  # the exclusion watcher's key
    workload: str | None = None  # the workload deciders' key
    scorer: bool = False


@dataclass(frozen=True, slots=True)
class Header:
    """What a runtime record says besides its value."""

    kind: Kind
    position: int
    clock_us: int | None = None  # clocks
    event_id: str | None = None  # facts
    origin: str | None = None  # facts: "topic:partition:offset" in the input log
    routing: Routing = field(default_factory=Routing)
    checkpoint: Mapping[str, object] | None = None  # the sequencer's, on a batch's last fact
    source: int | None = None  # decisions and progress: the workload partition
    order: tuple[int, str, int] | None = None  # decisions: their place (core.Ordered)

    def encode(self) -> tuple[tuple[str, bytes], ...]:
        out: list[tuple[str, bytes]] = [
            ("k", _KIND_CODE[self.kind]),
            ("p", str(self.position).encode()),
        ]
        if self.clock_us is not None:
            out.append(("t", str(self.clock_us).encode()))
        if self.event_id is not None:
            out.append(("e", self.event_id.encode()))
        if self.origin is not None:
            out.append(("o", self.origin.encode()))
        r = self.routing
        if r.pool is not None:
            out.append(("rp", r.pool.encode()))
        if r.workload is not None:
            out.append(("rw", r.workload.encode()))
        if r.scorer:
            out.append(("rs", b"1"))
        if self.checkpoint is not None:
            out.append(("m", json.dumps(self.checkpoint, sort_keys=True).encode()))
        if self.source is not None:
            out.append(("s", str(self.source).encode()))
        if self.order is not None:
            out.append(("q", json.dumps(list(self.order)).encode()))
        return tuple(out)

    @classmethod
    def decode(cls, headers: Mapping[str, bytes]) -> Header:
        def num(name: str) -> int | None:
            raw = headers.get(name)
            return None if raw is None else int(raw)

        def text(name: str) -> str | None:
            raw = headers.get(name)
            return None if raw is None else raw.decode()

        code = headers.get("k")
        position = num("p")
        if code not in _CODE_KIND or position is None:
            raise ValueError(f"not a runtime record: headers {sorted(headers)}")
        raw_checkpoint = headers.get("m")
        raw_order = headers.get("q")
        order = None
        if raw_order is not None:
            due, key, index = json.loads(raw_order)
            order = (int(due), str(key), int(index))
        return cls(
            kind=_CODE_KIND[code],
            position=position,
            clock_us=num("t"),
            event_id=text("e"),
            origin=text("o"),
            routing=Routing(text("rp"), text("rw"), headers.get("rs") == b"1"),
            checkpoint=None if raw_checkpoint is None else json.loads(raw_checkpoint),
            source=num("s"),
            order=order,
        )
