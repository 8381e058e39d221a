"""The intake's memory is the log: the claims it opened and released, read back at start.

The demand topic is read from its beginning to the end it had when reading began (retention:
400 days); only claims under the intake's own prefixes count (a pod's or a job's claim, not the
simulator's). Nothing else is kept between runs, so a restart, a crash or a second machine
taking over all start from what the log holds: what was acknowledged there before a crash is
in the book, what was not will be written again, under the same event ids.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from schemas.codec import Codec
from schemas.events import CapacityClaimOpened, CapacityReleased
from streams.browse import Undecodable, Wanted, browse
from streams.intake.claims import Book
from streams.log import EventLog
from streams.topics import topic_name

log = logging.getLogger(__name__)


def read_book(log_: EventLog, codec: Codec, region: str, prefixes: Sequence[str]) -> Book:
    """The book of the claims under `prefixes` that the region's demand topic holds."""
    book = Book()
    topic = topic_name(region, CapacityClaimOpened.TOPIC)
    for item in browse(log_, codec, topic, region, Wanted()):
        if isinstance(item, Undecodable):
            log.warning("demand topic: %s cannot be read (%s); skipped", item.where, item.reason)
            continue
        payload = item.envelope.payload
        if isinstance(payload, CapacityClaimOpened | CapacityReleased) and any(
            payload.claim_id.startswith(p) for p in prefixes
        ):
            book.apply(item.envelope)
    return book
