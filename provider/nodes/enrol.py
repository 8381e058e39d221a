"""Enrolment at boot (ADR-31): every instance the actuator launched gets its first node
certificate, and its termination revokes it.

`Enroller` follows the lifecycle the actuator reads: for each ``instance_launched`` it asks the
node authority (`NodeAuthority.enrol`, OpenBao's PKI engine) for the node's first key and
certificate and delivers them to the node's boot folder, ``<nodes dir>/<instance id>/`` (what
the instance's config drive carries to its agent): ``node.key`` (mode 0600), ``node.pem`` (the
certificate and the nodes' CA) and ``ca.pem``. The agent's ``[bundle]`` section names them; it
renews them itself over mutual TLS before they expire (`agent.identity`). A node already
delivered (``node.pem`` present: after a restart the log is read again) is not enrolled again;
a node whose instance is gone (retired, or deleted in the same read) is not enrolled at all.
An enrolment OpenBao refused waits for the next `drain`.

`NodeLifecycle` is the actuator's one follower for both ends: enrolment at launch, revocation
(`Revoker`) at deletion or loss.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from provider.authority import openbao_client, openbao_from_env
from provider.nodes.authority import (
    Enrolment,
    NodeAuthority,
    NodeAuthorityError,
    NodeAuthorityUnavailableError,
    Revoker,
)
from provider.nodes.identity import NodeIdentity
from schemas.events import Envelope, InstanceDeleted, InstanceLaunched, InstanceLost

log = logging.getLogger("spotcap.nodes")

NODE_KEY, NODE_CERTIFICATE, NODE_CA = "node.key", "node.pem", "ca.pem"


def _write(path: Path, data: str, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    tmp.replace(path)


def deliver(enrolment: Enrolment, folder: Path) -> None:
    """Put a node's key, certificate (with the CA) and CA in its boot folder; the certificate
    last, so that its presence means the node's identity is complete."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    _write(folder / NODE_KEY, enrolment.private_key_pem or "", 0o600)
    _write(folder / NODE_CA, enrolment.ca_pem + "\n", 0o644)
    _write(folder / NODE_CERTIFICATE, f"{enrolment.certificate_pem}\n{enrolment.ca_pem}\n", 0o644)


class Enroller:
    """Enrols each launched node and delivers its identity to `nodes_dir/<instance id>`."""

    def __init__(self, authority: NodeAuthority, nodes_dir: Path) -> None:
        self._authority = authority
        self.nodes_dir = nodes_dir
        self.pending: dict[NodeIdentity, str] = {}
        """Identity -> workload, launched and not delivered yet."""
        self.gone: set[NodeIdentity] = set()
        self.enrolled: list[str] = []
        """Serials issued by this enroller, in order."""

    def folder(self, identity: NodeIdentity) -> Path:
        return self.nodes_dir / identity.instance_id

    def observe(self, envelope: Envelope) -> None:
        payload = envelope.payload
        if isinstance(payload, InstanceLaunched):
            identity = NodeIdentity(envelope.region, payload.instance_id)
            delivered = (self.folder(identity) / NODE_CERTIFICATE).exists()
            if identity not in self.gone and not delivered:
                self.pending[identity] = payload.workload_id
        elif isinstance(payload, InstanceDeleted | InstanceLost):
            identity = NodeIdentity(envelope.region, payload.instance_id)
            self.gone.add(identity)
            self.pending.pop(identity, None)

    def drain(self) -> int:
        """Enrol and deliver what is pending; how many are still pending."""
        for identity, workload in list(self.pending.items()):
            try:
                record = self._authority.record(identity)
                if record is not None and record.retired:  # gone before it was enrolled
                    del self.pending[identity]
                    continue
                enrolment = self._authority.enrol(identity, workload)
            except NodeAuthorityUnavailableError as error:  # the others would wait as long
                log.warning("cannot enrol %s nor the %d other(s) pending yet (tried again "
                            "later): %s", identity, len(self.pending) - 1, error)  # fmt: skip
                break
            except NodeAuthorityError as error:
                log.warning("cannot enrol %s yet (tried again later): %s", identity, error)
                continue
            deliver(enrolment, self.folder(identity))
            self.enrolled.append(enrolment.serial)
            del self.pending[identity]
        return len(self.pending)


class NodeLifecycle:
    """The actuator's follower of nodes: enrolment at launch, revocation at the end."""

    def __init__(self, enroller: Enroller, revoker: Revoker) -> None:
        self.enroller, self.revoker = enroller, revoker

    def observe(self, envelope: Envelope) -> None:
        self.enroller.observe(envelope)
        self.revoker.observe(envelope)

    def drain(self) -> int:
        return self.enroller.drain() + self.revoker.drain()


def nodes_from_env(
    environ: Mapping[str, str], state_folder: Path
) -> NodeLifecycle | Revoker | None:
    """The actuator's follower of nodes as the environment configures it:
    SPOTCAP_NODES_PKI_MOUNT (the nodes' PKI engine; unset: None) revokes at deletion or loss
    (durable in `state_folder`/revocations); with SPOTCAP_NODES_DIR too, every launched node
    is enrolled and its identity delivered under that folder. OpenBao at BAO_ADDR (else
    VAULT_ADDR) with BAO_TOKEN (else VAULT_TOKEN)."""
    mount = environ.get("SPOTCAP_NODES_PKI_MOUNT")
    nodes_dir = environ.get("SPOTCAP_NODES_DIR")
    if not mount:
        if nodes_dir:
            raise NodeAuthorityError(
                "SPOTCAP_NODES_DIR needs SPOTCAP_NODES_PKI_MOUNT, the nodes' PKI engine that "
                "issues their certificates"
            )
        return None
    found = openbao_from_env(environ)
    if found is None:
        raise NodeAuthorityError(
            "SPOTCAP_NODES_PKI_MOUNT needs OpenBao: set BAO_ADDR (or VAULT_ADDR) and BAO_TOKEN "
            f"(or VAULT_TOKEN), a token that may issue and revoke in {mount}"
        )
    authority = NodeAuthority(openbao_client(*found), mount=mount)
    revoker = Revoker(authority, state_folder / "revocations")
    if not nodes_dir:
        return revoker
    return NodeLifecycle(Enroller(authority, Path(nodes_dir)), revoker)


__all__ = ["Enroller", "NodeLifecycle", "deliver", "nodes_from_env"]
