"""The node's identity and its bundle fetch (ADR-31): mutual TLS with the node's own certificate.

At first boot the node holds no key or certificate, only a single-use enrolment token
(``[bundle] token``, delivered at launch): `NodeIdentityClient.enrol_if_needed` makes the node's
first key on the node and sends its signing request with the token to the bundle service (the
one call made without a client certificate), which unwraps the token once and signs; the token
is deleted then (or when refused: spent or expired). The certificate names the node
(``spiffe://spotcap/<region>/instance/<id>``) and lives an hour.
Once `renew_after` of its life has passed, `NodeIdentityClient.renew_if_due` makes a new key
on the node, sends its signing request over mutual TLS with the current certificate, and
replaces key and certificate atomically: the key never leaves the node. `fetch_bundle` gets the
node's signed bundle and writes it where `agent.bundle.BundleStore` reads it, which verifies
it as always: the service is trusted for transport, the signature for content. A failed fetch
or renewal is a log line; the bundle in use stays (bundles never expire, ADR-15).
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agent.config import BundleConfig

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0


class FetchError(RuntimeError):
    """The bundle service did not answer, or refused; the message says which (no secret), and
    `status` the HTTP status it answered (None: no answer)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Renewal:
    renewed: bool
    expires_at_s: float


class NodeIdentityClient:
    """Speaks to the bundle service as this node, with this node's certificate."""

    def __init__(
        self,
        config: BundleConfig,
        region: str,
        instance_id: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not config.service_url:
            raise FetchError("no [bundle] service_url: this node reads its bundle file only")
        self._config = config
        parts = urlsplit(config.service_url)
        if parts.scheme != "https" or not parts.hostname:
            raise FetchError(
                f"[bundle] service_url {config.service_url!r} must be https://HOST:PORT"
            )
        self._host, self._port = parts.hostname, parts.port or 443
        self._base = f"/v1/nodes/{region}/instance/{instance_id}"
        self._clock = clock

    def _context(self, *, with_certificate: bool = True) -> ssl.SSLContext:
        # The service's certificate must chain to the nodes' CA and name the host in service_url.
        context = ssl.create_default_context(cafile=str(self._config.ca))
        if with_certificate:
            context.load_cert_chain(self._config.certificate, self._config.key)
        return context

    def _call(
        self, method: str, path: str, body: bytes | None = None, *, with_certificate: bool = True
    ) -> bytes:
        try:
            context = self._context(with_certificate=with_certificate)
        except (OSError, ssl.SSLError) as error:
            raise FetchError(f"cannot load this node's certificate and key: {error}") from error
        conn = http.client.HTTPSConnection(
            self._host, self._port, context=context, timeout=TIMEOUT_S
        )
        try:
            conn.request(method, self._base + path, body=body)
            answer = conn.getresponse()
            data = answer.read()
        except (OSError, http.client.HTTPException) as error:
            raise FetchError(f"the bundle service refused the connection: {error}") from error
        finally:
            conn.close()
        if answer.status != 200:
            reason = data.decode("utf-8", "replace").strip()[:300]
            status = answer.status
            raise FetchError(f"the bundle service answered {status}: {reason}", status)
        return data

    def fetch_bundle(self, dest: Path) -> bool:
        """Fetch this node's bundle into `dest` (atomically); whether it changed."""
        data = self._call("GET", "/bundle")
        if dest.exists() and dest.read_bytes() == data:
            return False
        _write_atomically(dest, data, 0o644)
        return True

    def expires_at_s(self) -> tuple[float, float]:
        """(not before, not after) of the certificate in use, in Unix seconds."""
        certificate = x509.load_pem_x509_certificate(self._config.certificate.read_bytes())
        return (
            certificate.not_valid_before_utc.timestamp(),
            certificate.not_valid_after_utc.timestamp(),
        )

    def enrol_if_needed(self) -> bool:
        """The first hop: with no certificate yet and an enrolment token, make this node's
        first key here and have it signed against the token; whether it enrolled now. The key
        is kept before it is sent: a try that failed (the service unreachable, or its answer
        lost) is made again with the same key and token, which the service signs again."""
        if self._config.certificate.exists() or not self._config.token.exists():
            return False
        token = self._config.token.read_text(encoding="ascii").strip()
        if self._config.key.exists():  # an earlier try's key: its request may be signed
            key = _load_key(self._config.key.read_bytes())
        else:
            key = ec.generate_private_key(ec.SECP256R1())
            _write_atomically(self._config.key, _key_pem(key), 0o600)
        body = json.dumps({"token": token, "csr": _csr_pem(key)}).encode()
        try:
            data = self._call("POST", "/enrol", body, with_certificate=False)
        except FetchError as error:
            if error.status == 403:  # spent by another key, or expired: never usable again
                self._config.token.unlink(missing_ok=True)
                self._config.key.unlink(missing_ok=True)
            raise
        answer = json.loads(data)
        # The key is in place: the certificate's presence means the identity is complete.
        certificate = str(answer["certificate"]) + "\n" + str(answer["ca"]) + "\n"
        _write_atomically(self._config.certificate, certificate.encode(), 0o644)
        self._config.token.unlink(missing_ok=True)  # spent: of no use to anyone now
        log.info("node enrolled with a key of its own; its certificate expires at %d",
                 answer["expires_at_s"])  # fmt: skip
        return True

    def renew_if_due(self) -> Renewal:
        """Renew once `renew_after` of the certificate's life has passed."""
        start, end = self.expires_at_s()
        if self._clock() < start + (end - start) * self._config.renew_after:
            return Renewal(False, end)
        return self.renew()

    def renew(self) -> Renewal:
        """A new key and certificate for this node, now."""
        key = ec.generate_private_key(ec.SECP256R1())
        data = self._call("POST", "/certificate", _csr_pem(key).encode())
        answer = json.loads(data)
        certificate = str(answer["certificate"]) + "\n" + str(answer["ca"]) + "\n"
        key_pem = _key_pem(key)
        # The key first: a crash between the two leaves a new key and an old certificate,
        # which TLS refuses to pair, and the agent says so; never an old key in use.
        old_key = self._config.key.read_bytes()
        _write_atomically(self._config.key, key_pem, 0o600)
        try:
            _write_atomically(self._config.certificate, certificate.encode(), 0o644)
        except OSError:
            _write_atomically(self._config.key, old_key, 0o600)
            raise
        log.info("node certificate renewed; it expires at %d", answer["expires_at_s"])
        return Renewal(True, float(answer["expires_at_s"]))


def _csr_pem(key: ec.EllipticCurvePrivateKey) -> str:
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "spotcap-node")]))
        .sign(key, hashes.SHA256())
    )
    return csr.public_bytes(serialization.Encoding.PEM).decode("ascii")


def _load_key(pem: bytes) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(pem, None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("this node's key file does not hold an EC private key: delete it")
    return key


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write_atomically(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def identity_round(client: NodeIdentityClient, bundle_path: Path) -> str:
    """One round of the agent's identity task: renew the certificate if due, then fetch the
    bundle; what happened, in a few words (a failure is said, never raised: the bundle in use
    stays)."""
    done = []
    try:
        if client.enrol_if_needed():
            done.append("enrolled")
        if client.renew_if_due().renewed:
            done.append("certificate renewed")
        done.append("bundle fetched" if client.fetch_bundle(bundle_path) else "bundle unchanged")
    except (FetchError, OSError, ValueError) as error:
        log.warning("bundle service: %s; keeping the bundle in use", error)
        done.append(f"failed: {error}")
    return ", ".join(done)
