"""Typed errors of the OpenStack adapter.

Every failure names the call that failed (``nova.delete_server``), what it was about (a server,
a pool, a resource provider, a lease) and the HTTP status, so that the actuator can decide
(retry, give up, trip a breaker) and the ``launch_failed`` event can say why in words.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


class ProviderError(Exception):
    """Base of every error the OpenStack adapter raises."""


class NotOwnedError(ProviderError):
    """A delete was refused: the server lacks the orchestrator's owner tag (ADR-12, ADR-29).

    Raised before any mutating request is sent and before a token is drawn from the budget.
    """

    def __init__(self, instance_id: str, owner_id: str, found_owner: str | None) -> None:
        found = "no owner tag" if found_owner is None else f"owner tag {found_owner!r}"
        super().__init__(
            f"refusing to delete server {instance_id}: it has {found}, "
            f"not this orchestrator's owner {owner_id!r}"
        )
        self.instance_id = instance_id
        self.owner_id = owner_id
        self.found_owner = found_owner


class OpenStackCallError(ProviderError):
    """An OpenStack (or provider feed) call failed.

    ``call`` names the API call (``nova.create_server``), ``target`` what it was about
    (``server 9b1f... in pool gpu-a100.x8.hall2.reclaimable``), ``status`` the HTTP status
    (None when no response came back), ``detail`` the service's own message.
    """

    #: whether the same call may succeed later without a change on our side
    retryable: bool = False

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
    """HTTP 400: the request was malformed or invalid (a bug or a bad pool definition)."""


class UnauthorizedError(OpenStackCallError):
    """HTTP 401: the credentials were refused (expired application credential, ADR-29)."""


class ForbiddenError(OpenStackCallError):
    """HTTP 403: not allowed, or over quota (Nova reports quota exhaustion as 403)."""


class NotFoundError(OpenStackCallError):
    """HTTP 404: the server, provider or lease does not exist (or is already gone)."""


class ConflictError(OpenStackCallError):
    """HTTP 409: the resource is in a state that forbids the call now (task state, generation)."""

    retryable = True


class OverLimitError(OpenStackCallError):
    """HTTP 413 or 429: the service's own rate limit."""

    retryable = True


class ServiceError(OpenStackCallError):
    """HTTP 5xx: the service failed."""

    retryable = True


class UnavailableError(OpenStackCallError):
    """No HTTP response: connection refused, reset or timed out."""

    retryable = True


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


def error_for_status(
    call: str, target: str, status: int | None, detail: str, *, request_id: str | None = None
) -> OpenStackCallError:
    """The typed error for an HTTP status (None: no response)."""
    if status is None:
        cls: type[OpenStackCallError] = UnavailableError
    elif status >= 500:
        cls = ServiceError
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
