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

The issuer's keys follow the issuer (`IssuerKeys`): read again every `KEYS_REFRESH_S`, so a key
it stopped publishing (rotated out, deleted) is refused from the next read on; a key id not
read yet makes the keys be read again at most once per `UNSEEN_KEY_EVERY_S`.

A token is a secret: nothing here logs it or repeats it in an error.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import math
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
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
KEYS_REFRESH_S = 300.0
"""How long keys read from the issuer are used before they are read again
(SPOTCAP_OIDC_KEYS_REFRESH_S): a key the issuer no longer publishes is refused at most this
long after it went. While the issuer cannot be reached the keys read stay in use for as long
again, and no longer: then every token is answered 503 until the issuer answers."""
KEYS_REFRESH_ENV = "SPOTCAP_OIDC_KEYS_REFRESH_S"
UNSEEN_KEY_EVERY_S = 30.0
"""A token naming a key id not among the keys read makes them be read again, at most once per
this long after the last read: forged key ids cost the issuer one request per 30 s at most."""
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 30.0
"""After a read of the keys that failed, the next waits `RETRY_FIRST_S`, doubled after each
further failure up to `RETRY_MAX_S` (from the failure's end); in between the issuer is not
asked, so a stalled issuer costs one request's timeout per backoff, not one per sign-in."""

_log = logging.getLogger("spotcap.serve")


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


class KeysUnreachableError(Exception):
    """The issuer's keys could not be read, and the keys held (if any) may not be used."""


