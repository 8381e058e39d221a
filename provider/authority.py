"""Capacity authority (ADR-29): the actuator's provider credentials are one-hour OpenStack
application credentials, one project each, read through OpenBao; no node holds any.

* The **issuer** (`CredentialIssuer`, in the control plane) holds the one identity that may make
  application credentials in the project; before the current one is half spent it makes a new
  one that expires an hour later and writes it to OpenBao's KV engine (version 1) at
  ``spotcap/providers/<region>/<project>`` with that ``ttl``, so every reader is told its lease.
* The **actuator** reads it through hvac (`ProjectAuthority`), with a token that may read that
  path and nothing else, and reads again once `renew_after` of the lease has passed; the
  provider's session is re-bound to the new credential (`bind`). Before every mutating call it
  asks `refusal`: no credential for the project, or one that has expired and was not replaced,
  refuse the call, and the actuator writes ``actuation_refused`` (rule ``no_authority``).
  **OpenBao unreachable** (killed, paused, restarting, sealed) is not a refusal: the actuator
  goes on with the credential it holds until that one expires, and asks OpenBao again after a
  backoff (`RETRY_FIRST_S` doubled up to `RETRY_MAX_S`, each read bounded by `TIMEOUT_S`);
  with no live credential held, `AuthorityUnavailableError` holds its orders back (none is
  sent, none refused) until OpenBao answers.
  Reads (listing, the provider's feeds) go out with the same credential: from the moment the
  authority takes the session, the provider file's own credentials are never used, and until
  OpenBao hands one out a read fails (`NoCredentialYet`) instead of going out with them.

A credential's secret is in no event, log line, error sentence or repr.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

RECORDS = "spotcap/providers"
DEFAULT_MOUNT = "spotcap-authority"
"""The KV (version 1) mount the issuer publishes to, unless SPOTCAP_AUTHORITY_MOUNT names one."""
CREDENTIAL_TTL_S = 3600
"""One hour (ADR-29)."""
TIMEOUT_S = 3.0
"""hvac's timeout for one request to OpenBao (its default, 30 s, held an actuator's step that
long on every read while OpenBao was paused)."""
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 30.0
"""After a read that could not reach OpenBao, the next waits `RETRY_FIRST_S`, doubled after
each further failure up to `RETRY_MAX_S`; in between nothing asks OpenBao."""
_UNREACHABLE = frozenset({"VaultDown", "InternalServerError", "BadGateway", "RateLimitExceeded",
                          "UnexpectedError"})  # fmt: skip
"""hvac's errors of an OpenBao that cannot answer now (sealed, starting, overloaded)."""

log = logging.getLogger("spotcap.authority")


class Backoff:
    """When OpenBao may be asked again, after requests that could not reach it: not before
    `wait_s` from the end of the last failure, `RETRY_FIRST_S` doubled after each further one
    up to `RETRY_MAX_S`; a request that reached OpenBao clears it. Shared by everything in the
    control plane that asks OpenBao (the project authority, the node enroller and revoker), so
    that a stalled OpenBao costs one request's timeout per backoff, not one per step."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.wait_s = 0.0
        self.until_s = float("-inf")
        self.failures = 0
        """Requests that could not reach OpenBao, in all."""
        self.failures_in_a_row = 0

    def ready(self, now: float | None = None) -> bool:
        """Whether OpenBao may be asked now (no backoff, or its wait is over)."""
        return (self._clock() if now is None else now) >= self.until_s

    def left_s(self, now: float | None = None) -> float:
        return max(0.0, self.until_s - (self._clock() if now is None else now))

    def failed(self) -> float:
        """A request did not reach OpenBao (it has just ended): the wait before the next."""
        self.failures += 1
        self.failures_in_a_row += 1
        self.wait_s = min(RETRY_MAX_S, self.wait_s * 2 if self.wait_s else RETRY_FIRST_S)
        self.until_s = self._clock() + self.wait_s
        return self.wait_s

    def answered(self) -> bool:
        """A request reached OpenBao: the backoff is cleared; whether it had failed before."""
        was = self.failures_in_a_row > 0
        self.wait_s, self.until_s, self.failures_in_a_row = 0.0, float("-inf"), 0
        return was


class NoAuthorityError(RuntimeError):
    """No usable credential for a project; the message says why (never a secret)."""


class AuthorityUnavailableError(NoAuthorityError):
    """OpenBao cannot be reached now and no live credential is held: nothing may be sent, and
    nothing is refused either; ask again later (the message says when)."""


@dataclass(frozen=True, slots=True)
class ProviderCredential:
    """An application credential of one project, as OpenBao handed it out."""

    region: str
    project: str
    auth_url: str
    application_credential_id: str
    application_credential_secret: str = field(repr=False)
    expires_at_s: float
    lease_s: int
    """OpenBao's lease on what was read: read again before it runs out."""

    def auth_plugin(self) -> Any:
        """A keystoneauth plugin for this credential."""
        from keystoneauth1.identity import v3

        return v3.ApplicationCredential(
            auth_url=self.auth_url,
            application_credential_id=self.application_credential_id,
            application_credential_secret=self.application_credential_secret,
        )

    def connection_options(self, region_name: str) -> dict[str, Any]:
        """Keyword arguments of ``openstack.connection.Connection`` for this credential."""
        return {
            "auth_type": "v3applicationcredential",
            "auth_url": self.auth_url,
            "application_credential_id": self.application_credential_id,
            "application_credential_secret": self.application_credential_secret,
            "region_name": region_name,
        }


