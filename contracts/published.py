"""The lists admission reads: which workloads have a published contract (ADR-04).

Three renderings of the accepted contracts, all deterministic (sorted by workload id):

* ``published-contracts.json``: every accepted contract with its bundle SHA-256, and the
  feasibility rules that were not checked (``--unchecked``, no pool catalogue), for people
  and tools;
* ``published-contracts.slurm``: the Slurm job_submit filter's list, one ``<workload> <sha256>``
  line per contract whose scheduler is slurm;
* ``spotcap-published-contracts.configmap.yaml``: the ConfigMap the Kyverno policy looks up,
  ``data`` mapping each Kubernetes workload id to its bundle SHA-256.

A contract declares its scheduler, so a Slurm workload's id does not admit pods and a
Kubernetes workload's id does not admit jobs: the node agent drains by the scheduler the
contract names.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import yaml

from contracts.compiler import CompiledContract

PUBLISHED_JSON = "published-contracts.json"
PUBLISHED_SLURM = "published-contracts.slurm"
PUBLISHED_CONFIGMAP = "spotcap-published-contracts.configmap.yaml"
CONFIGMAP_NAME = "spotcap-published-contracts"
DEFAULT_NAMESPACE = "spotcap-system"


def _sorted(accepted: Sequence[CompiledContract]) -> list[CompiledContract]:
    return sorted(accepted, key=lambda c: c.contract.workload)


def published_json(
    accepted: Sequence[CompiledContract],
    unchecked_rules: Sequence[str] = (),
    *,
    signed: bool = True,
) -> bytes:
    entries = [
        {
            "workload_id": c.contract.workload,
            "contract_version": c.contract.version,
            "contract_sha256": c.bundle_sha256,
            "source_sha256": c.source_sha256,
            "scheduler": c.contract.scheduler,
            "tier": c.contract.tier,
            "source": c.path.as_posix(),
            # The authority it holds: the next compile's baseline for two signatures (ADR-30).
            "floor_vcpu": c.contract.floor_vcpu,
            "spend_cap_eur_micros": c.contract.fallback.spend_cap_per_day_eur_micros,
            "approver": c.contract.fallback.approver,
            "approver_key": c.contract.fallback.approver_key,
        }
        for c in _sorted(accepted)
    ]
    document = {
        "format": "spotcap.published/v1",
        "contracts": entries,
        "unchecked_rules": list(unchecked_rules),
        # False when compiled with --unsigned: every node agent refuses these bundles.
        "bundles_signed": signed,
    }
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode("utf-8")


def published_slurm(accepted: Sequence[CompiledContract]) -> bytes:
    lines = [
        "# Workloads with a published spotcap contract for Slurm (read by job_submit.lua).",
        "# Written by `spotcap contracts compile`; one '<workload_id> <bundle sha256>' a line.",
    ]
    lines += [
        f"{c.contract.workload} {c.bundle_sha256}"
        for c in _sorted(accepted)
        if c.contract.scheduler == "slurm"
    ]
    return ("\n".join(lines) + "\n").encode("utf-8")


def published_configmap(
    accepted: Sequence[CompiledContract], namespace: str = DEFAULT_NAMESPACE
) -> bytes:
    document = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIGMAP_NAME,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "spotcap-contracts"},
        },
        "data": {
            c.contract.workload: c.bundle_sha256
            for c in _sorted(accepted)
            if c.contract.scheduler == "kubernetes"
        },
    }
    header = "# Written by `spotcap contracts compile`; read by infra/admission/kyverno.\n"
    text = yaml.safe_dump(document, sort_keys=True, default_flow_style=False)
    return (header + text).encode("utf-8")
