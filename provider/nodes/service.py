"""The bundle service (ADR-31): HTTPS with mutual TLS, through which each node fetches its own
signed bundle and renews its own certificate.

TLS refuses a client certificate not issued by the nodes' CA before any request is read, and
every request but the first hop's is refused without one. A request is then answered only
for the node its certificate names, and only while that certificate is not revoked and the
node not retired:

* ``GET /v1/nodes/<region>/<instance>/bundle``: the node's signed bundle, byte for byte as the
  compiler wrote it; the agent verifies its signature. With the region's releases
  (`releases.Releases`, fed from the log) that is the bundle the node's pool is on (ADR-32):
  a canary pool's node gets the canary's bundle, every other node the bundle in force, each
  from the compiler's copies by SHA-256 (``<bundles>/sha256/``); a workload the events say
  nothing of gets the compiler's current file (``<bundles>/<workload>.bundle.json``);
* ``POST /v1/nodes/<region>/<instance>/certificate`` with a PEM certificate signing request:
  a new certificate for the same identity (JSON: ``certificate``, ``ca``, ``expires_at_s``);
* ``POST /v1/nodes/<region>/<instance>/enrol`` (the first hop, the one request served without
  a client certificate) with JSON ``token`` (the single-use token delivered to the node) and
  ``csr`` (of a key the node made): its first certificate, answered as a renewal is.

Every refusal is a status and one sentence; no secret is in any answer or log line.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509

from contracts.output import bundle_by_sha, bundle_file_name, sha_of_bundle_file
from provider.authority import openbao_client, openbao_from_env
from provider.nodes.authority import (
    NODE_ROLE,
    EnrolmentTokenError,
    NodeAuthority,
    NodeAuthorityError,
    NodeAuthorityUnavailableError,
    NodeRecord,
)
from provider.nodes.identity import (
    IdentityError,
    NodeIdentity,
    identity_of_certificate,
    serial_text,
)
from provider.nodes.releases import Releases

log = logging.getLogger("spotcap.bundles")

HANDSHAKE_TIMEOUT_S = 10.0
MAX_CSR_BYTES = 16 * 1024


class _RefusedError(Exception):
    def __init__(self, status: int, sentence: str) -> None:
        super().__init__(sentence)
        self.status = status


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], context: ssl.SSLContext, service: BundleService
    ) -> None:
        self.context = context
        self.service = service
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[Any, Any]:
        sock, peer = self.socket.accept()
        # The handshake runs in the request's thread (`_Handler.setup`), never in accept's.
        tls = self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return tls, peer


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        self.request.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            self.request.do_handshake()
        except (ssl.SSLError, OSError) as error:
            log.info("bundle service: TLS refused %s: %s", self.client_address[0], error)
            self._failed = True
        else:
            self._failed = False
        super().setup()

    def handle(self) -> None:
        if not self._failed:
            super().handle()

    def do_GET(self) -> None:
        self._answer("GET")

    def do_POST(self) -> None:
        self._answer("POST")

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("bundle service: " + format, *args)

    def _answer(self, method: str) -> None:
        try:
            first_hop = method == "POST" and self.path.rstrip("/").endswith("/enrol")
            # The first hop comes before the node has a certificate: its token is its proof.
            caller = None
            if not first_hop:
                caller = self.server.service.caller(self.request.getpeercert(binary_form=True))
            body = b""
            if method == "POST":
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_CSR_BYTES:
                    raise _RefusedError(413, f"a signing request is at most {MAX_CSR_BYTES} bytes")
                body = self.rfile.read(length)
            if caller is None:
                status, kind, data = self.server.service.enrol(self.path, body)
            else:
                status, kind, data = self.server.service.route(caller, method, self.path, body)
        except _RefusedError as refusal:
            status, kind = refusal.status, "text/plain; charset=utf-8"
            data = (str(refusal) + "\n").encode()
            log.info("bundle service: %s %s refused (%d): %s", method, self.path, status, refusal)
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@dataclass
class BundleService:
    """Serves `bundles` (the compiler's bundle directory) to the nodes `authority` enrolled;
    with `releases`, the bundle each node's pool is on (module docstring)."""

    authority: NodeAuthority
    bundles: Path
    releases: Releases | None = None

    def caller(self, der: bytes | None) -> tuple[NodeIdentity, str]:
        """The node the peer certificate names, and its serial; refused if it names none, is
        revoked, or belongs to a retired node."""
        if not der:
            raise _RefusedError(401, "no client certificate: a node presents its own")
        certificate = x509.load_der_x509_certificate(der)
        try:
            identity = identity_of_certificate(certificate)
        except IdentityError as error:
            raise _RefusedError(403, f"the certificate names no node: {error}") from error
        serial = serial_text(certificate)
        try:
            revoked = self.authority.is_revoked(serial)
        except NodeAuthorityError as error:
            raise _RefusedError(503, f"cannot check the certificate now: {error}") from error
        if revoked:
            raise _RefusedError(403, f"the certificate {serial} of {identity} is revoked")
        return identity, serial

    def enrol(self, path: str, body: bytes) -> tuple[int, str, bytes]:
        """The first hop: a node with no certificate yet sends its enrolment token and the
        signing request of a key it made itself (JSON ``token``, ``csr``); the answer is its
        first certificate. A token refused is logged as a possible theft (never the token)."""
        parts = path.strip("/").split("/")
        if len(parts) != 6 or parts[:2] != ["v1", "nodes"] or parts[3] != "instance":
            raise _RefusedError(404, f"no such path {path!r}: /v1/nodes/REGION/instance/ID/enrol")
        identity = NodeIdentity(parts[2], parts[4])
        try:
            asked = json.loads(body)
            token, csr = str(asked["token"]), str(asked["csr"])
        except (ValueError, KeyError, TypeError) as error:
            raise _RefusedError(
                400, 'an enrolment is JSON {"token": ..., "csr": ...} (the token delivered to '
                "the node, the signing request of the key it made)",
            ) from error  # fmt: skip
        try:
            enrolment = self.authority.enrol_with_token(identity, token, csr)
        except NodeAuthorityUnavailableError as error:
            raise _RefusedError(503, f"cannot enrol {identity} now: {error}") from error
        except EnrolmentTokenError as error:
            log.warning("bundle service: POSSIBLE THEFT of an enrolment token: %s", error)
            raise _RefusedError(403, str(error)) from error
        except NodeAuthorityError as error:
            raise _RefusedError(403, f"no first certificate for {identity}: {error}") from error
        log.info("bundle service: %s enrolled with its own key (serial %s)",
                 identity, enrolment.serial)  # fmt: skip
        answer = {
            "certificate": enrolment.certificate_pem,
            "ca": enrolment.ca_pem,
            "expires_at_s": enrolment.expires_at_s,
        }
        return 200, "application/json", json.dumps(answer).encode()

    def route(
        self, caller: tuple[NodeIdentity, str], method: str, path: str, body: bytes
    ) -> tuple[int, str, bytes]:
        identity, _ = caller
        parts = path.strip("/").split("/")
        if len(parts) != 6 or parts[:2] != ["v1", "nodes"] or parts[3] != "instance":
            raise _RefusedError(404, f"no such path {path!r}: /v1/nodes/REGION/instance/ID/bundle")
        asked = NodeIdentity(parts[2], parts[4], identity.trust_domain)
        if asked != identity:
            raise _RefusedError(
                403,
                f"this certificate is {identity}; a node fetches only its own bundle and "
                "renews only its own certificate",
            )
        record = self._record(identity)
        if method == "GET" and parts[5] == "bundle":
            return 200, "application/json", self._bundle(identity, record.workload_id)
        if method == "POST" and parts[5] == "certificate":
            try:
                enrolment = self.authority.renew(identity, body.decode("ascii"))
            except NodeAuthorityUnavailableError as error:  # an outage refuses nothing
                raise _RefusedError(
                    503, f"cannot renew {identity} now: {error}; keep the certificate in use "
                    "and ask again later",
                ) from error  # fmt: skip
            except (NodeAuthorityError, UnicodeDecodeError) as error:
                raise _RefusedError(403, f"no renewal for {identity}: {error}") from error
            answer = {
                "certificate": enrolment.certificate_pem,
                "ca": enrolment.ca_pem,
                "expires_at_s": enrolment.expires_at_s,
            }
            return 200, "application/json", json.dumps(answer).encode()
        raise _RefusedError(
            405, f"{method} {path} is not served: GET .../bundle, POST .../certificate"
        )

    def _bundle(self, identity: NodeIdentity, workload: str) -> bytes:
        sha = None
        if self.releases is not None:
            sha = self.releases.sha_for(identity.instance_id, workload)
        current = self.bundles / bundle_file_name(workload)
        try:
            if sha is None:
                return current.read_bytes()
            kept = bundle_by_sha(self.bundles, sha)
            if kept.exists():
                return kept.read_bytes()
            data = current.read_bytes()
        except OSError as error:
            why = f"no bundle for workload {workload} ({error.strerror})"
            raise _RefusedError(404, why) from error
        try:
            same = sha_of_bundle_file(data) == sha
        except (ValueError, KeyError, TypeError):
            same = False  # not a bundle file: the agent would refuse it anyway
        if not same:
            raise _RefusedError(
                404,
                f"the bundle {sha[:12]} of workload {workload} (its node's release) is not in "
                f"{self.bundles / 'sha256'}: compile its contract version again into this folder",
            )
        return data

    def _record(self, identity: NodeIdentity) -> NodeRecord:
        try:
            record = self.authority.record(identity)
        except NodeAuthorityError as error:
            raise _RefusedError(503, str(error)) from error
        if record is None:
            raise _RefusedError(403, f"{identity} is not enrolled")
        if record.retired:
            raise _RefusedError(403, f"{identity} is retired: its instance was deleted or lost")
        return record


@dataclass
class RunningService:
    address: str
    """``https://HOST:PORT``."""
    server: _Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def start_bundle_service(
    service: BundleService, host: str = "127.0.0.1", port: int = 0, state_dir: Path | None = None
) -> RunningService:
    """Serve `service` on `host:port` (0: any free port) in a thread, with a server certificate
    from the authority; its key in a 0600 file of `state_dir` (a private temporary folder if
    None), which `ssl` needs to load it."""
    enrolment = service.authority.service_certificate(host)
    folder = state_dir or Path(tempfile.mkdtemp(prefix="spotcap-bundles-"))
    folder.mkdir(parents=True, exist_ok=True)
    cert_path, key_path, ca_path = folder / "server.pem", folder / "server.key", folder / "ca.pem"
    cert_path.write_text(enrolment.certificate_pem + "\n" + enrolment.ca_pem + "\n")
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(enrolment.private_key_pem or "")
    ca_path.write_text(service.authority.ca_pem())
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # Optional at the handshake only for the first hop (``.../enrol``, which proves itself with
    # its token); every other request is refused without a certificate of the nodes' CA.
    context.verify_mode = ssl.CERT_OPTIONAL
    context.load_cert_chain(cert_path, key_path)
    context.load_verify_locations(cafile=ca_path)
    server = _Server((host, port), context, service)
    bound_port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, name="bundle-service", daemon=True)
    thread.start()
    name = f"[{host}]" if ":" in host else host
    return RunningService(f"https://{name}:{bound_port}", server, thread)


