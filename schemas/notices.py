"""What travels on the notice path: notices, advisories, their JSON and their NATS subjects.

One JSON shape serves every channel (the NATS relay, the metadata endpoint and the provider's
notice feed), so a notice read from any of them is the same value and is recognised by its
``event_id`` when it comes twice (ADR-17). Times are integer microseconds since the epoch, UTC.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from schemas.events import Advisory, Envelope, NoticeReceived, NoticeSource

__all__ = [
    "MAX_MESSAGE_BYTES",
    "Delivery",
    "Message",
    "Notice",
    "NoticeFormatError",
    "ReclaimAdvisory",
    "advisory_subject",
    "message_from_json",
    "notice_subject",
]

MAX_MESSAGE_BYTES = 4096
"""A notice is a few hundred bytes; anything larger is refused unread."""

_SUBJECT_FORBIDDEN = frozenset(".*> \t\r\n")


class NoticeFormatError(ValueError):
    """A notice or advisory could not be read: says which field and why."""


def _token(what: str, value: str) -> str:
    if not value or any(c in _SUBJECT_FORBIDDEN for c in value):
        raise ValueError(f"{what} {value!r} cannot be a NATS subject token ('.', '*', '>', space)")
    return value


def notice_subject(region: str, instance_id: str) -> str:
    """``spotcap.<region>.notice.<instance_id>``: the hard notices of one instance."""
    return f"spotcap.{_token('region', region)}.notice.{_token('instance id', instance_id)}"


def advisory_subject(region: str, instance_id: str) -> str:
    """``spotcap.<region>.advisory.<instance_id>``: the advisories of one instance."""
    return f"spotcap.{_token('region', region)}.advisory.{_token('instance id', instance_id)}"


@dataclass(frozen=True, slots=True)
class Notice:
    """A hard reclaim notice: the provider deletes ``instance_id`` at ``deadline_at_us``."""

    event_id: str
    """The notice's event id: the de-duplication key on every channel."""
    region: str
    instance_id: str
    pool_id: str
    workload_id: str
    deadline_at_us: int
    issued_at_us: int
    """When the notice was issued (the event's occurred_at)."""

    @classmethod
    def from_event(cls, envelope: Envelope) -> Notice:
        """The notice carried by a ``notice_received`` event."""
        payload = envelope.payload
        if not isinstance(payload, NoticeReceived):
            raise TypeError(f"expected a notice_received event, got {envelope.event_type!r}")
        return cls(
            event_id=envelope.event_id,
            region=envelope.region,
            instance_id=payload.instance_id,
            pool_id=payload.pool_id,
            workload_id=payload.workload_id,
            deadline_at_us=payload.deadline_at,
            issued_at_us=envelope.occurred_at,
        )

    @property
    def subject(self) -> str:
        return notice_subject(self.region, self.instance_id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "notice",
            "event_id": self.event_id,
            "region": self.region,
            "instance_id": self.instance_id,
            "pool_id": self.pool_id,
            "workload_id": self.workload_id,
            "deadline_at": self.deadline_at_us,
            "issued_at": self.issued_at_us,
        }

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> Notice:
        message = message_from_json(data)
        if not isinstance(message, Notice):
            raise NoticeFormatError("expected a notice, got an advisory")
        return message


@dataclass(frozen=True, slots=True)
class ReclaimAdvisory:
    """The provider expects to reclaim ``instance_id`` around ``expected_reclaim_at_us``."""

    event_id: str
    region: str
    instance_id: str
    pool_id: str
    expected_reclaim_at_us: int
    issued_at_us: int

    @classmethod
    def from_event(cls, envelope: Envelope) -> ReclaimAdvisory:
        """The advisory carried by an ``advisory`` event."""
        payload = envelope.payload
        if not isinstance(payload, Advisory):
            raise TypeError(f"expected an advisory event, got {envelope.event_type!r}")
        return cls(
            event_id=envelope.event_id,
            region=envelope.region,
            instance_id=payload.instance_id,
            pool_id=payload.pool_id,
            expected_reclaim_at_us=payload.expected_reclaim_at,
            issued_at_us=envelope.occurred_at,
        )

    @property
    def subject(self) -> str:
        return advisory_subject(self.region, self.instance_id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "advisory",
            "event_id": self.event_id,
            "region": self.region,
            "instance_id": self.instance_id,
            "pool_id": self.pool_id,
            "expected_reclaim_at": self.expected_reclaim_at_us,
            "issued_at": self.issued_at_us,
        }

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), separators=(",", ":")).encode()


Message: TypeAlias = Notice | ReclaimAdvisory


def message_from_json(data: bytes | str | Mapping[str, Any]) -> Message:
    """A notice or advisory from its JSON (or the already-parsed object)."""
    if isinstance(data, bytes | str):
        if len(data) > MAX_MESSAGE_BYTES:
            raise NoticeFormatError(f"message of {len(data)} bytes, over {MAX_MESSAGE_BYTES}")
        try:
            parsed: Any = json.loads(data)
        except ValueError as exc:
            raise NoticeFormatError(f"not JSON: {exc}") from exc
    else:
        parsed = data
    if type(parsed) is not dict and not isinstance(parsed, Mapping):  # dict: no ABC check
        raise NoticeFormatError("not a JSON object")
    kind = parsed.get("kind")
    if kind == "notice":
        return Notice(
            event_id=_str(parsed, "event_id"),
            region=_str(parsed, "region"),
            instance_id=_str(parsed, "instance_id"),
            pool_id=_str(parsed, "pool_id"),
            workload_id=_str(parsed, "workload_id"),
            deadline_at_us=_int(parsed, "deadline_at"),
            issued_at_us=_int(parsed, "issued_at"),
        )
    if kind == "advisory":
        return ReclaimAdvisory(
            event_id=_str(parsed, "event_id"),
            region=_str(parsed, "region"),
            instance_id=_str(parsed, "instance_id"),
            pool_id=_str(parsed, "pool_id"),
            expected_reclaim_at_us=_int(parsed, "expected_reclaim_at"),
            issued_at_us=_int(parsed, "issued_at"),
        )
    raise NoticeFormatError(f"field 'kind' is {kind!r}, not 'notice' or 'advisory'")


def _str(obj: Mapping[str, Any], name: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str) or not value:
        raise NoticeFormatError(f"field {name!r} must be a non-empty string, got {value!r}")
    return value


def _int(obj: Mapping[str, Any], name: str) -> int:
    value = obj.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise NoticeFormatError(f"field {name!r} must be an integer (µs), got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Delivery:
    """A notice or advisory as a subscriber received it: first copy only."""

    message: Message
    source: NoticeSource
    """The channel that delivered it first: ``nats`` or ``metadata``."""
    received_at_us: int