class IssuerKeys:
    """The issuer's signing keys (its JWKS at `uri`), as the issuer publishes them now.

    The keys read are used for `refresh_s`, then read again: a key no longer published is
    dropped by that read. A key id not among them makes them be read again at once, unless
    the last read is less than `unseen_every_s` old (then the token is refused): the guard
    against forged key ids flooding the issuer. A read that fails (the issuer down, stalled,
    or answering no key set) is retried after a backoff (`RETRY_FIRST_S` doubled up to
    `RETRY_MAX_S`, from the failure's end); meanwhile the keys read stay in use until
    `2 * refresh_s` after their read, and a key id not among them is answered "unreachable"
    (never let through). `reads` and `failures` count the requests made to the issuer."""

    def __init__(
        self,
        uri: str,
        *,
        refresh_s: float = KEYS_REFRESH_S,
        unseen_every_s: float = UNSEEN_KEY_EVERY_S,
        timeout_s: float = FETCH_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.uri = uri
        self.refresh_s, self.unseen_every_s = refresh_s, unseen_every_s
        self._timeout_s, self._clock = timeout_s, clock
        self._keys: dict[str, jwt.PyJWK] | None = None
        self._read_at = -math.inf
        self._read: tuple[dict[str, jwt.PyJWK], float] = ({}, -math.inf)
        """The keys and when they were read, together (the lock-free path reads them)."""
        self._retry_at = -math.inf
        self._retry_s = 0.0
        self._lock = threading.Lock()
        self.reads = 0
        self.failures = 0

    def key(self, kid: str) -> jwt.PyJWK:
        """The published key with that id; `KeysUnreachableError` when the issuer must be
        asked and cannot be (or was not, less than the backoff ago); `LookupError` when the
        issuer does not publish it (as of a read less than `unseen_every_s` old)."""
        keys, read_at = self._read  # one snapshot: replaced whole, never changed
        if kid in keys and self._clock() < read_at + self.refresh_s:
            return keys[kid]
        with self._lock:
            now = self._clock()
            if self._keys is None or now >= self._read_at + self.refresh_s:
                self._refresh(now)
            keys = self._held(now)
            if kid in keys:
                return keys[kid]
            if now < self._retry_at:  # a read failed: whether it is published is unknown
                raise KeysUnreachableError(self._waiting(now))
            if now < self._read_at + self.unseen_every_s:
                raise LookupError(kid)
            self._refresh(now)
            keys = self._held(now)
            if kid in keys:
                return keys[kid]
            if now < self._retry_at:
                raise KeysUnreachableError(self._waiting(now))
            raise LookupError(kid)

    def _held(self, now: float) -> dict[str, jwt.PyJWK]:
        """The keys that may be used now: read less than `refresh_s` ago, or, while the
        issuer cannot be read, less than twice that."""
        if self._keys is None or now >= self._read_at + 2 * self.refresh_s:
            raise KeysUnreachableError(self._waiting(now))
        return self._keys

    def _waiting(self, now: float) -> str:
        return f"its keys cannot be read; asked again in {max(0.0, self._retry_at - now):.0f} s"

    def _refresh(self, now: float) -> None:
        """Read the keys, unless a failed read was less than the backoff ago."""
        if now < self._retry_at:
            return
        try:
            request = urllib.request.Request(self.uri, headers={"Accept": "application/json"})
            with urllib.request.urlopen(request, timeout=self._timeout_s) as answer:
                published = jwt.PyJWKSet.from_dict(json.loads(answer.read()))
        except (OSError, ValueError, TypeError, AttributeError, KeyError, jwt.PyJWTError) as error:
            self.failures += 1
            self._retry_s = min(RETRY_MAX_S, self._retry_s * 2 if self._retry_s else RETRY_FIRST_S)
            self._retry_at = self._clock() + self._retry_s  # from the failure's end
            _log.warning(
                "cannot read the sign-in issuer's keys at %s (%s): %s; asked again in %.0f s",
                self.uri, type(error).__name__, self._keeping(now), self._retry_s,
            )  # fmt: skip
            return
        self.reads += 1
        keys = {
            k.key_id: k for k in published.keys if k.key_id and k.public_key_use in ("sig", None)
        }
        dropped = sorted(set(self._keys or {}) - set(keys))
        if dropped:
            _log.info("sign-in keys no longer published, refused from now on: %s", dropped)
        self._keys, self._read_at = keys, now
        self._read = (keys, now)
        self._retry_s, self._retry_at = 0.0, -math.inf

    def _keeping(self, now: float) -> str:
        if self._keys is None:
            return "no keys are held: every sign-in is answered 503 until the issuer answers"
        left = self._read_at + 2 * self.refresh_s - now
        return f"the keys read before stay in use for {max(0.0, left):.0f} s at most"


class Issuer:
    """The OIDC issuer whose tokens this server accepts, for `audience` (its client id); its
    keys are read again every `keys_refresh_s`."""

    def __init__(self, issuer: str, audience: str, keys_refresh_s: float = KEYS_REFRESH_S) -> None:
        self.issuer = issuer.rstrip("/")
        self.audience = audience
        self.keys_refresh_s = keys_refresh_s
        self._keys: IssuerKeys | None = None
        self._lock = threading.Lock()

    def _unreachable(self, what: str) -> SignInError:
        return SignInError(
            503,
            f"the sign-in issuer {self.issuer} cannot be reached ({what}): check that it runs "
            "and that --oidc-issuer names it, then try again",
        )

    def _jwks(self) -> IssuerKeys:
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
            self._keys = IssuerKeys(str(discovery["jwks_uri"]), refresh_s=self.keys_refresh_s)
            return self._keys

    def viewer(self, authorization: str | None) -> Viewer:
        """The viewer of a request with this Authorization header; SignInError if none."""
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise SignInError(401, f"sign in: {SIGN_IN}")
        keys = self._jwks()
        try:
            key = keys.key(str(jwt.get_unverified_header(token).get("kid")))
        except KeysUnreachableError as error:
            raise self._unreachable(str(error)) from error
        except (LookupError, jwt.InvalidTokenError) as error:
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


def keys_refresh_s(environ: Mapping[str, str]) -> float:
    """How often the issuer's keys are read again: SPOTCAP_OIDC_KEYS_REFRESH_S (seconds), else
    `KEYS_REFRESH_S`; SignInError (a sentence) for anything but a positive number."""
    given = environ.get(KEYS_REFRESH_ENV, "").strip()
    if not given:
        return KEYS_REFRESH_S
    try:
        seconds = float(given)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise SignInError(
            401,
            f"{KEYS_REFRESH_ENV}={given[:40]!r} is not a number of seconds above 0: give how "
            f"often the issuer's keys are read again (default {KEYS_REFRESH_S:.0f})",
        )
    return seconds


def sign_in_for(
    host: str,
    issuer: str | None,
    audience: str | None,
    environ: Mapping[str, str] = os.environ,
) -> tuple[Issuer | None, str | None]:
    """What `spotcap serve --oidc-issuer --oidc-audience` on `host` requires: the issuer (None:
    no sign-in; its keys read again as `keys_refresh_s(environ)` says) and, without one, the
    warning to print; SignInError (the sentence saying how to fix it) for an issuer without
    an audience or the other way round, or for no issuer on an address other than loopback."""
    if bool(issuer) != bool(audience):
        raise SignInError(
            401, "--oidc-issuer and --oidc-audience go together: give both or neither"
        )
    if issuer and audience:
        return Issuer(issuer, audience, keys_refresh_s(environ)), None
    return None, without_issuer(host)
