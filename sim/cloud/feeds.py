"""The provider feeds the private cloud team builds to the contract (docs/providers.md), served
from the region's own facts.

    GET  /feed/v1/rate-cards[?pool_id=P]   the last rate-card round (every 5 sim minutes)
    GET  /feed/v1/forward-capacity         the last forecast round (every sim hour)
    GET  /feed/v1/notices?after=C&limit=N  every notice and advisory, in the order issued
    POST /feed/v1/reclaim                  the reclaim API (ADR-33)

A snapshot's ``published_at`` is the sim time of its round. The notice feed keeps every notice
and advisory of the run; its cursor ``c-<n>`` is the number of elements read, so a cursor stays
valid for the whole run. Each element is the notice path's JSON (`schemas.notices`), with the
id the same notice has on NATS and at the metadata endpoint. The reclaim API takes any server of
the project that is reclaimable capacity (the adapter checks the owner before it calls):
``400`` a notice under 120 s, ``403`` not reclaimable capacity, ``404`` no such server, ``409``
already on the reclaim path.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from provider.base import (
    AlreadyReclaimingError,
    NoticeTooShortError,
    NotReclaimableError,
    ReclaimRequest,
    UnknownInstanceError,
)
from schemas.events import Advisory, Envelope, ForwardCapacity, NoticeReceived, RateCard
from schemas.notices import Notice, ReclaimAdvisory
from sim.cloud.errors import CloudError, feed_error
from sim.cloud.http import Request, Response, Route, route
from sim.cloud.region import CloudRegion

_BASE = "/feed/v1"
_CURSOR = re.compile(r"^c-(\d{1,12})$")
MAX_PAGE = 1000
T = TypeVar("T")


class Feeds:
    """The last snapshots, the notice log, and the reclaim API."""

    def __init__(self, region: CloudRegion) -> None:
        self._region = region
        self._rate_cards: tuple[int, dict[str, RateCard]] | None = None  # none published yet
        self._forecasts: tuple[int, list[ForwardCapacity]] | None = None
        self.notices: list[dict[str, Any]] = []
        region.on(RateCard.EVENT_TYPE, self._rate_card)
        region.on(ForwardCapacity.EVENT_TYPE, self._forecast)
        region.on(NoticeReceived.EVENT_TYPE, self._notice)
        region.on(Advisory.EVENT_TYPE, self._notice)

    def routes(self) -> list[Route]:
        return [
            route("GET", f"{_BASE}/rate-cards", self._get_rate_cards),
            route("GET", f"{_BASE}/forward-capacity", self._get_forecasts),
            route("GET", f"{_BASE}/notices", self._get_notices),
            route("POST", f"{_BASE}/reclaim", self._reclaim),
        ]

    # -- what the region publishes --------------------------------------------------------------

    def _rate_card(self, envelope: Envelope) -> None:
        card = envelope.payload
        assert isinstance(card, RateCard)
        if self._rate_cards is None or envelope.occurred_at != self._rate_cards[0]:  # a new round
            self._rate_cards = (envelope.occurred_at, {})
        self._rate_cards[1][card.pool_id] = card

    def _forecast(self, envelope: Envelope) -> None:
        forecast = envelope.payload
        assert isinstance(forecast, ForwardCapacity)
        if self._forecasts is None or envelope.occurred_at != self._forecasts[0]:
            self._forecasts = (envelope.occurred_at, [])
        self._forecasts[1].append(forecast)

    def _notice(self, envelope: Envelope) -> None:
        if isinstance(envelope.payload, NoticeReceived):
            self.notices.append(Notice.from_event(envelope).to_dict())
        else:
            self.notices.append(ReclaimAdvisory.from_event(envelope).to_dict())

    # -- the API ------------------------------------------------------------------------------

    def _get_rate_cards(self, request: Request, match: Any) -> Response:
        at, cards = _published(self._rate_cards, "rate card")
        pool_id = request.param("pool_id")
        if pool_id is not None and pool_id not in self._region.sim.catalogue:
            raise feed_error(404, "unknown_pool", f"no pool {pool_id!r} in this region")
        chosen = [cards[pool_id]] if pool_id in cards else [] if pool_id else list(cards.values())
        items = [
            {
                "pool_id": c.pool_id,
                "purchase_model": c.purchase_model,
                "price_per_vcpu_h_eur_micros": c.price_per_vcpu_h_eur_micros,
                "guaranteed_price_per_vcpu_h_eur_micros": c.guaranteed_price_per_vcpu_h_eur_micros,
                "valid_from_at": c.valid_from_at,
                "valid_until_at": c.valid_until_at,
            }
            for c in chosen
        ]
        return Response(200, {"published_at": at, "rate_cards": items})

    def _get_forecasts(self, request: Request, match: Any) -> Response:
        at, forecasts = _published(self._forecasts, "forecast")
        items = [
            {"pool_id": f.pool_id, "horizon_s": f.horizon_s, "available_vcpu": f.available_vcpu}
            for f in forecasts
        ]
        return Response(200, {"published_at": at, "forward_capacity": items})

    def _get_notices(self, request: Request, match: Any) -> Response:
        after = request.param("after")
        start = 0
        if after is not None:
            found = _CURSOR.match(after)
            if found is None or int(found.group(1)) > len(self.notices):
                raise feed_error(400, "bad_cursor", f"cursor {after!r} was not given by this feed")
            start = int(found.group(1))
        try:
            limit = min(MAX_PAGE, max(1, int(request.param("limit") or 500)))
        except ValueError:
            raise feed_error(400, "bad_limit", "limit must be an integer") from None
        page = self.notices[start : start + limit]
        return Response(200, {"cursor": f"c-{start + len(page):06d}", "notices": page})

    def _reclaim(self, request: Request, match: Any) -> Response:
        body = request.json(lambda why: feed_error(400, "bad_request", why))
        if not isinstance(body, dict) or not isinstance(body.get("instance_id"), str):
            raise feed_error(400, "bad_request", "a reclaim names its 'instance_id'")
        notice_s, lead_s = body.get("notice_s", 120), body.get("advisory_lead_s")
        correlation = body.get("correlation_id")
        if not _seconds(notice_s) or not (lead_s is None or _seconds(lead_s)):
            raise feed_error(400, "bad_request", "notice_s and advisory_lead_s are seconds")
        if correlation is not None and not isinstance(correlation, str):
            raise feed_error(400, "bad_request", "correlation_id is a string")
        reclaim = ReclaimRequest(body["instance_id"], notice_s, lead_s or None, correlation)
        try:
            scheduled = self._region.sim.provider.schedule_reclaim(reclaim)
        except UnknownInstanceError as error:
            raise _answer(404, "unknown_instance", error) from None
        except NotReclaimableError as error:
            raise _answer(403, "not_reclaimable", error) from None
        except NoticeTooShortError as error:
            raise _answer(400, "notice_too_short", error) from None
        except AlreadyReclaimingError as error:
            raise _answer(409, "already_reclaiming", error) from None
        return Response(
            202,
            {
                "reclaim": {
                    "instance_id": scheduled.instance_id,
                    "notice_at": scheduled.notice_at,
                    "deadline_at": scheduled.deadline_at,
                    "correlation_id": scheduled.correlation_id,
                }
            },
        )


def _published(snapshot: tuple[int, T] | None, what: str) -> tuple[int, T]:
    if snapshot is None:  # the sim's first microsecond: its first round has not run yet
        raise feed_error(503, "not_yet_published", f"no {what} round has been published yet")
    return snapshot


def _seconds(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _answer(status: int, code: str, error: Exception) -> CloudError:
    return feed_error(status, code, str(error))
