"""The OpenAPI 3.1 description served at /openapi.json: FastAPI's, from the routes and the
models, with the errors as this server really answers them (problem documents, 400 for a bad
parameter instead of FastAPI's 422)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from console.models import Problem

PROBLEM_JSON = "application/problem+json"
ERROR_DESCRIPTIONS = {
    400: "A parameter is malformed, out of range or unknown; `detail` says which and how to "
    "write it.",
    401: "Sign-in is required (the server has an OIDC issuer) and the request carries no valid "
    "bearer token; `detail` says why (missing, expired, for another audience or issuer, not "
    "signed by the issuer's keys).",
    403: "The token is valid but its roles do not reach this path, or a workload owner asked "
    "for every workload's rows; `detail` says which group grants it (docs/security.md).",
    404: "Nothing by that id; `detail` says what was looked for.",
    409: "The server was not started with what this needs (e.g. the archive's public key); "
    "`detail` says which option to start it with.",
    500: "An unexpected error; the server's log has the details.",
    503: "A store the answer needs is down (the fleet-state database, the ledger while "
    "another process holds it, or the archive); `detail` names it and says how to bring it "
    "back. Retry later.",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The documented error responses of a route: `statuses`, sign-in's 401 and 403, and 500."""
    return {
        status: {"model": Problem, "description": ERROR_DESCRIPTIONS[status]}
        for status in sorted({*statuses, 401, 403, 500})
    }


def _not_null(parameter: dict[str, Any]) -> None:
    """An optional parameter is one left out, never a null: drop FastAPI's null branch."""
    schema = parameter.get("schema", {})
    branches = schema.get("anyOf")
    if branches and {"type": "null"} in branches:
        kept = [b for b in branches if b != {"type": "null"}]
        del schema["anyOf"]
        if len(kept) == 1:
            schema.update(kept[0])
        else:
            schema["anyOf"] = kept


def openapi_document(app: FastAPI) -> dict[str, Any]:
    """The description, made once and kept (FastAPI's own caching convention)."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    doc = get_openapi(
        title=app.title,
        version=app.version,
        openapi_version=app.openapi_version,
        summary=app.summary,
        description=app.description,
        routes=app.routes,
    )
    for operations in doc.get("paths", {}).values():
        for operation in operations.values():
            for parameter in operation.get("parameters", ()):
                _not_null(parameter)
            responses = operation.get("responses", {})
            responses.pop("422", None)  # FastAPI's own; this server answers 400 instead
            for code, response in responses.items():
                content = response.get("content", {})
                if int(code) >= 400 and "application/json" in content:
                    content[PROBLEM_JSON] = content.pop("application/json")
                if code == "503":
                    response["headers"] = {
                        "Retry-After": {
                            "description": "Seconds to wait before trying again.",
                            "schema": {"type": "integer"},
                        }
                    }
    # Sign-in (docs/security.md): a bearer token of the server's OIDC issuer, or none on a
    # loopback server started without one.
    doc.setdefault("components", {})["securitySchemes"] = {
        "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT",
                   "description": "An ID token of the OIDC issuer `spotcap serve` was started "
                   "with (--oidc-issuer); its groups give the roles."}
    }  # fmt: skip
    doc["security"] = [{"bearer": []}, {}]
    schemas = doc.get("components", {}).get("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    app.openapi_schema = doc
    return doc
