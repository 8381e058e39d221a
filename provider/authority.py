"""Capacity authority (ADR-29): the actuator's provider credentials are one-hour OpenStack
application credentials, one project each, read through OpenBao; no node holds any.

* The **issuer** (`CredentialIssuer`, in the control plane) holds the one identity that may make
  application credentials in the project; before the current one is half spent it makes a new
  one that expires an hour later and writes it to OpenBao's KV engine (version 1) at
  ``spotcap/providers/<region>/<project>`` with that ``ttl``, so every reader is told its lease.
* The **actuator** reads it through hvac (`ProjectAuthority`), with a token that may read that
  path and nothing else, and reads again once `renew_after` of the lease has passed; the
  provider's session is re-bound to the new credential (`bind`). Before every mutating call it
  asks `refusal`: no credential for the project, one that has expired, or OpenBao unreachable
  with none held all refuse the call, and the actuator writes ``actuation_refused`` (rule
  ``no_authority``). A failed read is not tried again before a bounded backoff, and a held
  credential that has not expired is used meanwhile (`ProjectAuthority.credential`).
  Reads (listing, the provider's feeds) go out with the same credential: from the moment the
  authority takes the session, the provider file's own credentials are never used, and until
  OpenBao hands one out a read fails (`NoCredentialYet`) instead of going out with them.

A credential's secret is in no event, log line, error sentence or repr.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger("spotcap.authority")

RECORDS = "spotcap/providers"
DEFAULT_MOUNT = "spotcap-authority"
"""The KV (version 1) mount the issuer publishes to, unless SPOTCAP_AUTHORITY_MOUNT names one."""
CREDENTIAL_TTL_S = 3600
"""One hour (ADR-29)."""
OPENBAO_TIMEOUT_S = 5.0
"""How long one request to OpenBao may take (hvac's own default is 30 s): a stalled OpenBao
must not hold the actuator's step, or a mutating call, for longer."""
BACKOFF_S = (1.0, 60.0)
"""After a failed read, OpenBao is not asked again for the first wait, doubled after each
failure up to the second, and back to the first once a read succeeds: bounded both ways."""


class NoAuthorityError(RuntimeError):
    """No usable credential for a project; the message says why (never a secret)."""


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
        self._next_try_s = float("-inf")  # no read before this (after a failed one)
        self._wait_s = BACKOFF_S[0]
        self.reads = 0
        self.attempts = 0
        """Reads asked of OpenBao, failed ones included."""
        self.attempts_failed = 0
        self.trouble: str | None = None
        """Why the last read failed (None once one succeeds): a sentence naming OpenBao's
        address and what to check, never a token or a secret."""
        if session is not None:  # the provider file's credentials are never used from here
            session.auth = _no_credential_plugin(region, project)

    def credential(self) -> ProviderCredential:
        """The project's credential; read from OpenBao when none is held or the lease is past
        `renew_after`; `NoAuthorityError` when there is none, or it has expired.

        OpenBao slow or down: a read that fails (no answer within the client's timeout,
        `OPENBAO_TIMEOUT_S` from `authority_from_env`) is not tried again before a backoff
        (`BACKOFF_S`, doubling, bounded); meanwhile a held credential that has not expired is
        used still (its lease is OpenBao's advice to read again, not its end), and without
        one every call is refused with the sentence of `trouble`."""
        now = self._clock()
        held = self._current
        if held is None or now >= self._read_at_s + held.lease_s * self._renew_after:
            if now >= self._next_try_s:
                try:
                    held = self._read()
                except NoAuthorityError as error:
                    self._failed(self._clock(), error)  # the wait counts from the failure
                    if held is None or now >= held.expires_at_s:
                        raise NoAuthorityError(self.trouble or str(error)) from error
                else:
                    self._current, self._read_at_s = held, now
                    self._next_try_s, self._wait_s, self.trouble = float("-inf"), BACKOFF_S[0], None
            elif held is None or now >= held.expires_at_s:
                raise NoAuthorityError(self.trouble or "OpenBao has not answered yet")
        assert held is not None
        if now >= held.expires_at_s:
            raise NoAuthorityError(
                f"the credential of project {self.project} in {self.region} expired at "
                f"{_iso(held.expires_at_s)} and the issuer published none since"
            )
        return held

    def refusal(self, call: str) -> str | None:
        """Why a `call` in this project must not go out (None: it may); binds the session to
        the current credential first."""
        try:
            credential = self.credential()
        except NoAuthorityError as error:
            return f"no authority for {call} in project {self.project}: {error}"
        self.bind(credential)
        return None

    def keep_fresh(self) -> None:
        """Renew and re-bind the credential once its lease is half spent, so that reads too go
        out with a live one (after a failed read, not before the backoff has passed)."""
        self.refusal("reading the provider")

    def _failed(self, now: float, error: NoAuthorityError) -> None:
        """Note a failed read: the sentence, and when to ask again (the backoff doubles)."""
        wait = self._wait_s
        self._next_try_s = now + wait
        self._wait_s = min(wait * 2, BACKOFF_S[1])
        self.attempts_failed += 1
        self.trouble = f"{error}; asked again in {wait:.0f} s"
        log.warning("%s", self.trouble)

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
        self.attempts += 1
        try:
            answer = self._client.secrets.kv.v1.read_secret(path=path, mount_point=self._mount)
        except Exception as error:
            if type(error).__name__ == "InvalidPath":
                raise NoAuthorityError(
                    f"OpenBao holds no credential for project {self.project} in {self.region} "
                    f"({self._mount}/{path}): the actuator has no authority there"
                ) from error
            address = getattr(self._client, "url", None) or "BAO_ADDR"
            raise NoAuthorityError(
                f"cannot read the credential of project {self.project} from OpenBao at "
                f"{address}: {_why(error)}; check that OpenBao runs there, unsealed, that this "
                f"machine reaches it (BAO_ADDR), and that the actuator's token (BAO_TOKEN) may "
                f"read {self._mount}/{path}"
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
    import hvac  # loads requests: only an actuator with an authority needs it

    mount = environ.get("SPOTCAP_AUTHORITY_MOUNT") or DEFAULT_MOUNT
    client = hvac.Client(url=address, token=token, timeout=OPENBAO_TIMEOUT_S)
    authority = ProjectAuthority(client, region, project, mount=mount, session=session)
    authority.refusal("the actuator's start")  # binds the session when a credential exists
    return authority


def _iso(at_s: float) -> str:
    return datetime.fromtimestamp(at_s, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
