"""A node's identity: ``spiffe://<trust domain>/<region>/instance/<instance id>``, carried as
the one URI SAN of its certificate (ADR-31). Pure: parsing and printing, no I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cryptography import x509

TRUST_DOMAIN = "spotcap"
_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
_ID = re.compile(
    rf"^spiffe://(?P<domain>{_NAME})/(?P<region>{_NAME})/instance/(?P<instance>{_NAME})$"
)


class IdentityError(ValueError):
    """A certificate that names no node: no URI SAN, several, or not a node's SPIFFE ID."""


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    region: str
    instance_id: str
    trust_domain: str = TRUST_DOMAIN

    @property
    def uri(self) -> str:
        return f"spiffe://{self.trust_domain}/{self.region}/instance/{self.instance_id}"

    @classmethod
    def parse(cls, uri: str) -> NodeIdentity:
        match = _ID.match(uri)
        if match is None:
            raise IdentityError(
                f"{uri!r} is not a node's identity (spiffe://DOMAIN/REGION/instance/ID)"
            )
        return cls(match["region"], match["instance"], match["domain"])

    def __str__(self) -> str:
        return self.uri


def identity_of_certificate(certificate: x509.Certificate) -> NodeIdentity:
    """The node a certificate names by its one URI SAN."""
    try:
        sans = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound as error:
        raise IdentityError("the certificate has no subject alternative name") from error
    uris = sans.value.get_values_for_type(x509.UniformResourceIdentifier)
    if len(uris) != 1:
        raise IdentityError(f"the certificate names {len(uris)} URIs; a node's names exactly one")
    return NodeIdentity.parse(uris[0])


def serial_text(certificate: x509.Certificate) -> str:
    """The serial as OpenBao writes it: colon-separated lower-case hex byte pairs."""
    raw = f"{certificate.serial_number:x}"
    raw = raw if len(raw) % 2 == 0 else "0" + raw
    return ":".join(raw[i : i + 2] for i in range(0, len(raw), 2))
