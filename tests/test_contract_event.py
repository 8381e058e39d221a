"""The contract -> ``contract_published`` table (contracts/event.py) covers both sides once, and
the event carries the contract's values through the codec."""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import BaseModel

from contracts import FeasibilityEnv, compile_contracts
from contracts.event import FIELDS, NOT_PUBLISHED, Publication, contract_published, value_of
from contracts.pool_file import load_pools
from schemas.codec import Codec
from schemas.contracts.model import Contract
from schemas.events import ContractPublished, Envelope

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "contracts"
T0_US = 1_796_000_000_000_000


def _compiled() -> list[tuple[Publication, Envelope]]:
    pools = load_pools("pools", (EXAMPLES / "pools.catalogue.json").read_text())
    files = {p: p.read_text() for p in sorted(EXAMPLES.glob("*.yaml"))}
    result = compile_contracts(
        files, FeasibilityEnv(pools=pools), published_at_us=T0_US, source_commit="0a1b2c3"
    )
    assert result.ok and result.accepted
    return [
        (
            Publication(
                contract=c.contract,
                contract_sha256=c.bundle_sha256,
                source_path=c.path.as_posix(),
                source_sha256=c.source_sha256,
                source_commit="0a1b2c3",
            ),
            c.event,
        )
        for c in result.accepted
    ]


COMPILED = _compiled()


def _leaves(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Dotted paths of every leaf field of a pydantic model (nested models opened)."""
    found: list[str] = []
    for name, info in model.model_fields.items():
        inner = info.annotation
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            found += _leaves(inner, f"{prefix}{name}.")
        else:
            found.append(prefix + name)
    return found


CONTRACT_LEAVES = _leaves(Contract)


def test_the_table_names_every_field_of_the_event_once_in_its_order() -> None:
    names = [name for name, _ in FIELDS]
    assert [n for n, count in Counter(names).items() if count > 1] == []
    assert names == [f.name for f in dataclasses.fields(ContractPublished)]


def test_every_contract_field_is_published_or_says_why_not() -> None:
    paths = {s.removeprefix("contract.") for _, s in FIELDS if isinstance(s, str)}
    unknown = set(NOT_PUBLISHED) - set(CONTRACT_LEAVES)
    assert not unknown, f"NOT_PUBLISHED names no contract field: {unknown}"
    assert not set(NOT_PUBLISHED) & paths, "a field is both published and not"


def _other(value: Any, annotation: Any) -> Any:
    """A value of the same type as `value` that differs from it."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 0.25
    if isinstance(value, datetime):
        return value + timedelta(days=1)
    if isinstance(value, str):
        symbols = [a for arg in get_args(annotation) for a in get_args(arg) or (arg,)]
        literals = [s for s in symbols if isinstance(s, str) and s != value]
        return literals[0] if literals else value + "-x"
    assert value is None, value
    (kind,) = [a for a in get_args(annotation) if a is not type(None)]
    samples: dict[Any, Any] = {datetime: datetime(2027, 1, 1, tzinfo=UTC), int: 60, str: "x"}
    return samples[kind]


def _with(contract: Contract, path: str, value: Any) -> Contract:
    head, _, rest = path.partition(".")
    if not rest:
        return contract.model_copy(update={head: value})
    inner = getattr(contract, head)
    return contract.model_copy(update={head: inner.model_copy(update={rest: value})})


def _annotation(path: str) -> Any:
    model: type[BaseModel] = Contract
    *heads, last = path.split(".")
    for head in heads:
        inner = model.model_fields[head].annotation
        assert isinstance(inner, type) and issubclass(inner, BaseModel)
        model = inner
    return model.model_fields[last].annotation


@pytest.mark.parametrize("path", CONTRACT_LEAVES)
def test_a_change_to_a_contract_field_shows_in_the_event_unless_it_is_not_published(
    path: str,
) -> None:
    """Independent of how the table reaches a field (a path, a property, a function): change
    the field in the contract and the event must change, or the field must be one that is
    not published (and then the event must not change)."""
    publication, _ = COMPILED[0]
    before = contract_published(publication)
    current = value_of(publication, f"contract.{path}")
    changed = _with(publication.contract, path, _other(current, _annotation(path)))
    after = contract_published(dataclasses.replace(publication, contract=changed))
    if path in NOT_PUBLISHED:
        assert after == before, f"{path} is said not to be published, but the event changed"
    else:
        assert after != before, f"{path} changed and the event did not: add it to FIELDS"


@pytest.mark.parametrize(("publication", "event"), COMPILED, ids=lambda v: "")
def test_the_event_round_trips_the_contracts_values_through_the_codec(
    publication: Publication, event: Envelope
) -> None:
    codec = Codec()
    decoded = codec.decode(codec.encode(event))
    assert decoded == event
    payload = decoded.payload
    assert isinstance(payload, ContractPublished)
    for name, source in FIELDS:
        assert getattr(payload, name) == value_of(publication, source), name
    contract = publication.contract
    # A few by hand, not through the table, so a wrong path in it cannot pass unseen.
    assert payload.workload_id == contract.workload == decoded.key
    assert payload.tolerated_interruptions_per_h == contract.tolerated_interruptions_per_h
    assert payload.spend_cap_eur_micros == contract.fallback.spend_cap_per_day_eur_micros
    assert payload.checkpoint_size_bytes == contract.checkpoint.size_bytes
    assert payload.source_commit == "0a1b2c3"
