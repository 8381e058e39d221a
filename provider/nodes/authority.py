"""The node authority (ADR-31): issues, renews and revokes nodes' certificates through OpenBao's
PKI engine, and keeps each node's record (its workload, its certificates' serials) in OpenBao's
KV engine, beside the certificates it describes.

* At launch, `enrolment_token` makes the node's first hop: a single-use response-wrapping
  token (minutes of life) naming the node and a nonce its record holds; the launch path puts
  only that on the node. The node makes its first key itself and sends its CSR with the token
  (through the bundle service); `enrol_with_token` unwraps it once and signs, with the node's
  SPIFFE ID as the only name and a short TTL. (`enrol`, where OpenBao makes the key, is kept
  for tests that need a node's certificate without booting an agent.)
* Before expiry the agent sends a certificate signing request over mutual TLS with its current
  certificate; `renew` signs it for the same identity only: the new key never leaves the node.
* When the instance is deleted or lost, `revoke` revokes every certificate it still holds and
  retires its record: the bundle service refuses it from then on, even before a CRL is read.

The token it holds may issue, sign and revoke on the ``node`` role and read and write the
records; a node holds none of it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from provider.authority import Backoff, openbao_client, openbao_from_env, unreachable
from provider.nodes.identity import NodeIdentity, identity_of_certificate, serial_text
from schemas.events import Envelope, InstanceDeleted, InstanceLost

log = logging.getLogger("spotcap.nodes")

NODE_ROLE = "node"
SERVICE_ROLE = "bundle-service"
NODE_TTL_S = 3600
ENROLMENT_TOKEN_TTL_S = 300
"""A first-hop token's life: minutes, enough for an instance to boot and unwrap it once."""
"""A node certificate's life: short, so that a stolen one is worth little for long (ADR-31)."""
RECORDS = "spotcap/nodes"


class NodeAuthorityError(RuntimeError):
    """The authority refused or could not act; the message says why and never holds a secret."""


class NodeAuthorityUnavailableError(NodeAuthorityError):
    """OpenBao could not be reached (down, paused, sealed): nothing was refused; try later."""


def _failed(what: str, error: Exception) -> NodeAuthorityError:
    kind = NodeAuthorityUnavailableError if unreachable(error) else NodeAuthorityError
    return kind(f"cannot {what}: {_why(error)}")


@dataclass(frozen=True, slots=True)
class Enrolment:
    """A certificate issued to a node (the private key only when OpenBao generated it)."""

    identity: NodeIdentity
    certificate_pem: str
    ca_pem: str
    serial: str
    expires_at_s: int
    private_key_pem: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What the authority knows of a node: its workload, its unexpired serials, and whether it
    is retired (its instance deleted or lost)."""

    identity: NodeIdentity
    workload_id: str
    serials: dict[str, int]
    """Serial -> expiry (Unix seconds) of every certificate issued and not yet expired."""
    retired: bool = False
    nonce: str = field(default="", repr=False)
    """The enrolment nonce the node's single-use token names ("" once used, or none made)."""
    redeemed_by: str = field(default="", repr=False)
    """SHA-256 (hex) of the node's token with the public key whose signing request spent it
    ("" if none yet): the same token and key may ask again after a signature that failed or
    an answer that was lost, until `redeemed_until`; another key is refused (a theft?)."""
    redeemed_until: int = 0


class EnrolmentTokenError(NodeAuthorityError):
    """An enrolment token was refused: already unwrapped (used twice, or stolen and used),
    expired, never issued, or for another node. Possibly a theft: said without the token."""


def _why(error: Exception) -> str:
    errors = getattr(error, "errors", None)
    if isinstance(errors, list) and errors:
        return "; ".join(str(e) for e in errors)
    if isinstance(error, OSError):
        return f"OpenBao is unreachable: {type(error).__name__}"
    return type(error).__name__


