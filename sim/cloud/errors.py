"""Errors of the served cloud, each in the body shape of the service that answers it.

Nova ``{"itemNotFound": {"code": 404, "message": ...}}``; Placement ``{"errors": [{"status",
"title", "detail"}]}``; Blazar ``{"error_code", "error_message", "error_name"}``; the provider
feeds (docs/providers.md) ``{"error": {"code": "<machine code>", "message": ...}}``. The
adapter's `provider.openstack.errors.detail_from_body` reads every one of them. No message
repeats a header or a secret that was sent.
"""

from __future__ import annotations

from typing import Any

_NOVA_KEYS = {
    400: "badRequest",
    403: "forbidden",
    404: "itemNotFound",
    405: "badMethod",
    409: "conflictingRequest",
    413: "overLimit",
}
_TITLES = {
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Request Entity Too Large",
}


class CloudError(Exception):
    """An HTTP answer other than success: the status and the body to send."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body


def nova_error(status: int, message: str) -> CloudError:
    return CloudError(
        status, {_NOVA_KEYS.get(status, "computeFault"): {"code": status, "message": message}}
    )


def placement_error(status: int, detail: str) -> CloudError:
    title = _TITLES.get(status, "Error")
    return CloudError(status, {"errors": [{"status": status, "title": title, "detail": detail}]})


def blazar_error(status: int, message: str, name: str) -> CloudError:
    return CloudError(status, {"error_code": status, "error_message": message, "error_name": name})


def feed_error(status: int, code: str, message: str) -> CloudError:
    return CloudError(status, {"error": {"code": code, "message": message}})
