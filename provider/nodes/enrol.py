"""Enrolment at boot (ADR-31): every instance the actuator launched gets its first node
certificate, and its termination revokes it.

`Enroller` follows the lifecycle the actuator reads: for each ``instance_launched`` it asks the
node authority (`NodeAuthority.enrolment_token`, OpenBao) for the node's single-use enrolment
token (a response-wrapping token of minutes naming the node and a nonce) and delivers it to
the node's boot folder, ``<nodes dir>/<instance id>/`` (what the instance's config drive
carries to its agent): ``node.token`` (mode 0600) and ``ca.pem``, no key and no certificate.
The agent makes its first key itself and enrols with the token through the bundle service,
then renews over mutual TLS before expiry (`agent.identity`). A node already delivered
(``node.token`` or ``node.pem`` present: after a restart the log is read again) is not
enrolled again;
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

from provider.authority import Backoff, openbao_client, openbao_from_env
from provider.nodes.authority import (
    Journalled,
    NodeAuthority,
    NodeAuthorityError,
    NodeAuthorityUnavailableError,
    Revoker,
)
from provider.nodes.identity import NodeIdentity
from schemas.events import Envelope, InstanceDeleted, InstanceLaunched, InstanceLost

log = logging.getLogger("spotcap.nodes")

NODE_KEY, NODE_CERTIFICATE, NODE_CA = "node.key", "node.pem", "ca.pem"
NODE_TOKEN = "node.token"


def _write(path: Path, data: str, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    tmp.replace(path)


def deliver(token: str, ca_pem: str, folder: Path) -> None:
    """Put a node's single-use enrolment token (mode 0600) and the nodes' CA in its boot
    folder; the token last, so that its presence means the delivery is complete. No key or
    certificate: the node makes its key itself and enrols with the token (`agent.identity`)."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    _write(folder / NODE_CA, ca_pem.strip() + "\n", 0o644)
    _write(folder / NODE_TOKEN, token + "\n", 0o600)