def setup_pki(
    client: Any, *, mount: str = "pki", node_ttl_s: int = NODE_TTL_S, trust_domain: str = "spotcap"
) -> str:
    """Mount a PKI engine at `mount` with a root CA and the ``node`` and ``bundle-service``
    roles; the CA certificate (PEM). For a fresh OpenBao (dev servers, tests); production
    points the roles at its own intermediate CA."""
    client.sys.enable_secrets_engine("pki", path=mount, config={"max_lease_ttl": "87600h"})
    answer = client.adapter.post(
        f"/v1/{mount}/root/generate/internal",
        json={"common_name": f"{trust_domain} nodes", "ttl": "87600h", "key_type": "ec"},
    )
    client.adapter.post(
        f"/v1/{mount}/roles/{NODE_ROLE}",
        json={
            "allowed_uri_sans": f"spiffe://{trust_domain}/*",
            "allow_any_name": False,
            "require_cn": False,
            "enforce_hostnames": False,
            "server_flag": False,
            "client_flag": True,
            "key_type": "any",
            "ttl": f"{node_ttl_s}s",
            "max_ttl": f"{node_ttl_s}s",
            "use_csr_sans": False,
            "use_csr_common_name": False,
            "no_store": False,
        },
    )
    client.adapter.post(
        f"/v1/{mount}/roles/{SERVICE_ROLE}",
        json={
            "allow_any_name": True,
            "allow_ip_sans": True,
            "allow_localhost": True,
            "enforce_hostnames": False,
            "server_flag": True,
            "client_flag": False,
            "key_type": "ec",
            "ttl": "720h",
            "max_ttl": "720h",
        },
    )
    return str(answer["data"]["certificate"])


