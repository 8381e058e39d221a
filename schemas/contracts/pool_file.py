"""The ``--pools`` file: the pools the feasibility rules check contracts against.

YAML or JSON, a mapping with a ``pools:`` list; each entry has at least::

    pools:
      - pool_id: m6-large-hall1-reclaimable
        purchase_model: reclaimable      # reclaimable | guaranteed | committed
        capacity_vcpu: 1200
        expected_interruptions_per_h: 0.03
        correlation_group: agg-hall1-a
        hall: hall1

Other keys (of an export of the full pool catalogue) are ignored. An error names the line.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from schemas.contracts.diagnose import describe_validation_error
from schemas.contracts.source import YamlSourceError, dotted, load_yaml_with_lines


class PoolFileError(ValueError):
    """The pool file cannot be used; the message names the line and the field."""


class CataloguePool(BaseModel):
    """One pool as the feasibility rules read it; satisfies `feasibility.PoolLike`."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    pool_id: str
    purchase_model: Literal["reclaimable", "guaranteed", "committed"]
    capacity_vcpu: int = Field(ge=0)
    expected_interruptions_per_h: float = Field(ge=0, allow_inf_nan=False)
    correlation_group: str
    hall: str


class _PoolFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    pools: list[CataloguePool]


def load_pools(name: str, text: str) -> list[CataloguePool]:
    """The pools of a pool file; `name` is used in error messages."""
    try:
        loaded = load_yaml_with_lines(text)
    except YamlSourceError as problem:
        raise PoolFileError(f"{name}:{problem.line}: {problem.message}") from problem
    try:
        return list(_PoolFile.model_validate(loaded.data).pools)
    except ValidationError as error:
        lines = []
        for detail in error.errors():
            path, message, fix = describe_validation_error(detail)
            lines.append(f"{name}:{loaded.line_of(path)}: {dotted(path)}: {message} (fix: {fix})")
        raise PoolFileError("\n".join(lines)) from error
