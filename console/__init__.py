"""The console: the read side over HTTP (`spotcap serve`), for people and for machines.

What it owns: the HTTP application and everything it serves, read-only: the JSON API under
/api/v1 (the same read functions and JSON rendering as `spotcap query`, `why` and `report`), its
OpenAPI description, the Prometheus metrics at /metrics (read from the stores at scrape time),
what-if accounting with the shipped rules, the archive's months and their verification, and the
pages at / for people (`console.pages`).

- `access`: how the server reaches the stores and the log, and the 503 when one is down;
- `api`: the JSON API; `models`: its response bodies; `openapi`: the description served at
  /openapi.json, with the errors as really answered; `errors`: every failure as a problem
  document of one sentence;
- `metrics`: the Prometheus collector; `whatif`: what-if accounting; `archive`: the archive desk;
- `signin`: who sends a request (OIDC bearer tokens verified against the issuer's keys, their
  groups as roles); `roles`: which role reaches which route, and a workload owner's view;
- `app`: the application that puts them together; `server`: the socket and uvicorn.

What it may import: `schemas`, `contracts`, `streams`, `projections` (the read side, the
stores), `replay` (rules, what-if, the archive), and FastAPI, Starlette, uvicorn, pydantic,
Jinja2, prometheus_client and PyJWT. Who calls it: the command line's `spotcap serve`, which
hands it the stores and the log of the configured home (`spotcap.wiring`) and the issuer.
"""
