"""The pool catalogue (ADR-06): what a pool is, and the region's pools in a reviewed YAML file.

A pool is SKU family x size x hall x purchase model; its id is derived from exactly those four
(`pool_id_for`), so two catalogue rows can never describe the same pool under two names.

**Correlation groups** start from what causes reclamation on premises: a guaranteed tenant's
demand lands on the hosts of one *host aggregate* in one *hall*. The default group of a pool is
therefore ``<hall>:<host_aggregate>`` (`correlation_group_for`); pools of different sizes drawn
from the same aggregate share a group. A catalogue may name a coarser group (for example a whole
hall, after observed co-reclamation, ADR-06) by writing ``correlation_group`` explicitly; the
planner caps each group at 30% of a workload's reclaimable capacity (ADR-08).

The file format (``format: spotcap.pools/v1``)::

    format: spotcap.pools/v1
    region: demo
    pools:
      - pool_id: c7-amd.16.hall-a.reclaimable   # optional: derived when omitted, checked if given
        sku_family: c7-amd
        size_vcpu: 16                            # vCPU per instance
        memory_gib: 64                           # memory per instance
        gpus: 0                                  # accelerators per instance (default 0)
        hall: hall-a
        host_aggregate: c7-amd-large
        purchase_model: reclaimable              # reclaimable | guaranteed | committed
        correlation_group: hall-a:c7-amd-large   # optional: <hall>:<host_aggregate> by default
        capacity_vcpu: 1024                      # whole instances: a multiple of size_vcpu
        expected_interruptions_per_h: 0.012      # per instance-hour; 0 unless reclaimable
        price_per_vcpu_h_eur_micros: 9000
        guaranteed_price_per_vcpu_h_eur_micros: 38000

Errors name the file and the pool (its id, else its position in the list).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from schemas.events import PoolRegistered, PurchaseModel
from schemas.yaml_input import NotUtf8Error, load_checked, read_utf8

FORMAT = "spotcap.pools/v1"
PURCHASE_MODELS: tuple[PurchaseModel, ...] = ("reclaimable", "guaranteed", "committed")


def _yaml_problem(error: yaml.YAMLError) -> str:
    """'line L, column C: problem' for a marked YAML error (PyYAML's text spans lines)."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        return f"line {mark.line + 1}, column {mark.column + 1}: {error.problem}"
    return " ".join(str(error).split())


class PoolCatalogueError(ValueError):
    """A catalogue file or catalogue that cannot be used; the message names file and pool."""


def pool_id_for(sku_family: str, size_vcpu: int | str, hall: str, purchase_model: str) -> str:
    """The id of the pool SKU family x size x hall x purchase model (ADR-06)."""
    return f"{sku_family}.{size_vcpu}.{hall}.{purchase_model}"


def correlation_group_for(hall: str, host_aggregate: str) -> str:
    """The default correlation group: the host aggregate, within its hall."""
    return f"{hall}:{host_aggregate}"


_NAME = r"^[a-z0-9][a-z0-9-]*$"


class Pool(BaseModel):
    """One pool of the catalogue; frozen, so it can be shared and hashed."""

    # A rate or a price of inf or nan would make every ranking and every bill meaningless.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    pool_id: str = ""
    sku_family: str = Field(pattern=_NAME)
    size_vcpu: int = Field(gt=0)
    memory_gib: int = Field(gt=0)
    gpus: int = Field(default=0, ge=0)
    hall: str = Field(pattern=_NAME)
    host_aggregate: str = Field(pattern=_NAME)
    purchase_model: PurchaseModel
    correlation_group: str = ""
    capacity_vcpu: int = Field(ge=0)
    expected_interruptions_per_h: float = Field(ge=0.0)
    price_per_vcpu_h_eur_micros: int = Field(ge=0)
    guaranteed_price_per_vcpu_h_eur_micros: int = Field(ge=0)

    @model_validator(mode="before")
    @classmethod
    def _derive(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        filled = dict(data)
        parts = ("sku_family", "size_vcpu", "hall", "purchase_model")
        if not filled.get("pool_id") and all(p in filled for p in parts):
            family, size, hall, model = (str(filled[p]) for p in parts)
            filled["pool_id"] = pool_id_for(family, size, hall, model)
        if not filled.get("correlation_group") and "hall" in filled and "host_aggregate" in filled:
            filled["correlation_group"] = correlation_group_for(
                str(filled["hall"]), str(filled["host_aggregate"])
            )
        return filled

    @model_validator(mode="after")
    def _check(self) -> Pool:
        derived = pool_id_for(self.sku_family, self.size_vcpu, self.hall, self.purchase_model)
        if self.pool_id != derived:
            raise ValueError(
                f"pool_id {self.pool_id!r} does not match SKU family x size x hall x purchase "
                f"model, which give {derived!r}"
            )
        if self.capacity_vcpu % self.size_vcpu:
            raise ValueError(
                f"capacity_vcpu {self.capacity_vcpu} is not a whole number of "
                f"{self.size_vcpu}-vCPU instances"
            )
        if self.purchase_model != "reclaimable" and self.expected_interruptions_per_h:
            raise ValueError(
                f"a {self.purchase_model} pool is never reclaimed: "
                "expected_interruptions_per_h must be 0"
            )
        if self.price_per_vcpu_h_eur_micros > self.guaranteed_price_per_vcpu_h_eur_micros:
            raise ValueError("price_per_vcpu_h_eur_micros is above the guaranteed price")
        return self

    @property
    def capacity_instances(self) -> int:
        return self.capacity_vcpu // self.size_vcpu

    def registered(self) -> PoolRegistered:
        """The `pool_registered` event payload announcing this pool."""
        attributes = {"memory_gib": str(self.memory_gib), "gpus": str(self.gpus)}
        return PoolRegistered(
            pool_id=self.pool_id,
            sku_family=self.sku_family,
            instance_vcpu=self.size_vcpu,
            hall=self.hall,
            host_aggregate=self.host_aggregate,
            purchase_model=self.purchase_model,
            correlation_group=self.correlation_group,
            capacity_vcpu=self.capacity_vcpu,
            attributes=attributes,
            expected_interruption_per_h=self.expected_interruptions_per_h,
        )


class PoolCatalogue:
    """The pools of one region, by id, in file order."""

    def __init__(self, region: str, pools: Iterable[Pool]) -> None:
        self.region = region
        self._pools: dict[str, Pool] = {}
        for pool in pools:
            if pool.pool_id in self._pools:
                raise PoolCatalogueError(f"pool {pool.pool_id}: listed twice")
            self._pools[pool.pool_id] = pool

    def __len__(self) -> int:
        return len(self._pools)

    def __iter__(self) -> Iterator[Pool]:
        return iter(self._pools.values())

    def __contains__(self, pool_id: object) -> bool:
        return pool_id in self._pools

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PoolCatalogue):
            return NotImplemented
        return self.region == other.region and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # mutable container semantics: not hashable

    def get(self, pool_id: str) -> Pool:
        """The pool `pool_id`; `PoolCatalogueError` naming the region if there is none."""
        try:
            return self._pools[pool_id]
        except KeyError:
            raise PoolCatalogueError(
                f"no pool {pool_id!r} in the catalogue of region {self.region}"
            ) from None

    def pools(self, purchase_model: PurchaseModel | None = None) -> list[Pool]:
        return [p for p in self if purchase_model is None or p.purchase_model == purchase_model]

    def halls(self) -> list[str]:
        return sorted({p.hall for p in self})

    def in_hall(self, hall: str) -> list[Pool]:
        return [p for p in self if p.hall == hall]

    def correlation_groups(self) -> dict[str, list[Pool]]:
        """Pools by correlation group, groups sorted by name."""
        groups: dict[str, list[Pool]] = {}
        for pool in self:
            groups.setdefault(pool.correlation_group, []).append(pool)
        return dict(sorted(groups.items()))

    def group_of(self, pool_id: str) -> list[Pool]:
        """Every pool sharing `pool_id`'s correlation group (itself included)."""
        group = self.get(pool_id).correlation_group
        return [p for p in self if p.correlation_group == group]

    # -- the file ---------------------------------------------------------------------------

    def to_yaml(self) -> str:
        rows = [pool.model_dump() for pool in self]
        document = {"format": FORMAT, "region": self.region, "pools": rows}
        header = (
            f"# spotcap pool catalogue of region {self.region} ({len(self)} pools); "
            "format documented in schemas/pools.py\n"
        )
        return header + yaml.safe_dump(document, sort_keys=False, width=100)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_yaml())

    @classmethod
    def load(cls, path: Path) -> PoolCatalogue:
        try:
            text = read_utf8(path)
        except OSError as error:
            raise PoolCatalogueError(f"{path}: cannot read: {error.strerror}") from error
        except NotUtf8Error as error:
            raise PoolCatalogueError(f"{path}: {error}") from error
        return cls.from_yaml(text, source=str(path))

    @classmethod
    def from_yaml(cls, text: str, source: str = "<catalogue>") -> PoolCatalogue:
        try:
            document = load_checked(text)
        except yaml.YAMLError as error:
            raise PoolCatalogueError(f"{source}: not valid YAML: {_yaml_problem(error)}") from error
        if not isinstance(document, dict):
            raise PoolCatalogueError(f"{source}: expected a mapping with format, region, pools")
        unknown = sorted(set(document) - {"format", "region", "pools"})
        if unknown:
            raise PoolCatalogueError(f"{source}: unknown top-level keys {unknown}")
        if document.get("format") != FORMAT:
            raise PoolCatalogueError(
                f"{source}: format is {document.get('format')!r}; this build reads {FORMAT!r}"
            )
        region = document.get("region")
        rows = document.get("pools")
        if not isinstance(region, str) or not region:
            raise PoolCatalogueError(f"{source}: region must be a non-empty string")
        if not isinstance(rows, list):
            raise PoolCatalogueError(f"{source}: pools must be a list")
        pools = []
        seen: dict[str, int] = {}
        for index, row in enumerate(rows):
            label = _row_label(row, index)
            if not isinstance(row, dict):
                raise PoolCatalogueError(f"{source}: {label}: expected a mapping of fields")
            try:
                pool = Pool.model_validate(row)
            except ValidationError as error:
                raise PoolCatalogueError(f"{source}: {label}: {_explain(error)}") from error
            if pool.pool_id in seen:
                raise PoolCatalogueError(
                    f"{source}: {label}: listed twice (first as pool #{seen[pool.pool_id]})"
                )
            seen[pool.pool_id] = index + 1
            pools.append(pool)
        return cls(region, pools)


def _row_label(row: object, index: int) -> str:
    if isinstance(row, dict) and row.get("pool_id"):
        return f"pool {row['pool_id']} (#{index + 1})"
    if isinstance(row, dict) and all(k in row for k in ("sku_family", "size_vcpu", "hall")):
        model = row.get("purchase_model", "?")
        derived = pool_id_for(row["sku_family"], row["size_vcpu"], row["hall"], model)
        return f"pool {derived} (#{index + 1})"
    return f"pool #{index + 1}"


def _explain(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)
