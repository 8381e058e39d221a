"""Setting a workload up for checkpoints: its transit key and the policy that reaches it
(ADR-19). Run by whoever administers OpenBao for the workload (its owners, or the security
team), never by the control plane, whose token must not hold this grant.

`provision_workload_key` creates the workload's transit key ``ckpt-<workload>`` (AES-256-GCM,
not exportable) and the policy ``ckpt-<workload>`` that allows exactly the two calls a client
makes with it: a new data key, and unwrapping one. A token issued under that policy is the
workload's key access; `checkpoint.store.provision_bucket` does the same for the bucket.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

__all__ = ["WorkloadKey", "provision_workload_key", "workload_key_name", "workload_key_policy"]


@dataclass(frozen=True, slots=True)
class WorkloadKey:
    mount: str
    key_name: str
    policy_name: str


def workload_key_name(workload_id: str) -> str:
    return f"ckpt-{workload_id}"


def workload_key_policy(workload_id: str, mount: str = "transit") -> str:
    """The policy (HCL) of the workload's key: new data keys and unwrapping, nothing else."""
    name = workload_key_name(workload_id)
    return (
        f'path "{mount}/datakey/plaintext/{name}" {{ capabilities = ["update"] }}\n'
        f'path "{mount}/decrypt/{name}" {{ capabilities = ["update"] }}\n'
    )


def provision_workload_key(
    address: str, admin_token: str, workload_id: str, *, mount: str = "transit"
) -> WorkloadKey:
    """Create (or keep) the workload's transit key and its policy."""
    name = workload_key_name(workload_id)
    mounts = _call(address, admin_token, "GET", "sys/mounts")
    if f"{mount}/" not in (mounts.get("data") or mounts):
        _call(address, admin_token, "POST", f"sys/mounts/{mount}", {"type": "transit"})
    _call(address, admin_token, "POST", f"{mount}/keys/{name}", {"type": "aes256-gcm96"})
    _call(
        address,
        admin_token,
        "PUT",
        f"sys/policies/acl/{name}",
        {"policy": workload_key_policy(workload_id, mount)},
    )
    return WorkloadKey(mount, name, name)


def _call(
    address: str, token: str, method: str, path: str, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{address.rstrip('/')}/v1/{path}",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"X-Vault-Token": token, "Content-Type": "application/json"},
        method=method,
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            raw = answer.read()
    except urllib.error.HTTPError as error:
        raise PermissionError(f"OpenBao {method} {path}: {error.code}") from None
    data = json.loads(raw) if raw else {}
    return data if isinstance(data, dict) else {}
