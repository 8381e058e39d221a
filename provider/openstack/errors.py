"""Typed errors of the OpenStack adapter, all of them `provider.base.ProviderError`s.

Every failed call names the call (``nova.delete_server``), what it was about (a server, a pool, a
resource provider, a lease) and the HTTP status, so that the actuator can decide (retry, give up,
trip a breaker) and the ``launch_failed`` event can say why in words.

The class says the HTTP status (`NotFoundError` is a 404, whatever was missing); where a status
means one of the seam's own errors for the call that got it, the error is also that seam error,
so a caller written against `provider.base` needs nothing from here:

- 404 on a server (``nova.get_server``, ``nova.delete_server``, ``feed.reclaim``):
  `InstanceNotFoundError`, also an `UnknownInstanceError`;
- 403 "Quota exceeded" (Nova's quota answer): `QuotaExceededError`, also a
  `CapacityUnavailableError`;
- 409 "not enough resources" / "no valid host" on a create (``nova.create_server``,
  ``blazar.create_lease``): `NoCapacityError`, also a `CapacityUnavailableError`;
- 409 on ``feed.reclaim`` (already on the reclaim path): `ReclaimConflictError`, also an
  `AlreadyReclaimingError`.

Refusals decided before any mutating request (not ours, not reclaimable, notice too short,
unknown pool) are the seam's errors themselves.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from provider.base import (
    AlreadyReclaimingError,
    CapacityUnavailableError,
    ProviderError,
    UnknownInstanceError,
)


class OpenStackCallError(ProviderError):
    """An OpenStack (or provider feed) call failed.

    ``call`` names the API call (``nova.create_server``), ``target`` what it was about
    (``server 9b1f... in pool c3.8.hall2.reclaimable``), ``status`` the HTTP status (None when no
    response came back), ``detail`` the service's own message. ``retryable`` (from
    `ProviderError`) says whether the same call may succeed later without a change on our side.
    """

    def __init__(
        self,
        call: str,
        target: str,
        status: int | None,
        detail: str,
        *,
        request_id: str | None = None,
    ) -> None:
        status_text = "no response" if status is None else f"HTTP {status}"
        message = f"{call} ({target}): {status_text}: {detail}"
        if request_id:
            message += f" [request {request_id}]"
        super().__init__(message)
        self.call = call
        self.target = target
        self.status = status
        self.detail = detail
        self.request_id = request_id


class BadRequestError(OpenStackCallError):
    """HTTP 400: the request was malformed or invalid (a bug or a bad pool mapping)."""


class UnauthorizedError(OpenStackCallError):
    """HTTP 401: the credentials were refused (expired application credential, ADR-29)."""


class ForbiddenError(OpenStackCallError):
    """HTTP 403: not allowed (policy, outside the exercise window)."""


class QuotaExceededError(ForbiddenError, CapacityUnavailableError):
    """HTTP 403 "Quota exceeded": the project may not grow now; retry after instances go."""

    retryable = True


class NotFoundError(OpenStackCallError):
    """HTTP 404: the resource provider, lease or feed path does not exist."""


class InstanceNotFoundError(NotFoundError, UnknownInstanceError):
    """HTTP 404 on a server: it does not exist (or is already gone)."""


class ConflictError(OpenStackCallError):
    """HTTP 409: the resource is in a state that forbids the call now (task state, generation)."""

    retryable = True


class NoCapacityError(ConflictError, CapacityUnavailableError):
    """HTTP 409 on a create because the cloud has no room (Blazar: not enough resources)."""

    retryable = True


class ReclaimConflictError(ConflictError, AlreadyReclaimingError):
    """HTTP 409 from the reclaim API: the instance is already being reclaimed."""

    retryable = False


class OverLimitError(OpenStackCallError):
    """HTTP 413 or 429: the service's own rate limit."""

    retryable = True


class ServiceError(OpenStackCallError):
    """HTTP 5xx: the service failed."""

    retryable = True


class UnavailableError(OpenStackCallError):
    """No HTTP response: connection refused, reset or timed out."""

    retryable = True


class MappingMismatchError(ProviderError):
    """The pool mapping names a flavor Nova does not have, or one whose vCPU is not the pool's
    size (``provider.openstack.mapping``): fix the mapping file; retrying will not help."""


class FeedFormatError(ProviderError):
    """A provider feed answered with a body that breaks its documented shape (docs/providers.md)."""

    def __init__(self, call: str, what: str) -> None:
        super().__init__(f"{call}: response breaks the provider contract: {what}")
        self.call = call


_BY_STATUS: dict[int, type[OpenStackCallError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    413: OverLimitError,
    429: OverLimitError,
}

# The calls whose target is one server, and the calls that create capacity.
_SERVER_CALLS = frozenset({"nova.get_server", "nova.delete_server", "feed.reclaim"})
_CREATE_CALLS = frozenset({"nova.create_server", "blazar.create_lease"})
# How Nova and Blazar word "no room" (Blazar: NotEnoughResourcesAvailable; Nova: NoValidHost).
_NO_ROOM = ("not enough resources", "no valid host", "insufficient capacity")


def error_for_status(
    call: str, target: str, status: int | None, detail: str, *, request_id: str | None = None
) -> OpenStackCallError:
    """The typed error for ``call``'s HTTP status (None: no response) and the service's words."""
    words = detail.lower()
    cls: type[OpenStackCallError]
    if status is None:
        cls = UnavailableError
    elif status >= 500:
        cls = ServiceError
    elif status == 403 and "quota exceeded" in words:
        cls = QuotaExceededError
    elif status == 404 and call in _SERVER_CALLS:
        cls = InstanceNotFoundError
    elif status == 409 and call in _CREATE_CALLS and any(w in words for w in _NO_ROOM):
        cls = NoCapacityError
    elif status == 409 and call == "feed.reclaim":
        cls = ReclaimConflictError
    else:
        cls = _BY_STATUS.get(status, OpenStackCallError)
    return cls(call, target, status, detail, request_id=request_id)


def detail_from_body(body: bytes | str) -> str:
    """The human message of an OpenStack error body, whichever service's shape it has.

    Nova: ``{"conflictingRequest": {"code": 409, "message": "..."}}``; Placement:
    ``{"errors": [{"status": 409, "title": "...", "detail": "..."}]}``; Blazar:
    ``{"error_code": 409, "error_message": "...", "error_name": "..."}``; provider feeds (docs):
    ``{"error": {"code": "...", "message": "..."}}``.
    """
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
    try:
        data: Any = json.loads(text)
    except ValueError:
        return text.strip()[:500] or "(empty body)"
    if isinstance(data, Mapping):
        if isinstance(data.get("error_message"), str):
            return str(data["error_message"])
        errors = data.get("errors")
        if isinstance(errors, list) and errors and isinstance(errors[0], Mapping):
            first = errors[0]
            return str(first.get("detail") or first.get("title") or first)
        for value in data.values():
            if isinstance(value, Mapping) and "message" in value:
                return str(value["message"])
    return text.strip()[:500]
