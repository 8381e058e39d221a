"""Sign-in (OIDC): who sends a request, from the bearer token it carries.

A token is accepted when it is a JWT signed (RS/PS/ES/EdDSA: never a shared secret, never
`none`) by a key the issuer publishes (its JWKS, found through its discovery document), names
this server's issuer (`iss`) and audience (`aud`), and is inside its lifetime (`exp`, `nbf`,
with `LEEWAY_S` for clocks apart). Its `groups` claim gives the roles (`Viewer.roles`):

| group | role |
|---|---|
| spotcap-sre | SRE: the whole fleet |
| spotcap-finance | finance: reports and what-if |
| spotcap-auditor | auditor: the archive and the ledger |
| spotcap-owner-TEAM | workload owner: TEAM's workloads only |

A token is a secret: nothing here logs it or repeats it in an error.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jwt

GROUPS_CLAIM = "groups"
ROLE_GROUPS = {"spotcap-sre": "sre", "spotcap-finance": "finance", "spotcap-auditor": "auditor"}
OWNER_PREFIX = "spotcap-owner-"
ROLES = ("sre", "owner", "finance", "auditor")
ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512",
              "EdDSA"]  # fmt: skip
LEEWAY_S = 5
FETCH_TIMEOUT_S = 10.0
REQUIRED_CLAIMS = ["exp", "iat", "iss", "aud", "sub"]
SIGN_IN = "send a token from the issuer as `Authorization: Bearer TOKEN`"


class SignInError(Exception):
    """The request cannot be served to this sender: 401 (no valid token), 403 (a valid token
    whose roles do not reach the page) or 503 (the issuer cannot be reached); the message is
    one sentence saying why and what to do."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who sends a request: the token's subject (None: no sign-in, on loopback), the roles its
    groups grant, and the teams whose workloads it owns."""

    subject: str | None
    roles: frozenset[str]
    teams: frozenset[str] = frozenset()

    @property
    def fleet_wide(self) -> bool:
        """Whether every workload is visible (an SRE, or no sign-in): owners see their own."""
        return "sre" in self.roles


EVERYONE = Viewer(None, frozenset(ROLES))
"""The viewer of a server that needs no sign-in (loopback, no issuer): every role."""


def viewer_of(claims: Mapping[str, Any]) -> Viewer:
    """The viewer a verified token's claims describe; 403 if they grant no role."""
    groups = claims.get(GROUPS_CLAIM)
    names = [g for g in groups if isinstance(g, str)] if isinstance(groups, list) else []
    roles = {ROLE_GROUPS[g] for g in names if g in ROLE_GROUPS}
    teams = {g[len(OWNER_PREFIX) :] for g in names if g.startswith(OWNER_PREFIX)} - {""}
    if teams:
        roles.add("owner")
    if not roles:
        raise SignInError(
            403,
            f"you are signed in ({str(claims.get('sub'))[:80]}) but your token's "
            f"{GROUPS_CLAIM!r} claim names no spotcap group: ask for one of "
            f"{', '.join(ROLE_GROUPS)} or {OWNER_PREFIX}TEAM",
        )
    return Viewer(str(claims["sub"]), frozenset(roles), frozenset(teams))


class Issuer:
    """The OIDC issuer whose tokens this server accepts, for `audience` (its client id)."""

    def __init__(self, issuer: str, audience: str) -> None:
        self.issuer = issuer.rstrip("/")
        self.audience = audience
        self._keys: jwt.PyJWKClient | None = None
        self._lock = threading.Lock()

    def _unreachable(self, what: str) -> SignInError:
        return SignInError(
            503,
            f"the sign-in issuer {self.issuer} cannot be reached ({what}): check that it runs "
            "and that --oidc-issuer names it, then try again",
        )

    def _jwks(self) -> jwt.PyJWKClient:
        """The issuer's keys, found through its discovery document (read once)."""
        with self._lock:
            if self._keys is not None:
                return self._keys
            url = f"{self.issuer}/.well-known/openid-configuration"
            try:
                with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as answer:
                    discovery = json.loads(answer.read())
            except (OSError, ValueError) as error:
                raise self._unreachable(f"no discovery document at {url}: {error}") from error
            if discovery.get("issuer", "").rstrip("/") != self.issuer:
                raise SignInError(
                    503,
                    f"the discovery document at {url} names issuer "
                    f"{str(discovery.get('issuer'))[:120]!r}, not {self.issuer}: give "
                    "--oidc-issuer exactly as the issuer names itself",
                )
            self._keys = jwt.PyJWKClient(
                str(discovery["jwks_uri"]), cache_keys=True, timeout=FETCH_TIMEOUT_S
            )
            return self._keys

    def viewer(self, authorization: str | None) -> Viewer:
        """The viewer of a request with this Authorization header; SignInError if none."""
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise SignInError(401, f"sign in: {SIGN_IN}")
        keys = self._jwks()
        try:
            key = keys.get_signing_key_from_jwt(token)
        except jwt.PyJWKClientConnectionError as error:
            raise self._unreachable("its keys cannot be read") from error
        except (jwt.PyJWKClientError, jwt.InvalidTokenError) as error:
            raise SignInError(
                401, f"the token is not signed by a key of {self.issuer}: {SIGN_IN}"
            ) from error
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=ALGORITHMS,
                audience=self.audience,
                issuer=self.issuer,
                leeway=LEEWAY_S,
                options={"require": REQUIRED_CLAIMS},
            )
        except jwt.ExpiredSignatureError as error:
            raise SignInError(401, f"the token has expired: sign in again and {SIGN_IN}") from error
        except jwt.ImmatureSignatureError as error:
            raise SignInError(401, f"the token is not valid yet (nbf or iat): {SIGN_IN}") from error
        except jwt.InvalidAudienceError as error:
            raise SignInError(
                401, f"the token is for another audience than {self.audience}: {SIGN_IN}"
            ) from error
        except jwt.InvalidIssuerError as error:
            raise SignInError(
                401, f"the token is from another issuer than {self.issuer}: {SIGN_IN}"
            ) from error
        except jwt.InvalidTokenError as error:
            raise SignInError(
                401, f"the token is not valid (its signature or claims): {SIGN_IN}"
            ) from error
        return viewer_of(claims)


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is this machine's loopback."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def without_issuer(host: str) -> str:
    """What a server with no issuer does on `host`: the warning to print on loopback; on any
    other address SignInError (the sentence saying how to configure one)."""
    if not is_loopback(host):
        raise SignInError(
            401,
            f"spotcap serve on {host} needs sign-in: give the OIDC issuer and this server's "
            "client id with --oidc-issuer URL --oidc-audience ID (or SPOTCAP_OIDC_ISSUER and "
            "SPOTCAP_OIDC_AUDIENCE); docs/security.md says how",
        )
    return (
        f"no sign-in: no --oidc-issuer is configured, so on loopback ({host}) anyone on this "
        "machine reads everything; give --oidc-issuer and --oidc-audience to require sign-in"
    )


def sign_in_for(
    host: str, issuer: str | None, audience: str | None
) -> tuple[Issuer | None, str | None]:
    """What `spotcap serve --oidc-issuer --oidc-audience` on `host` requires: the issuer (None:
    no sign-in) and, without one, the warning to print; SignInError (the sentence saying how
    to fix it) for an issuer without an audience or the other way round, or for no issuer on
    an address other than loopback."""
    if bool(issuer) != bool(audience):
        raise SignInError(
            401, "--oidc-issuer and --oidc-audience go together: give both or neither"
        )
    if issuer and audience:
        return Issuer(issuer, audience), None
    return None, without_issuer(host)