class NodeAuthority:
    """Issues, renews and revokes node certificates; keeps the nodes' records."""

    def __init__(
        self,
        client: Any,
        *,
        mount: str = "pki",
        kv_mount: str = "secret",
        ttl_s: int = NODE_TTL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        # `client` is an hvac.Client (hvac ships no type information).
        self._client = client
        self._mount = mount
        self._kv_mount = kv_mount
        self.ttl_s = ttl_s
        self._clock = clock

    # -- certificates ------------------------------------------------------------------------

    def enrol(self, identity: NodeIdentity, workload_id: str) -> Enrolment:
        """A node's first certificate and key, at launch; records the node's workload."""
        data = self._post(
            f"issue/{NODE_ROLE}",
            {"uri_sans": identity.uri, "ttl": f"{self.ttl_s}s", "key_type": "ec", "key_bits": 256},
            f"issue a certificate for {identity}",
        )
        enrolment = self._enrolment(identity, data, with_key=True)
        record = self.record(identity)
        serials = dict(record.serials) if record is not None and not record.retired else {}
        self._save(NodeRecord(identity, workload_id, self._live(serials, enrolment)))
        return enrolment

    def renew(self, identity: NodeIdentity, csr_pem: str) -> Enrolment:
        """Sign the node's new key (its CSR) for the same identity; refused for a retired or
        unknown node. The CSR's own names are ignored: the identity is the caller's."""
        record = self.record(identity)
        if record is None or record.retired:
            state = "retired (its instance was deleted or lost)" if record else "not enrolled"
            raise NodeAuthorityError(f"{identity} is {state}: no certificate is renewed for it")
        data = self._post(
            f"sign/{NODE_ROLE}",
            {"csr": csr_pem, "uri_sans": identity.uri, "ttl": f"{self.ttl_s}s"},
            f"sign the renewal of {identity}",
        )
        enrolment = self._enrolment(identity, data, with_key=False)
        self._save(NodeRecord(identity, record.workload_id, self._live(record.serials, enrolment)))
        return enrolment

    def enrolment_token(
        self, identity: NodeIdentity, workload_id: str, ttl_s: int = ENROLMENT_TOKEN_TTL_S
    ) -> str:
        """The node's first hop: a single-use OpenBao response-wrapping token (`ttl_s` of
        life) wrapping the node's name and a fresh nonce, which the node's record now holds;
        the node unwraps it once through the bundle service (`enrol_with_token`) to have its
        own key signed. No key or certificate is made here. A new token voids any earlier
        one of the node (its nonce is replaced). Refused for a retired node."""
        record, version = self._read(identity)
        if record is not None and record.retired:
            raise NodeAuthorityError(f"{identity} is retired: no enrolment token is made for it")
        nonce = secrets.token_hex(16)
        serials = dict(record.serials) if record is not None else {}
        # Check-and-set on the version read: a write of an earlier try that OpenBao serves
        # late (paused, then resumed) cannot replace this nonce with its own.
        self._save(NodeRecord(identity, workload_id, serials, nonce=nonce), cas=version)
        payload = {"region": identity.region, "instance": identity.instance_id, "nonce": nonce}
        try:
            answer = self._client.sys.wrap(payload=payload, ttl=f"{ttl_s}s")
        except Exception as error:
            raise _failed(f"wrap the enrolment token of {identity}", error) from error
        return str(answer["wrap_info"]["token"])

    def enrol_with_token(self, identity: NodeIdentity, token: str, csr_pem: str) -> Enrolment:
        """Sign a node's first key (its CSR, made on the node) for `identity` against the
        single-use token delivered to it: OpenBao unwraps it (a second unwrap is refused by
        OpenBao itself), and it must name this node and the nonce its record holds.

        Before signing, the record names the key that spent the token (`redeemed_by`), so
        that the node is not stranded when the signature fails (OpenBao unreachable) or its
        answer is lost: the same key presenting the spent token again, within the node
        certificate's life, is signed; a new token or the node's retirement ends that. Only
        the holder of that key can make its request, or use what is signed.
        `EnrolmentTokenError` (a possible theft) if the token is used by another key,
        expired, unknown or another node's."""
        key = _redemption(token, csr_pem, identity)
        try:
            answer = self._client.sys.unwrap(token=token)
        except Exception as error:
            if unreachable(error):
                raise _failed(f"unwrap the enrolment token of {identity}", error) from error
            record = self.record(identity)
            if record is not None and self._redeemed_by(record, key):
                return self._sign_first(record, csr_pem)
            raise EnrolmentTokenError(
                f"the enrolment token of {identity} is not valid: already used (a possible "
                f"theft, if not by the node), expired or never issued (OpenBao: {_why(error)}); "
                "relaunch the instance"
            ) from error
        data = (answer or {}).get("data") or {}
        named = NodeIdentity(str(data.get("region")), str(data.get("instance")))
        if named != NodeIdentity(identity.region, identity.instance_id):
            raise EnrolmentTokenError(
                f"the enrolment token presented for {identity} is {named}'s: a node enrols "
                f"only with its own token (that token is spent now; a possible theft)"
            )
        record, version = self._read(identity)
        if record is None or record.retired:
            state = "retired (its instance was deleted or lost)" if record else "not enrolled"
            raise NodeAuthorityError(f"{identity} is {state}: no certificate is made for it")
        if not record.nonce or not secrets.compare_digest(record.nonce, str(data.get("nonce"))):
            raise EnrolmentTokenError(
                f"the enrolment token presented for {identity} is not its latest (spent, or "
                "replaced by a newer one): a possible theft or replay"
            )
        # The token is spent from here on: the record names the key that spent it, before
        # the signature, checked and set on the version read (a newer token voids this one).
        until = int(self._clock()) + self.ttl_s
        redeemed = dataclasses.replace(record, redeemed_by=key, redeemed_until=until)
        self._save(redeemed, cas=version)
        return self._sign_first(redeemed, csr_pem)

    def _redeemed_by(self, record: NodeRecord, key: str) -> bool:
        return (
            not record.retired
            and bool(record.redeemed_by)
            and secrets.compare_digest(record.redeemed_by, key)
            and self._clock() < record.redeemed_until
        )

    def _sign_first(self, record: NodeRecord, csr_pem: str) -> Enrolment:
        identity = record.identity
        data = self._post(
            f"sign/{NODE_ROLE}",
            {"csr": csr_pem, "uri_sans": identity.uri, "ttl": f"{self.ttl_s}s"},
            f"sign the first key of {identity}",
        )
        enrolment = self._enrolment(identity, data, with_key=False)
        live = self._live(record.serials, enrolment)
        self._save(dataclasses.replace(record, serials=live, nonce=""))
        return enrolment

    def revoke(self, identity: NodeIdentity) -> list[str]:
        """Revoke every unexpired certificate of the node and retire it; the serials revoked.
        Idempotent: a second call revokes nothing more."""
        record = self.record(identity)
        if record is None:
            return []
        revoked = []
        for serial in sorted(record.serials):
            self._post("revoke", {"serial_number": serial}, f"revoke {serial} of {identity}")
            revoked.append(serial)
        self._save(NodeRecord(identity, record.workload_id, {}, retired=True))
        return revoked

    def live_serials(self, *identities: NodeIdentity) -> dict[NodeIdentity, list[str]]:
        """For each node, every certificate OpenBao issued in this engine that names it, is
        unexpired and not revoked, whether or not the node's record lists it: one issued by an
        enrolment that died before the record was written is found here too. Reads every
        stored certificate of the engine once (LIST ``certs``, then each): for recovery."""
        found: dict[NodeIdentity, list[str]] = {i: [] for i in identities}
        try:
            listed = self._client.adapter.list(f"/v1/{self._mount}/certs")
        except Exception as error:
            if type(error).__name__ == "InvalidPath":  # none issued yet
                return found
            raise _failed("list the certificates", error) from error
        keys = (listed or {}).get("data", {}).get("keys", [])
        now = self._clock()
        for key in keys:
            try:
                data = self._client.adapter.get(f"/v1/{self._mount}/cert/{key}")["data"]
            except Exception as error:
                raise _failed(f"read certificate {key}", error) from error
            if int(data.get("revocation_time") or 0) != 0:
                continue
            certificate = x509.load_pem_x509_certificate(str(data["certificate"]).encode())
            if certificate.not_valid_after_utc.timestamp() <= now:
                continue
            try:
                named = identity_of_certificate(certificate)
            except ValueError:  # the bundle service's, or the CA's: no node's name
                continue
            if named in found:
                found[named].append(serial_text(certificate))
        return {i: sorted(serials) for i, serials in found.items()}

    def revoke_serials(self, identity: NodeIdentity, serials: list[str]) -> None:
        """Revoke these certificates of a node that stays enrolled (an enrolment that was
        never delivered), and drop them from its record."""
        for serial in serials:
            self._post("revoke", {"serial_number": serial}, f"revoke {serial} of {identity}")
        record = self.record(identity)
        if record is not None:
            kept = {s: e for s, e in record.serials.items() if s not in serials}
            self._save(dataclasses.replace(record, serials=kept))

    def is_revoked(self, serial: str) -> bool:
        """Whether OpenBao has revoked the certificate with that serial (an unknown serial
        counts as revoked: it was not issued here)."""
        try:
            answer = self._client.adapter.get(f"/v1/{self._mount}/cert/{serial}")
        except Exception as error:  # hvac's InvalidPath for an unknown serial
            if type(error).__name__ == "InvalidPath":
                return True
            raise _failed(f"read certificate {serial}", error) from error
        return int(answer["data"].get("revocation_time") or 0) != 0

    def service_certificate(self, host: str) -> Enrolment:
        """A server certificate (and key) for the bundle service at `host` (an IP or name)."""
        key = "ip_sans" if host.replace(".", "").isdigit() or ":" in host else "alt_names"
        data = self._post(
            f"issue/{SERVICE_ROLE}",
            {"common_name": "bundle-service", key: host},
            f"issue the bundle service's certificate for {host}",
        )
        return self._enrolment(NodeIdentity("-", "bundle-service"), data, with_key=True)

    def ca_pem(self) -> str:
        try:
            answer = self._client.adapter.get(f"/v1/{self._mount}/ca/pem")
        except Exception as error:
            raise _failed("read the nodes' CA", error) from error
        return answer.text if hasattr(answer, "text") else str(answer)

    # -- records -----------------------------------------------------------------------------

    def record(self, identity: NodeIdentity) -> NodeRecord | None:
        return self._read(identity)[0]

    def _read(self, identity: NodeIdentity) -> tuple[NodeRecord | None, int]:
        """The node's record and its KV version (0: none yet)."""
        try:
            answer = self._client.secrets.kv.v2.read_secret_version(
                path=self._path(identity), mount_point=self._kv_mount,
                raise_on_deleted_version=True,
            )  # fmt: skip
        except Exception as error:
            if type(error).__name__ == "InvalidPath":
                return None, 0
            raise _failed(f"read the record of {identity}", error) from error
        data = answer["data"]["data"]
        version = int(answer["data"].get("metadata", {}).get("version") or 0)
        return NodeRecord(
            identity,
            str(data["workload_id"]),
            {str(k): int(v) for k, v in json.loads(data["serials"]).items()},
            retired=data.get("retired") == "yes",
            nonce=str(data.get("nonce") or ""),
            redeemed_by=str(data.get("redeemed_by") or ""),
            redeemed_until=int(data.get("redeemed_until") or 0),
        ), version

    def _save(self, record: NodeRecord, cas: int | None = None) -> None:
        secret = {
            "workload_id": record.workload_id,
            "serials": json.dumps(record.serials, sort_keys=True),
            "retired": "yes" if record.retired else "no",
            "nonce": record.nonce,
            "redeemed_by": record.redeemed_by,
            "redeemed_until": str(record.redeemed_until),
        }
        try:
            self._client.secrets.kv.v2.create_or_update_secret(
                path=self._path(record.identity), secret=secret, cas=cas,
                mount_point=self._kv_mount,
            )  # fmt: skip
        except Exception as error:
            raise _failed(f"write the record of {record.identity}", error) from error

    def _path(self, identity: NodeIdentity) -> str:
        # Per PKI mount: a record lists the serials of that mount's certificates.
        return f"{RECORDS}/{self._mount}/{identity.region}/{identity.instance_id}"

    # -- helpers -----------------------------------------------------------------------------

    def _live(self, serials: dict[str, int], new: Enrolment) -> dict[str, int]:
        now = self._clock()
        kept = {s: exp for s, exp in serials.items() if exp > now}
        kept[new.serial] = new.expires_at_s
        return kept

    def _post(self, path: str, body: dict[str, Any], what: str) -> dict[str, Any]:
        try:
            answer = self._client.adapter.post(f"/v1/{self._mount}/{path}", json=body)
        except Exception as error:  # hvac's hierarchy and requests' connection errors
            raise _failed(what, error) from error
        return dict(answer["data"]) if answer and answer.get("data") else {}

    def _enrolment(
        self, identity: NodeIdentity, data: dict[str, Any], *, with_key: bool
    ) -> Enrolment:
        pem = str(data["certificate"])
        certificate = x509.load_pem_x509_certificate(pem.encode())
        if identity.region != "-" and identity_of_certificate(certificate) != identity:
            raise NodeAuthorityError(f"OpenBao issued a certificate that does not name {identity}")
        return Enrolment(
            identity,
            pem,
            str(data["issuing_ca"]),
            serial_text(certificate),
            int(certificate.not_valid_after_utc.timestamp()),
            str(data["private_key"]) if with_key else None,
        )


def _redemption(token: str, csr_pem: str, identity: NodeIdentity) -> str:
    """SHA-256 (hex) of the token with the public key the signing request asks to have
    signed (the request's own signature checked: only the key's holder can make it)."""
    try:
        csr = x509.load_pem_x509_csr(csr_pem.encode())
        valid = csr.is_signature_valid
    except ValueError as error:
        raise NodeAuthorityError(
            f"the signing request sent for {identity} is not a PEM certificate signing request"
        ) from error
    if not valid:
        raise NodeAuthorityError(f"the signing request sent for {identity} is not self-signed")
    spki = csr.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(token.encode() + b"\n" + spki).hexdigest()


def revoke_on_loss(envelope: Envelope, authority: NodeAuthority) -> list[str]:
    """On an instance's deletion or loss, revoke its node's certificates (the serials revoked;
    none for any other event)."""
    payload = envelope.payload
    if not isinstance(payload, (InstanceDeleted, InstanceLost)):
        return []
    return authority.revoke(NodeIdentity(envelope.region, payload.instance_id))


class Journalled:
    """A follower of OpenBao with a journal of its own (a file of lines, each synced before it
    goes on; compacted atomically when read back at its first use: `_load` reads it) and the
    authority's backoff (`provider.authority.Backoff`, shared with the other followers of the
    same OpenBao when given): after a request that could not reach OpenBao, a `drain` asks
    nothing until the backoff is over, then tries one node, so a stalled OpenBao costs one
    request's timeout (3 s) per backoff (1 s doubled up to 30 s), not one per step."""

    def __init__(self, journal: Path | None, backoff: Backoff | None = None) -> None:
        self.backoff = backoff if backoff is not None else Backoff()
        self._journal: IO[str] | None = None
        self._journal_path = journal
        # Read at the first observe or drain: the actuator holds its state folder's lock then.
        self._opened = journal is None

    def _open(self) -> None:
        if self._opened or self._journal_path is None:
            return
        self._opened = True
        self._journal_path.parent.mkdir(parents=True, exist_ok=True)
        self._load(self._journal_path)
        self._journal = self._journal_path.open("a", encoding="utf-8")

    def _load(self, journal: Path) -> None:
        raise NotImplementedError

    def _waiting(self) -> bool:
        """Whether OpenBao is inside its backoff: nothing is asked of it in this drain."""
        return not self.backoff.ready()

    def _unreachable(self, what: str, others: int, error: Exception) -> None:
        """A request of `what` did not reach OpenBao: the backoff grows, and says so."""
        wait_s = self.backoff.failed()
        log.warning("cannot %s nor the %d other(s) pending yet (tried again in %.0f s, OpenBao's "
                    "backoff): %s", what, others, wait_s, error)  # fmt: skip

    def _answered(self) -> None:
        if self.backoff.answered():
            log.warning("OpenBao answers again: what waited for it is done now")

    def _append(self, line: str) -> None:
        if self._journal is not None:
            self._journal.write(line + "\n")
            self._journal.flush()
            os.fsync(self._journal.fileno())

    @staticmethod
    def _compact(journal: Path, lines: list[str]) -> None:
        tmp = journal.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as out:
            out.writelines(lines)
            out.flush()
            os.fsync(out.fileno())
        tmp.replace(journal)


class Revoker(Journalled):
    """Revokes the certificates of instances deleted or lost, as their events are folded; a
    revocation OpenBao could not make waits and is tried again at the next `drain`, so a
    control plane that lost OpenBao for a while still revokes every node it saw go.

    With a `journal` (a file in the actuator's state folder) what it was told is durable: each
    retirement is appended and fsync'd (``retire <region> <instance> <event id>``) when it is
    observed, each revocation done after OpenBao answered (``revoked <region> <instance>``). A
    revoker started on the journal of one that died (kill -9) revokes what that one left
    pending, and ignores a retirement it has done already when the log is read again, so each
    node is revoked once. (A death between OpenBao's answer and the ``revoked`` line revokes
    again: OpenBao's revocation is idempotent, and the node's record is retired by then.)"""

    def __init__(
        self, authority: NodeAuthority, journal: Path | None = None, backoff: Backoff | None = None
    ) -> None:
        self._authority = authority
        self.pending: dict[NodeIdentity, str] = {}
        """Identity -> the event id that retired it, not yet revoked."""
        self.revoked: list[str] = []
        """Every serial revoked by this revoker, in order."""
        self.done: set[NodeIdentity] = set()
        """Identities revoked (this run, or a journal's earlier one)."""
        super().__init__(journal, backoff)

    def _load(self, journal: Path) -> None:
        if not journal.exists():
            return
        for line in journal.read_text(encoding="utf-8").splitlines():
            what, *words = line.split(" ")
            if what == "retire" and len(words) == 3:
                identity = NodeIdentity(words[0], words[1])
                if identity not in self.done:
                    self.pending.setdefault(identity, words[2])
            elif what == "revoked" and len(words) == 2:
                identity = NodeIdentity(words[0], words[1])
                self.pending.pop(identity, None)
                self.done.add(identity)
        # Compacted: what is pending and what was done, nothing else (atomically replaced).
        lines = [f"revoked {i.region} {i.instance_id}\n" for i in sorted(self.done, key=str)]
        lines += [f"retire {i.region} {i.instance_id} {e}\n" for i, e in self.pending.items()]
        self._compact(journal, lines)

    def observe(self, envelope: Envelope) -> None:
        payload = envelope.payload
        if isinstance(payload, (InstanceDeleted, InstanceLost)):
            self._open()
            identity = NodeIdentity(envelope.region, payload.instance_id)
            if identity in self.done or identity in self.pending:
                return
            self._append(f"retire {identity.region} {identity.instance_id} {envelope.event_id}")
            self.pending[identity] = envelope.event_id

    def drain(self) -> int:
        """Revoke what is pending (nothing inside OpenBao's backoff); how many nodes are still
        pending."""
        self._open()
        if self.pending and self._waiting():
            return len(self.pending)
        for identity in list(self.pending):
            try:
                self.revoked += self._authority.revoke(identity)
            except NodeAuthorityUnavailableError as error:  # the others would wait as long
                self._unreachable(f"revoke {identity}", len(self.pending) - 1, error)
                break
            except NodeAuthorityError as error:
                self._answered()
                log.warning("cannot revoke %s yet (tried again later): %s", identity, error)
                continue
            self._answered()
            self._append(f"revoked {identity.region} {identity.instance_id}")
            del self.pending[identity]
            self.done.add(identity)
        return len(self.pending)

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None


def revoker_from_env(environ: Mapping[str, str], journal: Path) -> Revoker | None:
    """The actuator's node revoker as the environment configures it: SPOTCAP_NODES_PKI_MOUNT
    (the nodes' PKI engine; unset: None, no revocation), OpenBao at BAO_ADDR (else VAULT_ADDR)
    with BAO_TOKEN (else VAULT_TOKEN); durable in `journal`."""
    mount = environ.get("SPOTCAP_NODES_PKI_MOUNT")
    if not mount:
        return None
    found = openbao_from_env(environ)
    if found is None:
        raise NodeAuthorityError(
            "SPOTCAP_NODES_PKI_MOUNT needs OpenBao: set BAO_ADDR (or VAULT_ADDR) and BAO_TOKEN "
            f"(or VAULT_TOKEN), a token that may revoke in {mount}"
        )
    address, token = found
    return Revoker(NodeAuthority(openbao_client(address, token), mount=mount), journal)
