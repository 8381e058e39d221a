"""The pool catalogue: ids from SKU x size x hall x model, correlation groups, the YAML file
(round trip, error messages naming file and pool) and the demo region."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Protocol

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.pools import (
    FORMAT,
    Pool,
    PoolCatalogue,
    PoolCatalogueError,
    correlation_group_for,
    pool_id_for,
)
from sim.pools import demo_region

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "region" / "demo-region.yaml"


class CompilerPool(Protocol):
    """What the contract compiler reads from a pool (its own Protocol, mirrored here)."""

    @property
    def pool_id(self) -> str: ...
    @property
    def purchase_model(self) -> str: ...
    @property
    def capacity_vcpu(self) -> int: ...
    @property
    def expected_interruptions_per_h(self) -> float: ...
    @property
    def correlation_group(self) -> str: ...
    @property
    def hall(self) -> str: ...


def _row(**changes: object) -> dict[str, object]:
    row: dict[str, object] = {
        "sku_family": "c7-amd",
        "size_vcpu": 16,
        "memory_gib": 64,
        "hall": "hall-a",
        "host_aggregate": "c7-amd-large",
        "purchase_model": "reclaimable",
        "capacity_vcpu": 1024,
        "expected_interruptions_per_h": 0.01,
        "price_per_vcpu_h_eur_micros": 9000,
        "guaranteed_price_per_vcpu_h_eur_micros": 38000,
    }
    row.update(changes)
    return row


def _file(tmp_path: Path, rows: list[dict[str, object]], **top: object) -> Path:
    document = {"format": FORMAT, "region": "test", "pools": rows, **top}
    path = tmp_path / "pools.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_a_pool_id_is_family_size_hall_and_model() -> None:
    pool = Pool.model_validate(_row())
    assert pool.pool_id == pool_id_for("c7-amd", 16, "hall-a", "reclaimable")
    assert pool.pool_id == "c7-amd.16.hall-a.reclaimable"
    assert pool.correlation_group == correlation_group_for("hall-a", "c7-amd-large")
    assert pool.capacity_instances == 64
    compiler_view: CompilerPool = pool  # the compiler's Protocol is satisfied by name
    assert compiler_view.hall == "hall-a"


def test_an_explicit_correlation_group_is_kept() -> None:
    pool = Pool.model_validate(_row(correlation_group="hall-a"))
    assert pool.correlation_group == "hall-a"


def test_the_registered_event_carries_the_pool() -> None:
    event = Pool.model_validate(_row(gpus=2)).registered()
    assert event.pool_id == "c7-amd.16.hall-a.reclaimable"
    assert event.instance_vcpu == 16
    assert event.attributes == {"memory_gib": "64", "gpus": "2"}


def test_the_demo_region_has_about_140_pools_mostly_reclaimable() -> None:
    catalogue = demo_region(1)
    models = Counter(p.purchase_model for p in catalogue)
    assert 130 <= len(catalogue) <= 150
    assert models["reclaimable"] > len(catalogue) / 2
    assert models["guaranteed"] > 0
    assert models["committed"] > 0
    assert catalogue.halls() == ["hall-a", "hall-b", "hall-c", "hall-d"]
    assert any(p.gpus for p in catalogue)
    assert len(catalogue.correlation_groups()) > 4 * 5
    for pool in catalogue.pools("reclaimable"):
        assert pool.expected_interruptions_per_h > 0
        assert pool.price_per_vcpu_h_eur_micros < pool.guaranteed_price_per_vcpu_h_eur_micros
    group = catalogue.group_of("c7-amd.16.hall-b.reclaimable")
    assert {p.hall for p in group} == {"hall-b"}
    assert len({p.host_aggregate for p in group}) == 1


def test_the_example_catalogue_is_fresh() -> None:
    """examples/region/demo-region.yaml is demo_region(1) (python -m sim.pools makes it)"""
    assert EXAMPLE.read_text() == demo_region(1).to_yaml()
    assert PoolCatalogue.load(EXAMPLE) == demo_region(1)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32), halls=st.integers(1, 5))
def test_a_catalogue_survives_the_file(seed: int, halls: int) -> None:
    catalogue = demo_region(seed, region="r1", halls=halls)
    again = PoolCatalogue.from_yaml(catalogue.to_yaml())
    assert again == catalogue
    assert again.to_yaml() == catalogue.to_yaml()


def test_save_and_load(tmp_path: Path) -> None:
    catalogue = demo_region(7, halls=2)
    path = tmp_path / "nested" / "region.yaml"
    catalogue.save(path)
    assert PoolCatalogue.load(path) == catalogue


def test_pool_ids_may_be_omitted_in_the_file(tmp_path: Path) -> None:
    catalogue = PoolCatalogue.load(_file(tmp_path, [_row()]))
    assert "c7-amd.16.hall-a.reclaimable" in catalogue


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        (
            [_row(size_vcpu=0)],
            "c7-amd.0.hall-a.reclaimable (#1): size_vcpu: Input should be greater than 0",
        ),
        ([_row(pool_id="c7-amd.16.hall-a.reclaimable", capacity_vcpu=1000)], "pool c7-amd.16"),
        ([_row(capacity_vcpu=1000)], "not a whole number of 16-vCPU instances"),
        ([_row(pool_id="wrong")], "pool wrong (#1): pool_id 'wrong' does not match"),
        ([_row(purchase_model="spot")], "purchase_model: Input should be 'reclaimable'"),
        ([_row(), _row()], "c7-amd.16.hall-a.reclaimable (#2): listed twice (first as pool #1)"),
        (
            [_row(purchase_model="guaranteed")],
            "a guaranteed pool is never reclaimed: expected_interruptions_per_h must be 0",
        ),
        ([{"hall": "hall-a"}], "pool #1: sku_family: Field required"),
        ([_row(colour="blue")], "colour: Extra inputs are not permitted"),
        ([_row(price_per_vcpu_h_eur_micros=40_000)], "above the guaranteed price"),
        (["not a mapping"], "pool #1: expected a mapping of fields"),
    ],
)
def test_errors_name_the_file_and_the_pool(
    tmp_path: Path, rows: list[dict[str, object]], expected: str
) -> None:
    path = _file(tmp_path, rows)
    with pytest.raises(PoolCatalogueError) as caught:
        PoolCatalogue.load(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert expected in str(caught.value)


def test_errors_about_the_file_itself(tmp_path: Path) -> None:
    with pytest.raises(PoolCatalogueError, match="format is 'other/v9'"):
        PoolCatalogue.load(_file(tmp_path, [], format="other/v9"))
    with pytest.raises(PoolCatalogueError, match=r"unknown top-level keys \['extra'\]"):
        PoolCatalogue.load(_file(tmp_path, [], extra=1))
    broken = tmp_path / "broken.yaml"
    broken.write_text("pools: [\n")
    with pytest.raises(PoolCatalogueError, match=f"{broken}: not valid YAML"):
        PoolCatalogue.load(broken)
    with pytest.raises(PoolCatalogueError, match="cannot read"):
        PoolCatalogue.load(tmp_path / "missing.yaml")


def test_lookups_name_the_region() -> None:
    with pytest.raises(PoolCatalogueError, match="no pool 'nope' in the catalogue of region demo"):
        demo_region(1).get("nope")
