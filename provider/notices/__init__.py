"""The provider side of the notice path (ADR-17): the relay publisher and the metadata endpoint,
over one JSON shape of notices and advisories (see docs/providers.md). The node agent's side,
the de-duplicating subscriber and the metadata poll, is `agent.intake`."""

from provider.notices.metadata import MetadataServer, NoticeBoard
from provider.notices.relay import NoticeRelay, RelayUnavailableError
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
    "MetadataServer",
    "Notice",
    "NoticeBoard",
    "NoticeFormatError",
    "NoticeRelay",
    "ReclaimAdvisory",
    "RelayUnavailableError",
    "advisory_subject",
    "message_from_json",
    "notice_subject",
]
