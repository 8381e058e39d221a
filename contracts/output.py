"""Writing a compile's outputs into the bundle directory: bundles and admission lists.

The directory belongs to the compiler: one ``<workload>.bundle.json`` per accepted contract
(signed when a signer is given), the three admission lists (`published`), and nothing else;
bundles of workloads no longer accepted are removed. Each file is written to a temporary name
and renamed, so a reader (an image build, a ConfigMap sync) never sees half a file.

Every bundle written is also kept under its SHA-256 (``sha256/<contract_sha256>.bundle.json``,
never removed): while a canary runs (ADR-32) the bundle service serves the new bundle to the
canary pools' nodes and the bundle in force, an older one, to the others (`bundle_by_sha`).

`render_outputs` signs and renders everything in memory, so a caller can do whatever may still
fail (signing, encoding and publishing the events) before `write_rendered` touches the disk.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from contracts.bundles import canonical_json, sign_bundle, unsigned_bundle
from contracts.compiler import CompileResult
from contracts.published import (
    DEFAULT_NAMESPACE,
    PUBLISHED_CONFIGMAP,
    PUBLISHED_JSON,
    PUBLISHED_SLURM,
    published_configmap,
    published_json,
    published_slurm,
)
from contracts.signing import Signer

BUNDLE_SUFFIX = ".bundle.json"
BY_SHA = "sha256"


def bundle_file_name(workload: str) -> str:
    return workload + BUNDLE_SUFFIX


def bundle_by_sha(out_dir: Path, contract_sha256: str) -> Path:
    """Where the bundle whose SHA-256 is `contract_sha256` is kept."""
    return out_dir / BY_SHA / (contract_sha256 + BUNDLE_SUFFIX)


def sha_of_bundle_file(data: bytes) -> str:
    """The ``contract_sha256`` of a bundle file's bytes (of its canonical ``bundle`` object)."""
    return hashlib.sha256(canonical_json(json.loads(data)["bundle"])).hexdigest()


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def render_outputs(
    result: CompileResult,
    signer: Signer | None,
    namespace: str = DEFAULT_NAMESPACE,
) -> dict[str, bytes]:
    """File name -> bytes of every bundle (signed when `signer` is given) and admission list."""
    rendered: dict[str, bytes] = {}
    for compiled in result.accepted:
        rendered[bundle_file_name(compiled.contract.workload)] = (
            sign_bundle(compiled.bundle, signer)
            if signer is not None
            else unsigned_bundle(compiled.bundle)
        )
    rendered[PUBLISHED_JSON] = published_json(
        result.accepted, result.unchecked_rules, signed=signer is not None
    )
    rendered[PUBLISHED_SLURM] = published_slurm(result.accepted)
    rendered[PUBLISHED_CONFIGMAP] = published_configmap(result.accepted, namespace)
    return rendered


def write_rendered(out_dir: Path, rendered: dict[str, bytes]) -> list[Path]:
    """Write `rendered` into `out_dir`, bundles first; remove bundles not in it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    bundles = {n: d for n, d in rendered.items() if n.endswith(BUNDLE_SUFFIX)}
    if bundles:
        (out_dir / BY_SHA).mkdir(exist_ok=True)
    for name, data in bundles.items():
        # Rewritten each time: the same bundle may have been written unsigned before.
        _write_atomically(bundle_by_sha(out_dir, sha_of_bundle_file(data)), data)
        _write_atomically(out_dir / name, data)
        written.append(out_dir / name)
    for stale in sorted(out_dir.glob("*" + BUNDLE_SUFFIX)):
        if stale.name not in bundles:
            stale.unlink()
    for name, data in rendered.items():
        if name not in bundles:
            _write_atomically(out_dir / name, data)
            written.append(out_dir / name)
    return written


def write_outputs(
    result: CompileResult,
    out_dir: Path,
    signer: Signer | None,
    namespace: str = DEFAULT_NAMESPACE,
) -> list[Path]:
    """Write the bundles and admission lists of `result`; return the paths written."""
    return write_rendered(out_dir, render_outputs(result, signer, namespace))
