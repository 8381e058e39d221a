"""The demo region's pool catalogue: about 140 pools over four halls, seeded.

A generator for the simulator and the examples; the catalogue's model and file format are in
`schemas.pools`.
"""

from __future__ import annotations

import random
from pathlib import Path

from schemas.events import PurchaseModel
from schemas.pools import Pool, PoolCatalogue

# -- the demo region ------------------------------------------------------------------------

# (family, sizes, memory GiB per vCPU, GPUs per instance per 12 vCPU, guaranteed EUR/vCPU-h)
_FAMILIES: tuple[tuple[str, tuple[int, ...], int, int, float], ...] = (
    ("c7-amd", (2, 4, 8, 16, 32, 64), 4, 0, 0.038),
    ("c6-intel", (8, 16, 32), 4, 0, 0.034),
    ("c8-arm", (8, 16, 32), 4, 0, 0.030),
    ("m7-amd", (8, 16, 32, 64), 8, 0, 0.048),
    ("m6-intel", (16, 32), 8, 0, 0.044),
    ("h7-hpc", (32, 64), 4, 0, 0.052),
    ("g5-a100", (12, 24, 48), 10, 1, 0.310),
    ("l4-gpu", (8, 16), 6, 1, 0.140),
)
_GPU_FAMILIES = frozenset({"g5-a100", "l4-gpu"})
_GUARANTEED = frozenset(
    {("c7-amd", 8), ("c7-amd", 16), ("c7-amd", 32), ("m7-amd", 16), ("m7-amd", 32)}
    | {("c6-intel", 16), ("c8-arm", 16)}
)
_COMMITTED = frozenset({("c7-amd", 16), ("c7-amd", 32), ("m7-amd", 32), ("g5-a100", 24)})


def _aggregate(family: str, size_vcpu: int, purchase_model: str) -> str:
    if purchase_model == "committed":
        return f"blazar-{family}"  # reserved hosts, apart from the lent ones
    if family in ("c7-amd", "m7-amd"):  # big families span two aggregates by host size
        return f"{family}-{'small' if size_vcpu <= 8 else 'large'}"
    return family


def demo_region(seed: int = 1, region: str = "demo", halls: int = 4) -> PoolCatalogue:
    """The demo region: about 140 pools over `halls` halls (GPU families in all but the first),
    mostly reclaimable, plus guaranteed and committed (Blazar) pools. Deterministic in `seed`.
    """
    rng = random.Random(f"spotcap-pools/{seed}")
    hall_names = [f"hall-{chr(ord('a') + i)}" for i in range(halls)]
    pools: list[Pool] = []
    for hall_index, hall in enumerate(hall_names):
        for family, sizes, gib_per_vcpu, gpu_share, guaranteed_eur in _FAMILIES:
            if family in _GPU_FAMILIES and hall_index == 0 and halls > 1:
                continue
            guaranteed_micros = round(guaranteed_eur * 1_000_000 * rng.uniform(0.97, 1.03))
            for size in sizes:
                models: list[PurchaseModel] = ["reclaimable"]
                if (family, size) in _GUARANTEED:
                    models.append("guaranteed")
                if (family, size) in _COMMITTED:
                    models.append("committed")
                for model in models:
                    shape = (family, size, gib_per_vcpu, gpu_share)
                    pools.append(_demo_pool(rng, hall, shape, model, guaranteed_micros))
    return PoolCatalogue(region, pools)


def _demo_pool(
    rng: random.Random,
    hall: str,
    shape: tuple[str, int, int, int],
    purchase_model: PurchaseModel,
    guaranteed_micros: int,
) -> Pool:
    family, size_vcpu, gib_per_vcpu, gpu_share = shape
    if purchase_model == "reclaimable":
        discount = rng.uniform(0.55, 0.85)
        price = round(guaranteed_micros * (1 - discount))
        # Deeper discounts come from pools the guaranteed tenants reclaim more often.
        expected = round(0.002 + 0.03 * (discount - 0.55) / 0.30 * rng.uniform(0.8, 1.2), 5)
        instances = max(4, rng.randint(384, 1536) // size_vcpu)
    elif purchase_model == "committed":
        price, expected = round(guaranteed_micros * 0.55), 0.0
        instances = max(8, 768 // size_vcpu)
    else:
        price, expected = guaranteed_micros, 0.0
        instances = max(8, 512 // size_vcpu)
    return Pool(
        sku_family=family,
        size_vcpu=size_vcpu,
        memory_gib=size_vcpu * gib_per_vcpu,
        gpus=size_vcpu * gpu_share // 12,
        hall=hall,
        host_aggregate=_aggregate(family, size_vcpu, purchase_model),
        purchase_model=purchase_model,
        capacity_vcpu=instances * size_vcpu,
        expected_interruptions_per_h=expected,
        price_per_vcpu_h_eur_micros=price,
        guaranteed_price_per_vcpu_h_eur_micros=guaranteed_micros,
    )


if __name__ == "__main__":  # regenerate the example: python -m sim.pools [PATH]
    import sys

    target = Path(sys.argv[1] if len(sys.argv) > 1 else "examples/region/demo-region.yaml")
    demo_region().save(target)
    print(f"wrote {target}")
