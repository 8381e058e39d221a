"""OpenBao as the OIDC issuer of the sign-in tests: its identity tokens (`identity/oidc`).

People are userpass users of their own mount; each signs in (a client token bound to their
identity entity) and asks `identity/oidc/token/ROLE` for a signed ID token whose `groups` claim
lists the identity groups the entity is a member of (spotcap-sre, spotcap-owner-TEAM, ...). The
issuer is `<address>/v1/identity/oidc`; its discovery document and keys are public there.

Every password and token made here is recorded in `Issuer.secrets`, so that a test can look
for them where they must never be (logs, error sentences, `--json` output).
"""

from __future__ import annotations

import base64
import json
import secrets
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import hvac
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from infra import servers

TEMPLATE = '{"groups": {{identity.entity.groups.names}}}'
MINT_POLICY = 'path "identity/oidc/token/*" { capabilities = ["read"] }'


@dataclass
class Issuer:
    """An OIDC issuer on the session's OpenBao, with its own key, roles and people."""

    address: str
    root: hvac.Client
    name: str
    audience: str = ""
    secrets: list[str] = field(default_factory=list)
    _people: dict[str, hvac.Client] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"{self.address}/v1/identity/oidc"

    @property
    def ids(self) -> Any:
        return self.root.secrets.identity

    def _role(self, suffix: str) -> str:
        return f"{self.name}-{suffix}"

    def set_up(self) -> None:
        """A signing key, the role whose tokens name this server's audience, another role (another
        audience), and the userpass mount people sign in with."""
        self.ids.create_named_key(self.name, allowed_client_ids=["*"], algorithm="RS256")
        self.ids.create_or_update_role(
            self._role("console"), key=self.name, template=TEMPLATE, ttl="1h"
        )
        self.audience = self.ids.read_role(self._role("console"))["data"]["client_id"]
        self.ids.create_or_update_role(
            self._role("other-app"), key=self.name, template=TEMPLATE, ttl="1h"
        )
        # Same audience, a lifetime of one second: a token that expires while the test waits.
        self.ids.create_or_update_role(
            self._role("brief"), key=self.name, template=TEMPLATE, client_id=self.audience, ttl="1s"
        )
        self.root.sys.enable_auth_method("userpass", path=self.name)
        self.root.sys.create_or_update_policy(self.name, MINT_POLICY)

    def person(self, username: str, groups: list[str]) -> None:
        """A user who signs in with a password and is a member of `groups`."""
        password = secrets.token_urlsafe(18)
        self.secrets.append(password)
        self.root.write(
            f"auth/{self.name}/users/{username}", password=password, token_policies=[self.name]
        )
        client = hvac.Client(url=self.address)
        auth = client.auth.userpass.login(username, password, mount_point=self.name)["auth"]
        self.secrets.append(auth["client_token"])
        for group in groups:
            found = self.root.read(f"identity/group/name/{group}")
            members = set(found["data"]["member_entity_ids"] or []) if found else set()
            self.root.write(
                f"identity/group/name/{group}",
                member_entity_ids=sorted(members | {auth["entity_id"]}),
            )
        self._people[username] = hvac.Client(url=self.address, token=auth["client_token"])

    def token(self, username: str, role: str = "console") -> str:
        """A fresh ID token of `username` from the issuer's role (console: this server's)."""
        answer = self._people[username].read(f"identity/oidc/token/{self._role(role)}")
        token = str(answer["data"]["token"])
        self.secrets.append(token)
        return token

    def expired(self, username: str) -> str:
        """A token of the right audience whose lifetime (one second) has run out, with the
        server's leeway for clocks apart (console.signin.LEEWAY_S) too."""
        from console.signin import LEEWAY_S

        token = self.token(username, "brief")
        expires = jwt.decode(token, options={"verify_signature": False})["exp"]
        deadline = time.monotonic() + 60
        while time.time() <= expires + LEEWAY_S + 1 and time.monotonic() < deadline:
            time.sleep(0.5)
        return token

    @contextmanager
    def another_issuer(self) -> Iterator[None]:
        """While inside, the server's tokens name another issuer (signed by the same keys)."""
        self.ids.configure_tokens_backend(issuer="http://127.0.0.2:8200")
        try:
            yield
        finally:
            self.ids.configure_tokens_backend(issuer="")

    def from_another_issuer(self, username: str) -> str:
        with self.another_issuer():
            return self.token(username)


def new_issuer(openbao: servers.Server) -> Issuer:
    root = hvac.Client(url=openbao.address, token=servers.openbao_token(openbao))
    issuer = Issuer(openbao.address, root, f"signin-{uuid.uuid4().hex[:8]}")
    issuer.secrets.append(servers.openbao_token(openbao))
    issuer.set_up()
    return issuer


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def tampered(token: str, **claims: Any) -> str:
    """`token` with its claims changed (`claims` set) under its original signature."""
    header, payload, signature = token.split(".")
    body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return ".".join([header, _b64(json.dumps(body | claims).encode()), signature])


def self_signed(token: str, **claims: Any) -> tuple[str, str]:
    """`token`'s header (its key id) and claims (`claims` set), signed by a key of our own that
    the issuer never published; and that key (PEM), a secret too."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    header = jwt.get_unverified_header(token)
    body = jwt.decode(token, options={"verify_signature": False}) | claims
    return jwt.encode(body, pem, algorithm="RS256", headers={"kid": header["kid"]}), pem


def unsigned(token: str, **claims: Any) -> str:
    """`token`'s claims (`claims` set) with `alg: none` and no signature."""
    body = jwt.decode(token, options={"verify_signature": False}) | claims
    header = {"alg": "none", "typ": "JWT", "kid": jwt.get_unverified_header(token)["kid"]}
    return f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(body).encode())}."