def _no_credential_plugin(region: str, project: str) -> Any:
    """A keystoneauth plugin that authenticates nothing: what the provider's session holds
    under an authority until OpenBao hands out the project's credential, so that no call, a
    read included, goes out with the provider file's own credentials (ADR-29)."""
    from keystoneauth1 import exceptions, plugin

    class NoCredentialYet(plugin.BaseAuthPlugin):
        def get_token(self, session: Any, **_: Any) -> str:
            raise exceptions.AuthorizationFailure(
                f"no credential of project {project} in {region} from OpenBao yet: the "
                "actuator sends nothing with the provider file's own credentials"
            )

        def get_endpoint(self, session: Any, **kwargs: Any) -> str:
            self.get_token(session)
            raise AssertionError("unreachable")

    return NoCredentialYet()


def credential_path(region: str, project: str) -> str:
    return f"{RECORDS}/{region}/{project}"


def _why(error: Exception) -> str:
    errors = getattr(error, "errors", None)
    if isinstance(errors, list) and errors:
        return "; ".join(str(e) for e in errors)
    if "Timeout" in type(error).__name__:  # requests' ReadTimeout, ConnectTimeout
        return f"OpenBao did not answer in time ({type(error).__name__})"
    if isinstance(error, OSError):
        return f"OpenBao is unreachable ({type(error).__name__})"
    return type(error).__name__


def setup_authority_store(client: Any, mount: str) -> None:
    """Mount a KV version 1 engine at `mount` (leases come from each secret's ``ttl``)."""
    client.sys.enable_secrets_engine("kv", path=mount, options={"version": "1"})


