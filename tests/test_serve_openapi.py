"""The OpenAPI description of `spotcap serve`, the JSON rendering of rows and the error sentences,
without a server (the description is made from the routes and models alone)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute

from console import api, archive, whatif
from console.access import ReadAccess
from console.api import HINTS
from console.app import create_app
from console.errors import validation_sentence
from console.models import EurByCause
from projections.ledger.rule import CAUSES
from projections.read.rows import json_row
from projections.read.times import parse_day, parse_moment
from projections.stores import Stores
from replay import rules
from streams.embedded import EmbeddedLog

NEEDS = {  # the store each endpoint reads, hence its 503 (and why's 404)
    "/api/v1/pools": {503},
    "/api/v1/rankings": {503},
    "/api/v1/exclusions": {503},
    "/api/v1/instances": {503},
    "/api/v1/workloads": {503},
    "/api/v1/lag": {503},
    "/api/v1/why/{id}": {404, 503},
    "/api/v1/reports/savings": {503},
    "/api/v1/reports/savings/daily": {503},
    "/api/v1/workloads/{id}/spread": {404, 503},
    "/api/v1/fallbacks": {503},
    "/api/v1/waves/last": {404, 503},
    "/api/v1/health": set(),
    "/api/v1/reports/what-if": {503},
    "/api/v1/archive": {503},
    "/api/v1/archive/verify": {409, 503},
    "/metrics": set(),
}
METHODS = {"/api/v1/archive/verify": "post"}  # verify changes nothing, but reads every file


@pytest.fixture
def description(tmp_path: Path) -> dict[str, Any]:
    app = create_app(
        ReadAccess(Stores(tmp_path), "dev", lambda: EmbeddedLog(tmp_path / "log"))
    )  # touches no store
    # The API's routers are included whole (FastAPI keeps them as one route each).
    every = [*api.router.routes, *whatif.router.routes, *archive.router.routes, *app.routes]
    routes = {r.path for r in every if isinstance(r, APIRoute) and r.include_in_schema}
    doc = app.openapi()
    assert set(doc["paths"]) == routes == set(NEEDS)
    return doc


def test_every_endpoint_documents_its_answers_and_errors(description: dict[str, Any]) -> None:
    assert description["openapi"].startswith("3.1.")
    for path, operations in description["paths"].items():
        method = METHODS.get(path, "get")
        assert set(operations) == {method}, path  # read-only: one method each, GET but verify
        responses = operations[method]["responses"]
        always = {"200", "400", "401", "403", "500"}  # 401 and 403: sign-in (docs/security.md)
        assert set(responses) == always | {str(s) for s in NEEDS[path]}, path
        for code, response in responses.items():
            assert response["description"], (path, code)
            if int(code) >= 400:
                assert response["content"] == {
                    "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
                }, (path, code)
        if "503" in responses:
            assert "Retry-After" in responses["503"]["headers"]
    schemas = description["components"]["schemas"]
    assert "HTTPValidationError" not in schemas and "ValidationError" not in schemas
    assert schemas["Problem"]["required"] == ["type", "title", "status", "detail"]


def test_parameters_are_described_as_sent(description: dict[str, Any]) -> None:
    """A query parameter left out is absent, never null; each one has a description and a hint
    for its 400."""
    for path, operations in description["paths"].items():
        for parameter in operations[METHODS.get(path, "get")].get("parameters", ()):
            schema = parameter["schema"]
            assert {"type": "null"} not in schema.get("anyOf", []), (path, parameter["name"])
            assert schema.get("type") != "null"
            assert parameter.get("description"), (path, parameter["name"])
            assert parameter["name"] in HINTS, parameter["name"]
    savings = description["paths"]["/api/v1/reports/savings"]["get"]["parameters"]
    assert [p["name"] for p in savings] == ["from", "to", "workload"]
    assert (savings[0]["schema"]["type"], savings[0]["schema"]["format"]) == ("string", "date")


def test_what_if_names_only_the_shipped_rules(description: dict[str, Any]) -> None:
    (rule,) = [p for p in description["paths"]["/api/v1/reports/what-if"]["get"]["parameters"]
               if p["name"] == "rule"]  # fmt: skip
    shipped = sorted(p.stem for p in Path(rules.__file__).parent.glob("*.yaml"))
    assert rule["required"] and sorted(rule["schema"]["enum"]) == shipped
    assert "recorded" in shipped and len(shipped) >= 3


def test_the_savings_model_names_every_cause() -> None:
    assert list(EurByCause.model_fields) == [*CAUSES, "cost", "net_saving"]


def test_rows_render_money_in_euros_and_times_in_utc() -> None:
    paris = timezone(timedelta(hours=1))
    row = {
        "price_per_vcpu_h_eur_micros": 31_250,
        "spend_cap_eur_micros": None,
        "at": datetime(2026, 11, 2, 15, 0, tzinfo=paris),
        "ids": [uuid.UUID(int=1)],
        "n": 3,
    }
    assert json_row(row) == {
        "price_per_vcpu_h_eur": "0.031250",
        "spend_cap_eur": None,
        "at": "2026-11-02T14:00:00Z",
        "ids": ["00000000-0000-0000-0000-000000000001"],
        "n": 3,
    }


@pytest.mark.parametrize(
    ("text", "moment"),
    [
        ("2026-11-02", datetime(2026, 11, 2, tzinfo=UTC)),
        ("2026-11-02T14:00", datetime(2026, 11, 2, 14, tzinfo=UTC)),
        ("2026-11-02t14:00:00.5z", datetime(2026, 11, 2, 14, 0, 0, 500_000, tzinfo=UTC)),
        ("2026-11-02 15:00:00+01:00", datetime(2026, 11, 2, 14, tzinfo=UTC)),
    ],
)
def test_times_are_read_as_written(text: str, moment: datetime) -> None:
    assert parse_moment(text) == moment


@pytest.mark.parametrize("text", ["0.5", "1700000000", "yesterday", "2026-02-30", "2026-11-2"])
def test_what_is_not_a_time_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_moment(text)
    with pytest.raises(ValueError):
        parse_day(text)


def test_a_validation_error_is_one_sentence_with_its_fix() -> None:
    errors = [{"type": "int_parsing", "loc": ("query", "limit"), "input": "ten",
               "msg": "Input should be a valid integer"}]  # fmt: skip
    assert validation_sentence(errors, HINTS) == (
        "query parameter limit='ten' is not valid (input should be a valid integer): "
        "give a whole number from 1 to 10,000"
    )
    long = [{"type": "string_too_long", "loc": ("query", "pool"), "input": "x" * 500,
             "msg": "String should have at most 200 characters"}]  # fmt: skip
    sentence = validation_sentence(long, HINTS)
    assert len(sentence) < 250 and sentence.startswith("query parameter pool='xxx")
