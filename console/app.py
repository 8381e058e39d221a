"""The ASGI application `spotcap serve` runs: the console's pages (/), the JSON API (/api/v1), the
metrics (/metrics) and the OpenAPI description (/openapi.json).

One application, one data path: pages for people (the console) are routes of this same app
over the same read functions and the same `ReadAccess`, with their assets served by it
(FastAPI's StaticFiles and HTMLResponse), so nothing reaches a store another way.
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles
from prometheus_client.exposition import choose_encoder

from console import api, archive, errors, whatif
from console.access import ReadAccess
from console.archive import ArchiveDesk
from console.errors import problem
from console.metrics import registry_for
from console.openapi import errors as error_responses
from console.openapi import openapi_document
from console.pages import archive as archive_page
from console.pages import routes as pages
from console.roles import authorize
from console.signin import EVERYONE, Issuer, SignInError
from replay.archive.storage import LocalStorage

DESCRIPTION = """\
Read-only: the fleet state (PostgreSQL), the ledger (ClickHouse) and the projections' lag,
through the same queries as `spotcap query`, `spotcap why` and `spotcap report savings`; what-if
accounting with the shipped rules (`spotcap replay`); the archive's months and their
verification (`spotcap archive verify`, the one POST: it changes nothing, but reads every file).

Money is in euros as exact decimal strings (six places); times are UTC (ISO 8601 with `Z`).
Every error is a problem document (RFC 9457) whose `detail` is one sentence saying what is
wrong and how to fix it. A store that is down makes the endpoints that need it answer 503;
the server stays up.
"""

METRICS_TYPES = {
    "text/plain": "Prometheus text format (the default).",
    "application/openmetrics-text": "OpenMetrics, when the scraper asks for it (Accept).",
}


API_ROUTERS = (api.router, whatif.router, archive.router)
"""The API's routers, in the order the app includes them (before /metrics)."""
PAGE_ROUTERS = (pages.router, archive_page.router)
"""The console pages' routers (after /metrics); a test reads every route from these and the
app's own list (`app.routes`)."""


def create_app(
    access: ReadAccess, desk: ArchiveDesk | None = None, issuer: Issuer | None = None
) -> FastAPI:
    """The app over `access`; the archive is `desk` (default: the home's archive directory,
    ``<home>/archive``, with no key to verify with). With an `issuer`, every route but the
    OpenAPI description and the stylesheet needs a token from it, and serves only the roles
    `console.roles` lets through; without one, everyone is let through (loopback only: the
    command line refuses any other address)."""

    async def signed_in(request: Request) -> None:
        viewer = EVERYONE
        if issuer is not None:  # the issuer's keys may need fetching: off the event loop
            viewer = await run_in_threadpool(issuer.viewer, request.headers.get("authorization"))
        authorize(request, viewer)

    app = FastAPI(
        dependencies=[Depends(signed_in)],
        title="spotcap",
        version="1",
        summary="The fleet state, the cause chains and the net saving of one region.",
        description=DESCRIPTION,
        docs_url=None,  # Swagger UI and ReDoc load assets from CDNs: nothing leaves the process
        redoc_url=None,
    )
    app.state.access = access
    app.state.archive = desk or ArchiveDesk(
        LocalStorage(access.stores.home / "archive"), access.region
    )
    errors.install(app, api.HINTS)

    async def refused(request: Request, error: Exception) -> Response:
        """401/403/503 of sign-in: a problem document for the API, a page for people."""
        assert isinstance(error, SignInError)
        headers = {"WWW-Authenticate": 'Bearer realm="spotcap"'} if error.status == 401 else {}
        if request.url.path.startswith(("/api/", "/metrics")):
            return problem(error.status, str(error), headers)
        title = {401: "Sign in", 403: "Not for your role"}.get(error.status, "Sign-in is down")
        response = pages.page(request, "error.html", error.status, title=title, detail=str(error))
        response.headers.update(headers)
        return response

    app.add_exception_handler(SignInError, refused)
    for router in API_ROUTERS:
        app.include_router(router)
    registry = registry_for(access)

    @app.get("/metrics", summary="Prometheus metrics", response_class=Response,
             responses={200: {"description": "The metrics, read from the stores now.",
                              "content": {t: {"schema": {"type": "string"}, "example": d}
                                          for t, d in METRICS_TYPES.items()}},
                        **error_responses(400)},
             description="The fleet's figures for Prometheus, read from the stores at scrape "
             "time (see docs/operating.md for each metric).",
             dependencies=[api.KnownParameters])  # fmt: skip
    def metrics(request: Request) -> Response:
        encode, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encode(registry), media_type=content_type)

    for router in PAGE_ROUTERS:
        app.include_router(router)
    app.mount("/static", StaticFiles(directory=pages.STATIC_DIR), name="console-static")

    def openapi() -> dict[str, Any]:
        return openapi_document(app)

    app.openapi = openapi  # type: ignore[method-assign]
    return app