class CredentialIssuer:
    """Makes a project's one-hour application credentials and publishes them to OpenBao."""

    def __init__(
        self,
        client: Any,
        conn: Any,
        region: str,
        project: str,
        *,
        auth_url: str,
        mount: str,
        ttl_s: int = CREDENTIAL_TTL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        # `client` an hvac.Client, `conn` an openstack Connection scoped to `project` with the
        # issuer's own identity (which never leaves the issuer).
        self._client, self._conn = client, conn
        self.region, self.project = region, project
        self._mount, self.ttl_s, self._clock = mount, ttl_s, clock
        self._auth_url = auth_url

    def issue(self) -> str:
        """A new credential, published; its id (the secret goes to OpenBao only)."""
        expires_at_s = self._clock() + self.ttl_s
        expires_at = datetime.fromtimestamp(expires_at_s, tz=UTC)
        try:
            created = self._conn.identity.create_application_credential(
                user=self._conn.current_user_id,
                name=f"spotcap-actuator-{self.region}-{int(expires_at_s)}",
                expires_at=expires_at.strftime("%Y-%m-%dT%H:%M:%S"),
                description=f"spotcap actuator, {self.region}, one project, one hour (ADR-29)",
            )
        except Exception as error:  # openstacksdk's and keystoneauth's hierarchies
            raise NoAuthorityError(
                f"the issuer could not make a credential in project {self.project}: "
                f"{type(error).__name__}"
            ) from error
        secret = {
            "auth_url": self._auth_url,
            "application_credential_id": created.id,
            "application_credential_secret": created.secret,
            "expires_at_s": str(int(expires_at_s)),
            "ttl": f"{self.ttl_s}s",
        }
        try:
            self._client.secrets.kv.v1.create_or_update_secret(
                path=credential_path(self.region, self.project), secret=secret,
                mount_point=self._mount,
            )  # fmt: skip
        except Exception as error:
            raise NoAuthorityError(
                f"cannot publish the credential of project {self.project}: {_why(error)}"
            ) from error
        return str(created.id)


class ProjectAuthority:
    """The actuator's authority in one project: the credential OpenBao holds for it, read
    again before its lease runs out, and the provider session bound to it."""

    def __init__(
        self,
        client: Any,
        region: str,
        project: str,
        *,
        mount: str,
        renew_after: float = 0.5,
        clock: Callable[[], float] = time.time,
        session: Any = None,
    ) -> None:
        self._client = client
        self.region, self.project = region, project
        self._mount = mount
        self._renew_after = renew_after
        self._clock = clock
        self._session = session
        self._current: ProviderCredential | None = None
        self._read_at_s = 0.0
        self._bound: str | None = None
        self.backoff = Backoff(clock)
        self.reads = 0
        if session is not None:  # the provider file's credentials are never used from here
            session.auth = _no_credential_plugin(region, project)

    def credential(self) -> ProviderCredential:
        """The project's credential; read from OpenBao when none is held or the lease is past
        `renew_after`. `NoAuthorityError` when OpenBao holds none, or the one held has expired
        and OpenBao handed out no other; `AuthorityUnavailableError` when OpenBao cannot be
        reached (or was not, less than the backoff ago) and no live credential is held. A
        credential still live is kept through an outage: a failed renewal is no refusal."""
        now = self._clock()
        held = self._current
        if held is None or now >= self._read_at_s + held.lease_s * self._renew_after:
            live = held is not None and now < held.expires_at_s
            if not self.backoff.ready(now):
                if not live:
                    raise AuthorityUnavailableError(self._waiting(now))
            else:
                try:
                    fresh = self._read()
                except AuthorityUnavailableError as error:
                    self._failed(error, held if live else None)  # from the failure's end
                    if not live:
                        raise
                else:
                    if self.backoff.answered():
                        log.warning("OpenBao answers again: %s", self.describe())
                    self._current, self._read_at_s, held = fresh, now, fresh
        assert held is not None
        if now >= held.expires_at_s:
            raise NoAuthorityError(
                f"the credential of project {self.project} in {self.region} expired at "
                f"{_iso(held.expires_at_s)} and the issuer published none since"
            )
        return held

    @property
    def failures(self) -> int:
        """Reads that could not reach OpenBao."""
        return self.backoff.failures

    @property
    def failures_in_a_row(self) -> int:
        return self.backoff.failures_in_a_row

    def _failed(self, error: Exception, live: ProviderCredential | None) -> None:
        """A read that did not reach OpenBao: the next one after the backoff."""
        wait_s = self.backoff.failed()
        keeping = (
            f"the credential held stays in use until {_iso(live.expires_at_s)}"
            if live is not None
            else "no live credential is held: orders wait"
        )
        log.warning("%s; %s; OpenBao is asked again in %.0f s", error, keeping, wait_s)

    def _waiting(self, now: float) -> str:
        return (
            f"OpenBao could not be reached for the credential of project {self.project} in "
            f"{self.region} and none live is held: asked again in "
            f"{self.backoff.left_s(now):.0f} s"
        )

    def refusal(self, call: str) -> str | None:
        """Why a `call` in this project must not go out (None: it may); binds the session to
        the current credential first. `AuthorityUnavailableError` when that cannot be told
        now (OpenBao unreachable, no live credential held): the call must wait, not be
        refused."""
        try:
            credential = self.credential()
        except AuthorityUnavailableError:
            raise
        except NoAuthorityError as error:
            return f"no authority for {call} in project {self.project}: {error}"
        self.bind(credential)
        return None

    def keep_fresh(self) -> None:
        """Renew and re-bind the credential once its lease is half spent, so that reads too go
        out with a live one; OpenBao unreachable waits out the backoff (`credential`)."""
        with contextlib.suppress(NoAuthorityError):
            self.refusal("reading the provider")

    def describe(self) -> str:
        """Where the authority comes from, in words (no token, no secret)."""
        return (
            f"provider credentials of project {self.project} from OpenBao "
            f"({self._mount}/{credential_path(self.region, self.project)})"
        )

    def bind(self, credential: ProviderCredential) -> None:
        if self._session is not None and self._bound != credential.application_credential_id:
            self._session.auth = credential.auth_plugin()
            self._bound = credential.application_credential_id

    def _read(self) -> ProviderCredential:
        path = credential_path(self.region, self.project)
        try:
            answer = self._client.secrets.kv.v1.read_secret(path=path, mount_point=self._mount)
        except Exception as error:
            if type(error).__name__ == "InvalidPath":
                raise NoAuthorityError(
                    f"OpenBao holds no credential for project {self.project} in {self.region} "
                    f"({self._mount}/{path}): the actuator has no authority there"
                ) from error
            address = getattr(self._client, "url", None) or "BAO_ADDR"
            where = (
                f"cannot read the credential of project {self.project} from OpenBao at {address}"
            )
            if unreachable(error):
                raise AuthorityUnavailableError(
                    f"{where}: {_why(error)}; check that OpenBao runs there, unsealed, and that "
                    "this machine reaches it (BAO_ADDR); asked again after a backoff"
                ) from error
            raise NoAuthorityError(
                f"{where}: {_why(error)}; check that the actuator's token (BAO_TOKEN) may read "
                f"{self._mount}/{path}"
            ) from error
        self.reads += 1
        data = answer["data"]
        return ProviderCredential(
            region=self.region,
            project=self.project,
            auth_url=str(data["auth_url"]),
            application_credential_id=str(data["application_credential_id"]),
            application_credential_secret=str(data["application_credential_secret"]),
            expires_at_s=float(data["expires_at_s"]),
            lease_s=int(answer.get("lease_duration") or 0),
        )


def openbao_client(address: str, token: str) -> Any:
    """An hvac client of the services that read OpenBao (the actuator's authority, its node
    enroller and revoker, the bundle service), each request bounded by `TIMEOUT_S`: a paused
    OpenBao costs a call that long, not hvac's default 30 s."""
    import hvac  # loads requests: only the services that read OpenBao need it

    return hvac.Client(url=address, token=token, timeout=TIMEOUT_S)


def unreachable(error: Exception) -> bool:
    """Whether `error` (of hvac or requests) says OpenBao cannot answer now (down, paused,
    sealed, starting, overloaded), rather than a refusal."""
    return isinstance(error, OSError) or type(error).__name__ in _UNREACHABLE


def openbao_from_env(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """OpenBao's address and token as the environment gives them to every service that reads
    it (the actuator's authority and revoker, the bundle service): BAO_ADDR (else VAULT_ADDR)
    and BAO_TOKEN (else VAULT_TOKEN); None unless both are set."""
    address = environ.get("BAO_ADDR") or environ.get("VAULT_ADDR")
    token = environ.get("BAO_TOKEN") or environ.get("VAULT_TOKEN")
    return (address, token) if address and token else None


def authority_from_env(
    environ: Mapping[str, str], region: str, session: Any
) -> ProjectAuthority | None:
    """The actuator's authority as the environment configures it: SPOTCAP_AUTHORITY_PROJECT
    (the project; unset: None, the provider file's own credentials), SPOTCAP_AUTHORITY_MOUNT
    (default `DEFAULT_MOUNT`), OpenBao at BAO_ADDR (else VAULT_ADDR) with the token BAO_TOKEN
    (else VAULT_TOKEN). `session` (the provider's keystoneauth session) is bound at once to the
    project's credential when OpenBao holds one (and before every mutating call)."""
    project = environ.get("SPOTCAP_AUTHORITY_PROJECT")
    if not project:
        return None
    found = openbao_from_env(environ)
    if found is None:
        raise NoAuthorityError(
            "SPOTCAP_AUTHORITY_PROJECT needs OpenBao: set BAO_ADDR (or VAULT_ADDR) and "
            f"BAO_TOKEN (or VAULT_TOKEN), a token that may read {RECORDS}/{region}/{project}"
        )
    address, token = found
    mount = environ.get("SPOTCAP_AUTHORITY_MOUNT") or DEFAULT_MOUNT
    client = openbao_client(address, token)
    authority = ProjectAuthority(client, region, project, mount=mount, session=session)
    authority.keep_fresh()  # binds the session when a credential exists and OpenBao answers
    return authority


def _iso(at_s: float) -> str:
    return datetime.fromtimestamp(at_s, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