class Enroller(Journalled):
    """Enrols each launched node and delivers its identity to `nodes_dir/<instance id>`.

    With a `journal` (a file in the actuator's state folder) a pending enrolment survives the
    process: each launch is appended and fsync'd when it is observed (``launch <region>
    <instance> <workload>``), before the actuator can store a position past it; each
    enrolment is announced before OpenBao is asked (``enrolling <region> <instance>``) and
    closed once the identity is delivered (``delivered ...``); a deletion or loss is
    ``gone ...``. An enroller started on the journal of one that died (kill -9) enrols what
    that one left pending, once: a node whose enrolment was announced and not delivered may
    hold a certificate no node has (issued, then the process died before the record or the
    files were written), so every live certificate naming it is revoked first
    (`NodeAuthority.live_serials`), and the node is left with exactly one. A node gone before
    its delivery is never enrolled, and one announced is cleaned the same way."""

    def __init__(
        self,
        authority: NodeAuthority,
        nodes_dir: Path,
        journal: Path | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self._authority = authority
        self.nodes_dir = nodes_dir
        self.pending: dict[NodeIdentity, str] = {}
        """Identity -> workload, launched and not delivered yet."""
        self.gone: set[NodeIdentity] = set()
        self.enrolled: list[NodeIdentity] = []
        """Nodes whose enrolment token this enroller delivered, in order."""
        self._ca_pem: str | None = None
        self.unclean: set[NodeIdentity] = set()
        """Enrolments announced and not delivered (a journal's earlier run): their stray
        certificates are revoked before anything else is done for them."""
        self.cleaned: list[str] = []
        """Serials revoked as strays of an enrolment that never reached its node."""
        super().__init__(journal, backoff)

    def folder(self, identity: NodeIdentity) -> Path:
        return self.nodes_dir / identity.instance_id

    def delivered(self, identity: NodeIdentity) -> bool:
        """Its token was delivered (and perhaps already spent: then the node's certificate is
        there instead)."""
        folder = self.folder(identity)
        return (folder / NODE_TOKEN).exists() or (folder / NODE_CERTIFICATE).exists()

    def _load(self, journal: Path) -> None:
        if not journal.exists():
            return
        announced: set[NodeIdentity] = set()
        for line in journal.read_text(encoding="utf-8").splitlines():
            what, *words = line.split(" ")
            if len(words) < 2:
                continue  # a line cut short by the death: its fsync never returned
            identity = NodeIdentity(words[0], words[1])
            if what == "launch" and len(words) == 3:
                if identity not in self.gone and not self.delivered(identity):
                    self.pending.setdefault(identity, words[2])
            elif what == "enrolling":
                announced.add(identity)
            elif what == "delivered":
                announced.discard(identity)
                self.pending.pop(identity, None)
            elif what == "gone":
                self.gone.add(identity)
                self.pending.pop(identity, None)
        # An announced enrolment whose files are complete was delivered: the death came
        # between the files and the journal's line.
        self.unclean = {i for i in announced if not self.delivered(i)}
        # Compacted: what is still to do, and the nodes gone (so a launch read again from the
        # log is not enrolled), atomically replaced.
        lines = [f"gone {i.region} {i.instance_id}\n" for i in sorted(self.gone, key=str)]
        lines += [f"launch {i.region} {i.instance_id} {w}\n" for i, w in self.pending.items()]
        lines += [f"enrolling {i.region} {i.instance_id}\n" for i in sorted(self.unclean, key=str)]
        self._compact(journal, lines)

    def observe(self, envelope: Envelope) -> None:
        payload = envelope.payload
        if isinstance(payload, InstanceLaunched):
            self._open()
            identity = NodeIdentity(envelope.region, payload.instance_id)
            known = identity in self.pending or identity in self.gone
            if not known and not self.delivered(identity):
                self._append(
                    f"launch {identity.region} {identity.instance_id} {payload.workload_id}"
                )
                self.pending[identity] = payload.workload_id
        elif isinstance(payload, InstanceDeleted | InstanceLost):
            self._open()
            identity = NodeIdentity(envelope.region, payload.instance_id)
            if identity not in self.gone:
                self._append(f"gone {identity.region} {identity.instance_id}")
                self.gone.add(identity)
            self.pending.pop(identity, None)

    def drain(self) -> int:
        """Clean what a dead enroller left half done, then enrol and deliver what is pending;
        how many are still pending. Inside OpenBao's backoff nothing is asked."""
        self._open()
        if (self.pending or self.unclean) and self._waiting():
            return len(self.pending)
        if self.unclean:
            self._clean()
            if self._waiting():
                return len(self.pending)
        for identity, workload in list(self.pending.items()):
            if identity in self.unclean:
                continue  # its strays first
            try:
                record = self._authority.record(identity)
                if record is not None and record.retired:  # gone before it was enrolled
                    del self.pending[identity]
                    continue
            except NodeAuthorityUnavailableError as error:  # the others would wait as long
                self._unreachable(f"enrol {identity}", len(self.pending) - 1, error)
                break
            except NodeAuthorityError as error:
                self._answered()
                log.warning("cannot enrol %s yet (tried again later): %s", identity, error)
                continue
            self._append(f"enrolling {identity.region} {identity.instance_id}")
            try:
                if self._ca_pem is None:
                    self._ca_pem = self._authority.ca_pem()
                token = self._authority.enrolment_token(identity, workload)
            except NodeAuthorityUnavailableError as error:  # the others would wait as long
                self._unreachable(f"enrol {identity}", len(self.pending) - 1, error)
                self.unclean.add(identity)  # it may have been issued: check before again
                break
            except NodeAuthorityError as error:
                self._answered()
                log.warning("cannot enrol %s yet (tried again later): %s", identity, error)
                self.unclean.add(identity)  # it may have been issued: check before again
                continue
            self._answered()
            deliver(token, self._ca_pem, self.folder(identity))
            self._append(f"delivered {identity.region} {identity.instance_id}")
            self.enrolled.append(identity)
            del self.pending[identity]
        return len(self.pending)

    def _clean(self) -> None:
        """Revoke every live certificate of the nodes whose enrolment may have been issued
        and not delivered (one read of the engine's certificates for all of them)."""
        try:
            found = self._authority.live_serials(*sorted(self.unclean, key=str))
        except NodeAuthorityUnavailableError as error:
            self._unreachable("look for stray certificates", len(self.pending), error)
            return
        except NodeAuthorityError as error:
            log.warning("cannot look for stray certificates yet (tried again later): %s", error)
            return
        for identity, strays in found.items():
            try:
                self._authority.revoke_serials(identity, strays)
            except NodeAuthorityUnavailableError as error:
                self._unreachable(f"clean up {identity}", len(self.unclean) - 1, error)
                return
            except NodeAuthorityError as error:
                log.warning("cannot clean up %s yet (tried again later): %s", identity, error)
                continue
            self.cleaned += strays
            self.unclean.discard(identity)

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None


class NodeLifecycle:
    """The actuator's follower of nodes: enrolment at launch, revocation at the end."""

    def __init__(self, enroller: Enroller, revoker: Revoker) -> None:
        self.enroller, self.revoker = enroller, revoker

    def observe(self, envelope: Envelope) -> None:
        self.enroller.observe(envelope)
        self.revoker.observe(envelope)

    def drain(self) -> int:
        return self.enroller.drain() + self.revoker.drain()

    def close(self) -> None:
        self.enroller.close()
        self.revoker.close()


def nodes_from_env(
    environ: Mapping[str, str], state_folder: Path
) -> NodeLifecycle | Revoker | None:
    """The actuator's follower of nodes as the environment configures it:
    SPOTCAP_NODES_PKI_MOUNT (the nodes' PKI engine; unset: None) revokes at deletion or loss
    (durable in `state_folder`/revocations); with SPOTCAP_NODES_DIR too, every launched node
    is enrolled and its identity delivered under that folder (pending enrolments durable in
    `state_folder`/enrolments). OpenBao at BAO_ADDR (else
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
    backoff = Backoff()  # one OpenBao: a failure of either follower holds both back
    revoker = Revoker(authority, state_folder / "revocations", backoff)
    if not nodes_dir:
        return revoker
    enroller = Enroller(authority, Path(nodes_dir), state_folder / "enrolments", backoff)
    return NodeLifecycle(enroller, revoker)


__all__ = ["Enroller", "NodeLifecycle", "deliver", "nodes_from_env"]
