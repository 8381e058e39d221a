"""The least of Keystone that openstacksdk needs: version discovery, a token, a catalogue.

One project (``spotcap``) with one user (password) and one application credential (ADR-29:
production uses a one-hour, project-scoped application credential). The secrets are the ones
the cloud was started with, or drawn at start (`CloudCredentials.generate`); they are printed
once, in the access JSON on stdout, and never appear in a log line, an error or a repr. A wrong
secret is refused with Keystone's own 401 wording, which names nothing that was sent.

    GET  /v3                  version discovery
    POST /v3/auth/tokens      password or application_credential; 201, X-Subject-Token, catalogue

Every other API of the cloud takes the token in ``X-Auth-Token`` (`Identity.check`). Tokens
live `token_ttl_s` of wall time (keystoneauth compares ``expires_at`` with the machine's clock;
it re-authenticates on its own before the end).
"""

from __future__ import annotations

import hmac
import secrets
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sim.cloud.clock import wall_us
from sim.cloud.errors import CloudError

DOMAIN = {"id": "default", "name": "Default"}
_NAMESPACE = uuid.UUID("8f0d7c1e-5b3a-4e29-9c6d-2a1b0e3f4d5c")


def _hex_id(name: str) -> str:
    return uuid.uuid5(_NAMESPACE, name).hex


@dataclass(frozen=True)
class CloudCredentials:
    """Who may call the served cloud: a user with a password, and an application credential."""

    password: str = field(repr=False)
    application_credential_secret: str = field(repr=False)
    username: str = "spotcap"
    project_name: str = "spotcap"
    application_credential_id: str = field(default_factory=lambda: _hex_id("appcred/spotcap"))

    @classmethod
    def generate(cls, *, password: str | None = None) -> CloudCredentials:
        """Credentials with fresh random secrets (the password given, if one is)."""
        return cls(
            password=password or secrets.token_urlsafe(24),
            application_credential_secret=secrets.token_urlsafe(32),
        )

    @property
    def user_id(self) -> str:
        return _hex_id(f"user/{self.username}")

    @property
    def project_id(self) -> str:
        return _hex_id(f"project/{self.project_name}")


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a token was issued to."""

    user_id: str
    application_credential_id: str | None


class Identity:
    """Issues and checks tokens against one set of credentials."""

    def __init__(
        self,
        credentials: CloudCredentials,
        region: str,
        *,
        token_ttl_s: int = 12 * 3600,
    ) -> None:
        self._credentials = credentials
        self._region = region
        self._ttl_us = token_ttl_s * 1_000_000
        self._tokens: dict[str, tuple[int, Principal]] = {}
        self._lock = threading.Lock()
        self.issued = 0
        self.refused = 0

    def version(self, base_url: str) -> dict[str, Any]:
        return {
            "version": {
                "id": "v3.14",
                "status": "stable",
                "updated": "2020-04-07T00:00:00Z",
                "links": [{"rel": "self", "href": f"{base_url}/v3/"}],
                "media-types": [
                    {
                        "base": "application/json",
                        "type": "application/vnd.openstack.identity-v3+json",
                    }
                ],
            }
        }

    def issue(self, body: Any, base_url: str) -> tuple[str, dict[str, Any]]:
        """A token and its body for an auth request; `CloudError` 401 when refused."""
        method, principal = self._authenticate(body)
        token = "gAAAA" + secrets.token_urlsafe(48)
        now = wall_us()
        expires = now + self._ttl_us
        with self._lock:
            self._tokens = {t: v for t, v in self._tokens.items() if v[0] > now}
            self._tokens[token] = (expires, principal)
            self.issued += 1
        c = self._credentials
        document: dict[str, Any] = {
            "methods": [method],
            "user": {
                "domain": DOMAIN,
                "id": c.user_id,
                "name": c.username,
                "password_expires_at": None,
            },
            "audit_ids": [secrets.token_urlsafe(16)],
            "expires_at": _iso(expires),
            "issued_at": _iso(now),
            "project": {"domain": DOMAIN, "id": c.project_id, "name": c.project_name},
            "is_domain": False,
            "roles": [
                {"id": _hex_id("role/member"), "name": "member"},
                {"id": _hex_id("role/reader"), "name": "reader"},
            ],
            "catalog": self._catalog(base_url),
        }
        if principal.application_credential_id is not None:
            document["application_credential"] = {
                "id": principal.application_credential_id,
                "name": "spotcap",
                "restricted": True,
            }
        return token, {"token": document}

    def check(self, token: str | None) -> Principal:
        """The principal of a live token; `CloudError` 401 otherwise."""
        if token:
            with self._lock:
                found = self._tokens.get(token)
            if found is not None and found[0] > wall_us():
                return found[1]
        raise _unauthorized()

    def _authenticate(self, body: Any) -> tuple[str, Principal]:
        c = self._credentials
        identity = _at(body, "auth", "identity")
        methods = identity.get("methods") if isinstance(identity, Mapping) else None
        if methods == ["password"]:
            user = _at(identity, "password", "user")
            name, given = user.get("name"), user.get("password")
            domain = _at(user, "domain")
            named = user.get("id") == c.user_id or (
                name == c.username
                and domain.get("name", domain.get("id")) in ("Default", "default")
            )
            if named and _same(given, c.password) and self._scoped(body):
                return "password", Principal(c.user_id, None)
        elif methods == ["application_credential"]:
            cred = _at(identity, "application_credential")
            if cred.get("id") == c.application_credential_id and _same(
                cred.get("secret"), c.application_credential_secret
            ):
                return "application_credential", Principal(c.user_id, c.application_credential_id)
        with self._lock:
            self.refused += 1
        raise _unauthorized()

    def _scoped(self, body: Any) -> bool:
        """A password token is scoped to the project, by name (in the default domain) or id."""
        project = _at(body, "auth", "scope", "project")
        c = self._credentials
        return project.get("id") == c.project_id or project.get("name") == c.project_name

    def _catalog(self, base_url: str) -> list[dict[str, Any]]:
        services = (
            ("identity", "keystone", f"{base_url}/v3"),
            ("compute", "nova", f"{base_url}/compute/v2.1"),
            ("placement", "placement", f"{base_url}/placement"),
            ("reservation", "blazar", f"{base_url}/reservation/v1"),
        )
        return [
            {
                "type": kind,
                "name": name,
                "id": _hex_id(f"service/{kind}"),
                "endpoints": [
                    {
                        "id": _hex_id(f"endpoint/{kind}/public"),
                        "interface": "public",
                        "region": self._region,
                        "region_id": self._region,
                        "url": url,
                    }
                ],
            }
            for kind, name, url in services
        ]


def _at(obj: Any, *path: str) -> Mapping[str, Any]:
    for key in path:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj if isinstance(obj, Mapping) else {}


def _same(given: Any, secret: str) -> bool:
    return isinstance(given, str) and hmac.compare_digest(given.encode(), secret.encode())


def _iso(at_us: int) -> str:
    return datetime.fromtimestamp(at_us / 1e6, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _unauthorized() -> CloudError:
    return CloudError(
        401,
        {
            "error": {
                "code": 401,
                "message": "The request you have made requires authentication.",
                "title": "Unauthorized",
            }
        },
    )
