"""The least of Keystone that openstacksdk needs: version discovery, a token, a catalogue.

One project (``spotcap``) with one user (password) and one application credential (ADR-29:
production uses a one-hour, project-scoped application credential). The secrets are the ones
the cloud was started with, or drawn at start (`CloudCredentials.generate`); they are printed
once, in the access JSON on stdout, and never appear in a log line, an error or a repr. A wrong
secret is refused with Keystone's own 401 wording, which names nothing that was sent.

    GET  /v3                  version discovery
    POST /v3/auth/tokens      password or application_credential; 201, X-Subject-Token, catalogue
    POST /v3/users/{id}/application_credentials   a new application credential of the caller's
                              project, with its own ``expires_at`` (ADR-29: one hour)

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
        self._minted: dict[str, tuple[str, int | None]] = {}
        """Application credentials created through the API: id -> (secret, expiry or None)."""
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
        minted = self._minted.get(principal.application_credential_id or "")
        if minted is not None and minted[1] is not None:
            expires = min(expires, minted[1])  # a token outlives no credential (as Keystone)
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
                minted = self._minted.get(str(cred.get("id")))
            if (
                minted is not None
                and _same(cred.get("secret"), minted[0])
                and (minted[1] is None or minted[1] > wall_us())
            ):
                return "application_credential", Principal(c.user_id, str(cred.get("id")))
        with self._lock:
            self.refused += 1
        raise _unauthorized()

    def create_application_credential(
        self, principal: Principal, user_id: str, body: Any
    ) -> dict[str, Any]:
        """A new application credential for the caller's project (Keystone's
        ``POST /v3/users/{user_id}/application_credentials``); its secret is in this answer
        only. `CloudError` 403 for another user, 400 for a bad ``expires_at``."""
        # A restricted application credential's token may not make more (as Keystone): the
        # actuator's one-hour credential cannot outlive itself.
        if user_id != principal.user_id or principal.application_credential_id is not None:
            raise _refusal(403, "Forbidden", "You are not authorized to perform the action.")
        wanted = _at(body, "application_credential")
        expires_at = wanted.get("expires_at")
        expires_us: int | None = None
        if expires_at is not None:
            try:
                parsed = datetime.fromisoformat(str(expires_at).replace("Z", "+00:00"))
            except ValueError:
                raise _refusal(400, "Bad Request", "Invalid expires_at.") from None
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=UTC)
            expires_us = int(parsed.timestamp() * 1_000_000)
        credential_id = uuid.uuid4().hex
        secret = secrets.token_urlsafe(32)
        with self._lock:
            self._minted[credential_id] = (secret, expires_us)
        c = self._credentials
        return {
            "application_credential": {
                "id": credential_id,
                "name": str(wanted.get("name") or credential_id),
                "description": wanted.get("description"),
                "secret": secret,
                "expires_at": _iso(expires_us) if expires_us is not None else None,
                "project_id": c.project_id,
                "user_id": c.user_id,
                "roles": [{"id": _hex_id("role/member"), "name": "member"}],
                "unrestricted": False,
                "links": {},
            }
        }

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


def _refusal(status: int, title: str, message: str) -> CloudError:
    return CloudError(status, {"error": {"code": status, "title": title, "message": message}})


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
