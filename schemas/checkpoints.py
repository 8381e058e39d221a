"""What travels between a node's agent and the workloads on it about checkpoints (ADR-18).

Workloads never call the control plane: the checkpoint client talks to the agent on its own
node over a Unix socket (``SPOTCAP_CHECKPOINT_SOCKET``, by default
``/run/spotcap/checkpoint.sock``), one JSON object per line, in both directions:

* the client says ``hello`` (workload, unit, pid) when it connects; the agent answers
  ``welcome`` with what its signed bundle says (checkpoint method, drain budget, restart
  semantics), so the client acts on the same contract as the agent;
* the agent sends ``notice`` when the node is being reclaimed: the final checkpoint must be
  written before ``deadline_at_us``;
* the client reports every generation it publishes with ``written`` (``final`` for the one a
  notice asked for), a final checkpoint it could not make with ``failed``, and a unit it gave up
  on with ``quarantined`` (ADR-21).

This module is the wire model only (standard library, no I/O); the agent serves the socket
(`agent.workloads`), the checkpoint client connects to it (`checkpoint.channel`).
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass
from typing import Any, TypeAlias

__all__ = [
    "DEFAULT_SOCKET",
    "MAX_LINE_BYTES",
    "SOCKET_ENV",
    "ChannelFormatError",
    "ChannelMessage",
    "Failed",
    "Hello",
    "NoticeToWorkload",
    "Quarantined",
    "Welcome",
    "Written",
    "decode",
    "encode",
]

SOCKET_ENV = "SPOTCAP_CHECKPOINT_SOCKET"
DEFAULT_SOCKET = "/run/spotcap/checkpoint.sock"
MAX_LINE_BYTES = 4096
"""A message is a few hundred bytes; a longer line is refused unread."""


class ChannelFormatError(ValueError):
    """A line that is not one of the channel's messages; says which field and why."""


@dataclass(frozen=True, slots=True)
class Hello:
    """Client to agent, first: who is checkpointing on this node."""

    workload_id: str
    unit_id: str
    pid: int
    TYPE = "hello"


@dataclass(frozen=True, slots=True)
class Welcome:
    """Agent to client, the answer to hello: the node and its bundle's checkpoint fields (none
    when the node holds no valid bundle)."""

    instance_id: str
    workload_id: str | None
    checkpoint_method: str | None
    drain_budget_s: int | None
    restart_semantics: str | None
    TYPE = "welcome"


@dataclass(frozen=True, slots=True)
class NoticeToWorkload:
    """Agent to client: write the final checkpoint now, before `deadline_at_us`."""

    cause_event_id: str
    deadline_at_us: int
    seconds_left: float
    TYPE = "notice"


@dataclass(frozen=True, slots=True)
class Written:
    """Client to agent: a generation was published (its manifest written)."""

    unit_id: str
    generation: int
    step: int
    written_bytes: int
    duration_s: float
    final: bool
    cause_event_id: str | None = None
    """The notice a final checkpoint answers."""
    TYPE = "written"


@dataclass(frozen=True, slots=True)
class Failed:
    """Client to agent: the final checkpoint a notice asked for could not be written."""

    unit_id: str
    detail: str
    cause_event_id: str | None = None
    TYPE = "failed"


@dataclass(frozen=True, slots=True)
class Quarantined:
    """Client to agent: the unit failed too often after restores and is not run again."""

    unit_id: str
    failed_restores: int
    detail: str
    TYPE = "quarantined"


ChannelMessage: TypeAlias = Hello | Welcome | NoticeToWorkload | Written | Failed | Quarantined
_TYPES: dict[str, type[ChannelMessage]] = {
    kind.TYPE: kind for kind in (Hello, Welcome, NoticeToWorkload, Written, Failed, Quarantined)
}
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (float, int),
    "bool": (bool,),
    "str | None": (str, type(None)),
    "int | None": (int, type(None)),
}


def encode(message: ChannelMessage) -> bytes:
    """One line of JSON, newline-terminated."""
    return json.dumps({"type": message.TYPE, **asdict(message)}, sort_keys=True).encode() + b"\n"


def decode(line: bytes) -> ChannelMessage:
    """The message on one line; `ChannelFormatError` says why a line is not one."""
    if len(line) > MAX_LINE_BYTES:
        raise ChannelFormatError(f"a line of {len(line)} bytes (at most {MAX_LINE_BYTES})")
    try:
        data: Any = json.loads(line)
    except ValueError as error:
        raise ChannelFormatError(f"not JSON: {error}") from None
    if not isinstance(data, dict):
        raise ChannelFormatError("not a JSON object")
    kind = _TYPES.get(str(data.pop("type", "")))
    if kind is None:
        raise ChannelFormatError(f"unknown message type {data.get('type')!r}")
    fields = kind.__dataclass_fields__
    unknown = set(data) - set(fields)
    if unknown:
        raise ChannelFormatError(f"{kind.TYPE}: unknown field {sorted(unknown)[0]!r}")
    for name, spec in fields.items():
        if name not in data:
            if spec.default is not MISSING:
                continue
            raise ChannelFormatError(f"{kind.TYPE}: {name} is missing")
        allowed = _FIELD_TYPES[str(spec.type)]
        value = data[name]
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            raise ChannelFormatError(f"{kind.TYPE}: {name} has the wrong type")
    return kind(**data)
