"""The notice delivery path (ADR-17): the relay publisher, the metadata endpoint and the agent's
subscriber, over one JSON shape of notices and advisories (see docs/providers.md)."""

from provider.notices.metadata import MetadataError, MetadataServer, NoticeBoard, fetch_notice
from provider.notices.relay import NoticeRelay, RelayUnavailableError
from provider.notices.subscriber import NoticeSubscriber
from schemas.notices import (
    Delivery,
    Message,
    Notice,
    NoticeFormatError,
    ReclaimAdvisory,
    advisory_subject,
    message_from_json,
    notice_subject,
)

__all__ = [
    "Delivery",
    "Message",
    "MetadataError",
    "MetadataServer",
    "Notice",
    "NoticeBoard",
    "NoticeFormatError",
    "NoticeRelay",
    "NoticeSubscriber",
    "ReclaimAdvisory",
    "RelayUnavailableError",
    "advisory_subject",
    "fetch_notice",
    "message_from_json",
    "notice_subject",
]
