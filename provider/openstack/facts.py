"""The provider feeds' facts as envelopes, each fact once, with ids that do not change on re-read.

`poll_events` (``provider.openstack.provider``) reads the feeds through `FeedFacts`, which keeps
a `FeedPosition`: the notice feed's own cursor, and the ``published_at`` of the last rate-card and
forward-capacity snapshots taken. A snapshot no newer than the last one taken yields nothing; a
notice page starts after the cursor. The position moves only once a page's or snapshot's
envelopes are in the caller's hands, so a failed read loses nothing and repeats nothing.

Event ids come from the feed's own identities, never from a random draw, so two readers of the
same feed (a restarted adapter, a second region process) produce the same ids and the log's
consumers, idempotent on ``event_id``, keep one copy:

- a rate card of the snapshot published at P: ``rate_card``, id
  ``derived_event_id("openstack:<region>:rate-cards@<P>", "rate_card", <pool_id>)``,
  occurred at P;
- a forecast of the snapshot published at P: ``forward_capacity``, id
  ``derived_event_id("openstack:<region>:forward-capacity@<P>", "forward_capacity",
  "<pool_id>/<horizon_s>")``, occurred at P;
- a notice: ``notice_received``, id the notice's own ``event_id``, occurred at its ``issued_at``;
- an advisory: ``advisory``, id the advisory's own ``event_id``, occurred at its ``issued_at``.

An element of a notice page that cannot be taken (it does not read, is for another region, or its
id is not a UUID) is data, not a stop: it comes out in its place as ``dead_lettered`` (origin
topic ``openstack-feed:notices``, partition 0, offset its index in the page, the element's JSON
as the raw value), id ``derived_event_id("openstack:<region>:notices@<cursor>", "dead_lettered",
"<index>")`` where cursor is the one the page was asked after (``start`` for none), and the cursor
moves past it. A notice naming no workload is a server spotcap did not launch: it is skipped and
counted (`FeedFacts.not_ours`). Only a page that breaks the feed's shape holds the cursor.

A notice keeps its own id (a UUID, checked) because that id *is* the notice on every channel:
the node agent reads the same notice from NATS or the metadata endpoint under the same
``event_id`` (ADR-17, ``provider.notices``), so both copies in the log are one event. A
``notice_received`` from the feed says ``source="metadata"``: the feed, like the metadata
endpoint, is the provider's HTTP answer, and the schema has no third channel.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

from provider.openstack.errors import FeedFormatError
from provider.openstack.feeds import ProviderFeeds, UnreadNotice
from schemas.events import Advisory, DeadLettered, Envelope, NoticeReceived, Payload
from schemas.ids import derived_event_id
from schemas.notices import Message, Notice

log = logging.getLogger(__name__)

PRODUCER = "provider/openstack"

NOTICE_FEED_TOPIC = "openstack-feed:notices"
"""The ``origin_topic`` of a notice-feed element's ``dead_lettered`` event."""

Clock = Callable[[], int]
"""Microseconds since the epoch, UTC."""


@dataclass(frozen=True, slots=True)
class FeedPosition:
    """How far the feeds have been read. Persist it and pass it back to resume without repeats
    (without it, a restarted adapter re-reads the current snapshots and the oldest kept notices:
    the same facts under the same ids, so the log's consumers drop them)."""

    notices_after: str | None = None
    """The notice feed's cursor; None starts at the oldest notice the feed keeps."""
    rate_cards_published_at: int | None = None
    forward_capacity_published_at: int | None = None


def envelope(
    payload: Payload,
    *,
    event_id: str,
    occurred_at: int,
    recorded_at: int,
    region: str,
    causation_id: str | None = None,
    correlation_id: str | None = None,
) -> Envelope:
    """The adapter's envelope around ``payload`` (producer ``provider/openstack``)."""
    return Envelope(
        event_id=event_id,
        event_type=payload.EVENT_TYPE,
        occurred_at=occurred_at,
        recorded_at=recorded_at,
        region=region,
        key=getattr(payload, payload.KEY),
        causation_id=causation_id,
        correlation_id=correlation_id,
        producer=PRODUCER,
        payload=payload,
    )


