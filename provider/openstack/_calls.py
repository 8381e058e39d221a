"""Turning the SDK's and keystoneauth's exceptions, and raw responses, into typed errors."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import requests
from keystoneauth1 import exceptions as ks_exceptions
from openstack import exceptions as sdk_exceptions

from provider.openstack.errors import OpenStackCallError, detail_from_body, error_for_status


@contextlib.contextmanager
def translated(call: str, target: str) -> Iterator[None]:
    """Run an SDK call; its failures leave as the typed error naming ``call`` and ``target``."""
    try:
        yield
    except sdk_exceptions.HttpException as exc:
        detail = exc.details or _response_detail(exc.response) or str(exc.message)
        raise error_for_status(
            call, target, exc.status_code, detail, request_id=exc.request_id
        ) from exc
    except ks_exceptions.HttpError as exc:
        raise error_for_status(
            call, target, exc.http_status, str(exc.message), request_id=exc.request_id
        ) from exc
    except ks_exceptions.ConnectionError as exc:  # refused, reset, timed out: try again later
        raise error_for_status(call, target, None, f"{type(exc).__name__}: {exc}") from exc
    except (ks_exceptions.ClientException, sdk_exceptions.SDKException) as exc:
        # no endpoint in the catalog, authentication refused, a response the SDK cannot read,
        # a version discovery that failed (the SDK logs the cause and raises NotSupported)
        raise OpenStackCallError(call, target, None, f"{type(exc).__name__}: {exc}") from exc


def raise_for_response(call: str, target: str, response: requests.Response) -> None:
    """Raise the typed error for a raw response (keystoneauth adapter, ``raise_exc=False``)."""
    if response.status_code < 400:
        return
    raise error_for_status(
        call,
        target,
        response.status_code,
        detail_from_body(response.content),
        request_id=response.headers.get("x-openstack-request-id"),
    )


def _response_detail(response: requests.Response | None) -> str:
    if response is None:
        return ""
    return detail_from_body(response.content)
