"""Node identity (ADR-31): each node's short-lived certificate from OpenBao's PKI engine, with a
SPIFFE-style URI SAN naming its region and instance (`identity`); the authority that issues it
at launch, renews it for the node that holds it, and revokes it when the instance is deleted or
lost (`authority`); and the bundle service, HTTPS with mutual TLS, through which a node fetches
its own bundle and nothing else, and renews its certificate (`service`).

What it may import: `schemas`, `contracts`, `provider` (and `follow`, `streams`: the log);
hvac (OpenBao), cryptography (X.509).
Who calls it: the actuator's follower of nodes (`enrol`: enrolment at launch, revocation at
deletion or loss), the command line's bundle service, and the tests.
"""

from provider.nodes.authority import (
    Enrolment,
    NodeAuthority,
    NodeAuthorityError,
    NodeRecord,
    Revoker,
    revoke_on_loss,
    revoker_from_env,
    setup_pki,
)
from provider.nodes.enrol import Enroller, NodeLifecycle, nodes_from_env
from provider.nodes.follow import NoCanaryError, followed, releases_of, roll_back
from provider.nodes.identity import NodeIdentity, identity_of_certificate
from provider.nodes.releases import Release, Releases
from provider.nodes.service import BundleService, bundle_service_from_env, start_bundle_service

__all__ = [
    "BundleService",
    "Enroller",
    "Enrolment",
    "NoCanaryError",
    "NodeAuthority",
    "NodeAuthorityError",
    "NodeIdentity",
    "NodeLifecycle",
    "NodeRecord",
    "Release",
    "Releases",
    "Revoker",
    "bundle_service_from_env",
    "followed",
    "identity_of_certificate",
    "nodes_from_env",
    "releases_of",
    "revoke_on_loss",
    "revoker_from_env",
    "roll_back",
    "setup_pki",
    "start_bundle_service",
]
