"""The node's identity and its bundle fetch (ADR-31): mutual TLS with the node's own certificate.

The node's key and certificate (``[bundle] key``, ``certificate``) are written at launch; the
certificate names the node (``spiffe://spotcap/<region>/instance/<id>``) and lives an hour.
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
    """The bundle service did not answer, or refused; the message says which (no secret)."""


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

    def _context(self) -> ssl.SSLContext:
        # The service's certificate must chain to the nodes' CA and name the host in service_url.
        context = ssl.create_default_context(cafile=str(self._config.ca))
        context.load_cert_chain(self._config.certificate, self._config.key)
        return context

    def _call(self, method: str, path: str, body: bytes | None = None) -> bytes:
        try:
            context = self._context()
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
            raise FetchError(f"the bundle service answered {answer.status}: {reason}")
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

    def renew_if_due(self) -> Renewal:
        """Renew once `renew_after` of the certificate's life has passed."""
        start, end = self.expires_at_s()
        if self._clock() < start + (end - start) * self._config.renew_after:
            return Renewal(False, end)
        return self.renew()

    def renew(self) -> Renewal:
        """A new key and certificate for this node, now."""
        key = ec.generate_private_key(ec.SECP256R1())
        csr = (
            x509.CertificateSigningRequestBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "spotcap-node")]))
            .sign(key, hashes.SHA256())
        )
        data = self._call("POST", "/certificate", csr.public_bytes(serialization.Encoding.PEM))
        answer = json.loads(data)
        certificate = str(answer["certificate"]) + "\n" + str(answer["ca"]) + "\n"
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
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
        if client.renew_if_due().renewed:
            done.append("certificate renewed")
        done.append("bundle fetched" if client.fetch_bundle(bundle_path) else "bundle unchanged")
    except (FetchError, OSError, ValueError) as error:
        log.warning("bundle service: %s; keeping the bundle in use", error)
        done.append(f"failed: {error}")
    return ", ".join(done)