class FeedFacts:
    """Reads the feeds from a position; each read appends new envelopes to ``into``."""

    def __init__(
        self,
        feeds: ProviderFeeds,
        region: str,
        clock: Clock,
        position: FeedPosition | None = None,
        *,
        page_size: int = 500,
    ) -> None:
        self._feeds = feeds
        self._region = region
        self._clock = clock
        self.position = position or FeedPosition()
        self._page_size = page_size
        self.not_ours = 0
        """Notices skipped because they name no workload: servers spotcap did not launch."""

    def notices(self, into: list[Envelope], wanted: int) -> None:
        """Notice pages after the cursor until a short page or ``wanted`` envelopes.

        An element that cannot be taken comes out as a ``dead_lettered`` envelope in its place and
        the cursor moves past it; a notice of a server spotcap did not launch is counted in
        `not_ours` and skipped. Only a page that breaks the feed's shape holds the cursor.
        """
        call = "feed.notices"
        added = 0
        while added < wanted:
            after = self.position.notices_after
            page = self._feeds.notices(after, self._page_size)
            fresh: list[Envelope] = []
            skipped = 0
            for index, element in enumerate(page.elements):
                if isinstance(element, UnreadNotice):
                    if element.not_ours:
                        log.debug(
                            "notice feed: skipped notice %s after cursor %r (element %d): no "
                            "workload, a server spotcap did not launch",
                            element.event_id,
                            after,
                            index,
                        )
                        skipped += 1
                        continue
                    fresh.append(self._dead_letter(after, index, element))
                    continue
                try:
                    fresh.append(self._message(call, element))
                except FeedFormatError as exc:
                    unread = UnreadNotice(
                        element.to_json(),
                        element.event_id,
                        str(exc),
                        f"{type(exc).__module__}.{type(exc).__qualname__}",
                    )
                    fresh.append(self._dead_letter(after, index, unread))
            into.extend(fresh)
            added += len(fresh)
            self.not_ours += skipped
            self.position = replace(self.position, notices_after=page.cursor)
            if len(page.elements) < self._page_size or page.cursor == after:
                return

    def rate_cards(self, into: list[Envelope]) -> None:
        snapshot = self._feeds.rate_cards()
        last = self.position.rate_cards_published_at
        if last is not None and snapshot.published_at_us <= last:
            return
        at = snapshot.published_at_us
        cause = f"openstack:{self._region}:rate-cards@{at}"
        recorded = self._clock()
        into.extend(
            envelope(
                card,
                event_id=derived_event_id(cause, card.EVENT_TYPE, card.pool_id),
                occurred_at=at,
                recorded_at=recorded,
                region=self._region,
            )
            for card in snapshot.items
        )
        self.position = replace(self.position, rate_cards_published_at=at)

    def forward_capacity(self, into: list[Envelope]) -> None:
        snapshot = self._feeds.forward_capacity()
        last = self.position.forward_capacity_published_at
        if last is not None and snapshot.published_at_us <= last:
            return
        at = snapshot.published_at_us
        cause = f"openstack:{self._region}:forward-capacity@{at}"
        recorded = self._clock()
        into.extend(
            envelope(
                forecast,
                event_id=derived_event_id(
                    cause, forecast.EVENT_TYPE, f"{forecast.pool_id}/{forecast.horizon_s}"
                ),
                occurred_at=at,
                recorded_at=recorded,
                region=self._region,
            )
            for forecast in snapshot.items
        )
        self.position = replace(self.position, forward_capacity_published_at=at)

    def _dead_letter(self, after: str | None, index: int, element: UnreadNotice) -> Envelope:
        """The ``dead_lettered`` event of element ``index`` of the page after cursor ``after``.

        Its id comes from the cursor and the index, so re-reading the page gives the same id."""
        cursor = "start" if after is None else after
        named = "without an event_id" if element.event_id is None else repr(element.event_id)
        reason = (
            f"notice feed (GET /v1/notices after cursor {cursor}): element {index} "
            f"(event_id {named}) refused: {element.reason}"
        )
        log.warning("%s", reason)
        now = self._clock()
        return envelope(
            DeadLettered(
                origin_topic=NOTICE_FEED_TOPIC,
                origin_partition=0,
                origin_offset=index,
                processor=PRODUCER,
                error_class=element.error_class,
                reason=reason,
                raw_value=element.raw,
            ),
            event_id=derived_event_id(
                f"openstack:{self._region}:notices@{cursor}", DeadLettered.EVENT_TYPE, str(index)
            ),
            occurred_at=now,
            recorded_at=now,
            region=self._region,
        )

    def _message(self, call: str, message: Message) -> Envelope:
        if message.region != self._region:
            raise FeedFormatError(
                call, f"{message.event_id} is for region {message.region!r}, not {self._region!r}"
            )
        try:
            event_id = str(uuid.UUID(message.event_id))
        except ValueError as exc:
            raise FeedFormatError(call, f"event_id {message.event_id!r} is not a UUID") from exc
        payload: Payload
        if isinstance(message, Notice):
            payload = NoticeReceived(
                instance_id=message.instance_id,
                pool_id=message.pool_id,
                workload_id=message.workload_id,
                deadline_at=message.deadline_at_us,
                source="metadata",
            )
        else:
            payload = Advisory(
                instance_id=message.instance_id,
                pool_id=message.pool_id,
                expected_reclaim_at=message.expected_reclaim_at_us,
            )
        return envelope(
            payload,
            event_id=event_id,
            occurred_at=message.issued_at_us,
            recorded_at=self._clock(),
            region=self._region,
        )