def bundle_service_from_env(
    environ: Mapping[str, str],
    bundles: Path,
    host: str,
    port: int,
    pki_mount: str,
    *,
    state_dir: Path,
    releases: Releases | None = None,
) -> RunningService:
    """`start_bundle_service` for the nodes' CA at OpenBao's `pki_mount`, OpenBao at BAO_ADDR
    (else VAULT_ADDR) with the token BAO_TOKEN (else VAULT_TOKEN): `spotcap run bundles`.
    `NodeAuthorityError` says what is missing or what OpenBao refused."""
    found = openbao_from_env(environ)
    if found is None:
        raise NodeAuthorityError(
            "the bundle service needs OpenBao: set BAO_ADDR (or VAULT_ADDR) and BAO_TOKEN (or "
            f"VAULT_TOKEN), a token of the {NODE_ROLE!r} role of {pki_mount} (sign, revoke, read)"
        )
    address, token = found
    if not bundles.is_dir():
        raise NodeAuthorityError(
            f"{bundles} is not a folder of signed bundles: pass the --out folder of "
            "`spotcap contracts compile --key`"
        )
    authority = NodeAuthority(openbao_client(address, token), mount=pki_mount)
    service = BundleService(authority, bundles, releases)
    return start_bundle_service(service, host, port, state_dir)
