"""The console's Archive page: the archive's months (`ArchiveDesk.listing`, as /api/v1/archive
answers) and a button that runs `verify` (a POST form, no script: `ArchiveDesk.verify`, as
POST /api/v1/archive/verify answers), the result shown above the months."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

from console.archive import MONTH_PATTERN, ArchiveDesk
from console.errors import BadParameterError
from console.pages.routes import guarded, page

router = APIRouter(include_in_schema=False)
MAX_FORM_BYTES = 1024  # the form has one field


def _desk(request: Request) -> ArchiveDesk:
    desk: ArchiveDesk = request.app.state.archive
    return desk


def _render(request: Request, verification: dict[str, Any] | None) -> HTMLResponse:
    problems = sum(f["error"] for m in (verification or {}).get("months", ())
                   for f in m["findings"])  # fmt: skip
    return page(request, "archive.html", listing=_desk(request).listing(),
                verification=verification, problems=problems)  # fmt: skip


@router.get("/archive", response_class=HTMLResponse)
def archive(request: Request) -> HTMLResponse:
    return guarded(request, lambda: _render(request, None))


@router.post("/archive/verify", response_class=HTMLResponse)
async def verify(request: Request) -> HTMLResponse:
    body = await request.body()

    def render() -> HTMLResponse:
        if len(body) > MAX_FORM_BYTES:
            raise BadParameterError("the verify form sends one field, month: send only that")
        fields = parse_qs(body.decode("utf-8", "replace"))
        month = (fields.get("month") or [""])[0].strip() or None
        if month is not None and not re.match(MONTH_PATTERN, month):
            raise BadParameterError(
                f"month={month[:40]!r} is not a month: write it as YYYY-MM, such as 2026-11"
            )
        return _render(request, _desk(request).verify(month))

    # verify reads every file of the archive: off the event loop, like the sync routes.
    return await run_in_threadpool(guarded, request, render)
