"""Every error the server answers is a problem document (RFC 9457, ``application/problem+json``)
whose `detail` is one sentence saying what is wrong and how to fix it; never a traceback."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from console.access import StoreUnavailableError
from projections.read.why import NotFoundError

PROBLEM_JSON = "application/problem+json"
_log = logging.getLogger("spotcap.serve")


class BadParameterError(ValueError):
    """A parameter that is well-formed but cannot be used (e.g. `from` after `to`); 400."""


class NotConfiguredError(RuntimeError):
    """The server was not started with what the request needs (e.g. the archive's public
    key); 409, the sentence says which option to start it with."""


def problem(status: int, detail: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    body = {
        "type": "about:blank",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
    }
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def validation_sentence(errors: Sequence[Any], hints: Mapping[str, str]) -> str:
    """One sentence from FastAPI's validation errors: the first bad parameter, what is wrong
    with it, and how to write it (`hints`, by parameter name)."""
    first = errors[0] if errors else {}
    where, name = ([*first.get("loc", ()), "", ""])[:2] if first.get("loc") else ("", "")
    name = str(name)
    hint = hints.get(name, "see /openapi.json for what it accepts")
    if first.get("type") == "missing":
        return f"{where} parameter {name} is missing: {hint}"
    if first.get("type") == "value_error" and first.get("ctx", {}).get("error"):
        return f"{where} parameter {name}: {first['ctx']['error']}: {hint}"
    reason = str(first.get("msg", "not valid"))
    reason = reason[:1].lower() + reason[1:]
    shown = _shown(first.get("input"))
    return f"{where} parameter {name}={shown} is not valid ({reason}): {hint}"


def install(app: FastAPI, hints: Mapping[str, str]) -> None:
    """Register the handlers that turn every failure into a problem document."""

    async def invalid(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, RequestValidationError)
        return problem(400, validation_sentence(error.errors(), hints))

    async def bad_parameter(request: Request, error: Exception) -> JSONResponse:
        return problem(400, str(error))

    async def not_found(request: Request, error: Exception) -> JSONResponse:
        return problem(404, str(error))

    async def not_configured(request: Request, error: Exception) -> JSONResponse:
        return problem(409, str(error))

    async def unavailable(request: Request, error: Exception) -> JSONResponse:
        return problem(503, str(error), headers={"Retry-After": "5"})

    async def http_error(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, HTTPException)
        method, path = request.method, request.url.path
        if error.status_code == 404:
            detail = f"nothing at {path}: the endpoints are listed in /openapi.json"
        elif error.status_code == 405:
            detail = f"{method} is not served at {path}: /openapi.json lists each path's methods"
        else:
            detail = str(error.detail)
        return problem(error.status_code, detail, headers=error.headers)

    async def unexpected(request: Request, error: Exception) -> JSONResponse:
        _log.exception("unexpected error on %s %s", request.method, request.url.path)
        return problem(
            500,
            f"an unexpected error ({type(error).__name__}) stopped {request.method} "
            f"{request.url.path}: the server's log has the details; please report it",
        )

    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(BadParameterError, bad_parameter)
    app.add_exception_handler(NotFoundError, not_found)
    app.add_exception_handler(NotConfiguredError, not_configured)
    app.add_exception_handler(StoreUnavailableError, unavailable)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)
