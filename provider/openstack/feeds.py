"""The provider feeds the private cloud team builds to the provider contract (ADR-05).

These are not upstream OpenStack: their REST shape is spotcap's, written down in
docs/providers.md, and served under a configurable endpoint, authenticated by the same Keystone
token as every other call. Rate cards and forward forecasts come back as the event payloads they
become (``schemas.events.RateCard``, ``ForwardCapacity``), so nothing is defined twice; notices
and advisories in the JSON shape of the notice path (``provider.notices``).

    GET  /v1/rate-cards[?pool_id=P]     the current rate card of every pool
    GET  /v1/forward-capacity           the current forecast of every pool
    GET  /v1/notices?after=C&limit=N    notices and advisories issued after cursor C
    POST /v1/reclaim                    reclaim an instance through the provider's path (ADR-33)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeAlias, TypeGuard, TypeVar, get_args

from keystoneauth1.adapter import Adapter
from keystoneauth1.session import Session

from provider.base import MIN_NOTICE_S, NoticeTooShortError, ReclaimRequest, ReclaimScheduled
from provider.openstack._calls import raise_for_response, translated
from provider.openstack.budget import Acquire, unbounded
from provider.openstack.errors import FeedFormatError
from schemas.events import ForwardCapacity, PurchaseModel, RateCard
from schemas.notices import Message, NoticeFormatError, message_from_json

_PURCHASE_MODELS = frozenset(get_args(PurchaseModel))

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class FeedSnapshot(Generic[T]):
    """What a feed published, and when (the events' occurred_at)."""

    published_at_us: int
    items: tuple[T, ...]


@dataclass(frozen=True, slots=True)
class UnreadNotice:
    """An element of a notice page that is not a notice or advisory spotcap can read.

    ``not_ours`` marks a notice that reads in every field but an empty or missing
    ``workload_id``: the feed's notice of a server spotcap did not launch (no
    ``spotcap.io/workload`` tag), which is not spotcap's to act on rather than a broken element.
    """

    raw: bytes
    """The element's JSON, compact."""
    event_id: str | None
    """The element's ``event_id`` if it has a string one, to name it in errors."""
    reason: str
    """What is wrong with it, naming the field."""
    error_class: str
    """The error's class, e.g. 'schemas.notices.NoticeFormatError'."""
    not_ours: bool = False


NoticeElement: TypeAlias = Message | UnreadNotice


@dataclass(frozen=True, slots=True)
class NoticePage:
    """The elements of one page in issue order, and the cursor to ask for the next ones.

    A page that breaks the feed's shape (not JSON, no ``notices`` list, no ``cursor``) is refused
    whole (`FeedFormatError`); an element that cannot be read is kept in its place as an
    `UnreadNotice`, so the good elements of the page are not held back by it.
    """

    elements: tuple[NoticeElement, ...]
    cursor: str

    @property
    def messages(self) -> tuple[Message, ...]:
        """The elements that read as notices or advisories."""
        return tuple(e for e in self.elements if not isinstance(e, UnreadNotice))

    @property
    def unread(self) -> tuple[UnreadNotice, ...]:
        """The elements that did not."""
        return tuple(e for e in self.elements if isinstance(e, UnreadNotice))


class ProviderFeeds:
    """Client of the rate-card, forward-capacity, notice and reclaim feeds."""

    def __init__(
        self,
        session: Session,
        endpoint: str,
        acquire: Acquire = unbounded,
        *,
        timeout_s: float = 30.0,
    ) -> None:
        self._adapter = Adapter(session=session, endpoint_override=endpoint.rstrip("/"))
        self._endpoint = endpoint
        self._acquire = acquire
        self._timeout_s = timeout_s

    def rate_cards(self, pool_id: str | None = None) -> FeedSnapshot[RateCard]:
        call, target = "feed.rate_cards", f"pool {pool_id}" if pool_id else "all pools"
        body = self._get(call, target, "/v1/rate-cards", {"pool_id": pool_id} if pool_id else {})
        items = _list(call, body, "rate_cards")
        cards = []
        for item in items:
            model = _field(call, item, "purchase_model", str)
            if not _is_purchase_model(model):
                raise FeedFormatError(call, f"purchase_model {model!r} is not one of spotcap's")
            cards.append(
                RateCard(
                    pool_id=_field(call, item, "pool_id", str),
                    purchase_model=model,
                    price_per_vcpu_h_eur_micros=_field(
                        call, item, "price_per_vcpu_h_eur_micros", int
                    ),
                    guaranteed_price_per_vcpu_h_eur_micros=_field(
                        call, item, "guaranteed_price_per_vcpu_h_eur_micros", int
                    ),
                    valid_from_at=_field(call, item, "valid_from_at", int),
                    valid_until_at=_field(call, item, "valid_until_at", int),
                )
            )
        return FeedSnapshot(_field(call, body, "published_at", int), tuple(cards))

    def forward_capacity(self) -> FeedSnapshot[ForwardCapacity]:
        call = "feed.forward_capacity"
        body = self._get(call, "all pools", "/v1/forward-capacity", {})
        forecasts = tuple(
            ForwardCapacity(
                pool_id=_field(call, item, "pool_id", str),
                horizon_s=_field(call, item, "horizon_s", int),
                available_vcpu=_field(call, item, "available_vcpu", int),
            )
            for item in _list(call, body, "forward_capacity")
        )
        return FeedSnapshot(_field(call, body, "published_at", int), forecasts)

    def notices(self, after: str | None = None, limit: int = 500) -> NoticePage:
        call = "feed.notices"
        query: dict[str, str | int] = {"limit": limit}
        if after is not None:
            query["after"] = after
        body = self._get(call, f"after cursor {after}", "/v1/notices", query)
        items = body.get("notices")
        if not isinstance(items, list):
            raise FeedFormatError(call, "field 'notices' must be a list")
        cursor = _field(call, body, "cursor", str)
        return NoticePage(tuple(_notice_element(item) for item in items), cursor)

    def reclaim(self, request: ReclaimRequest) -> ReclaimScheduled:
        """Ask the provider to reclaim an instance (one budget token of kind ``reclaim``).

        `NoticeTooShortError`, with nothing sent, for a notice under the contract's 120 s.
        """
        check_notice(request)
        call, target = "feed.reclaim", f"server {request.instance_id}"
        body = {
            "instance_id": request.instance_id,
            "notice_s": request.notice_s,
            "advisory_lead_s": request.advisory_lead_s,
            "correlation_id": request.correlation_id,
        }
        self._acquire("reclaim")
        with translated(call, target):
            response = self._adapter.post(
                "/v1/reclaim", json=body, raise_exc=False, timeout=self._timeout_s
            )
        raise_for_response(call, target, response)
        try:
            data = response.json()
        except ValueError as exc:
            raise FeedFormatError(call, "the body is not JSON") from exc
        reclaim = _object(call, _object(call, data).get("reclaim"))
        correlation = reclaim.get("correlation_id")
        return ReclaimScheduled(
            instance_id=_field(call, reclaim, "instance_id", str),
            notice_at=_field(call, reclaim, "notice_at", int),
            deadline_at=_field(call, reclaim, "deadline_at", int),
            correlation_id=correlation if isinstance(correlation, str) else None,
        )

    def _get(
        self, call: str, target: str, path: str, query: Mapping[str, str | int]
    ) -> Mapping[str, Any]:
        with translated(call, target):
            response = self._adapter.get(
                path, params=dict(query), raise_exc=False, timeout=self._timeout_s
            )
        raise_for_response(call, target, response)
        try:
            data = response.json()
        except ValueError as exc:
            raise FeedFormatError(call, "the body is not JSON") from exc
        return _object(call, data)


def check_notice(request: ReclaimRequest) -> None:
    """`NoticeTooShortError` for a reclaim asking less than the contract's 120 s of notice."""
    if request.notice_s < MIN_NOTICE_S:
        raise NoticeTooShortError(
            f"a notice of {request.notice_s} s for server {request.instance_id} breaks the "
            f"provider contract (>= {MIN_NOTICE_S} s)"
        )


def _notice_element(item: Any) -> NoticeElement:
    """One element of a notice page: the message it reads as, or why it does not."""
    raw = json.dumps(item, separators=(",", ":"), sort_keys=True, default=repr).encode()
    event_id = item.get("event_id") if isinstance(item, Mapping) else None
    named = event_id if isinstance(event_id, str) else None
    try:
        return message_from_json(item if isinstance(item, Mapping) else raw)
    except NoticeFormatError as exc:
        error = f"{type(exc).__module__}.{type(exc).__qualname__}"
        not_ours = False
        if isinstance(item, Mapping) and item.get("kind") == "notice":
            workload = item.get("workload_id")
            if workload is None or workload == "":
                try:  # everything else reads: a notice of a server spotcap did not launch
                    message_from_json({**item, "workload_id": "-"})
                    not_ours = True
                except NoticeFormatError:
                    pass
        return UnreadNotice(raw, named, str(exc), error, not_ours)


def _is_purchase_model(value: str) -> TypeGuard[PurchaseModel]:
    return value in _PURCHASE_MODELS


def _object(call: str, data: Any) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise FeedFormatError(call, f"expected a JSON object, got {type(data).__name__}")
    return data


def _list(call: str, body: Mapping[str, Any], name: str) -> list[Mapping[str, Any]]:
    items = body.get(name)
    if not isinstance(items, list):
        raise FeedFormatError(call, f"field {name!r} must be a list")
    return [_object(call, item) for item in items]


def _field(call: str, obj: Mapping[str, Any], name: str, kind: type[T]) -> T:
    value = obj.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise FeedFormatError(call, f"field {name!r} must be {kind.__name__}, got {value!r}")
    return value
