"""Sign-in's keys follow the issuer (`console.signin.IssuerKeys`), with OpenBao's OIDC provider as
the issuer: a key the issuer rotated out and stopped publishing is refused once the server has
read the keys again (`spotcap serve` with SPOTCAP_OIDC_KEYS_REFRESH_S), the new key accepted;
the keys are read again on their period and not before; forged key ids cost the issuer one
read per cooldown at most; the period is configured by the environment or refused in a
sentence. (The issuer down or stalled: tests/faults/test_openbao_faults.py.)"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import jwt
import pytest

from console.signin import (
    KEYS_REFRESH_ENV,
    KEYS_REFRESH_S,
    UNSEEN_KEY_EVERY_S,
    IssuerKeys,
    SignInError,
    keys_refresh_s,
)
from infra import servers
from spotcap.config import Settings
from spotcap.wiring import stores
from tests.serve_support import SPOTCAP, Reply, Served, child_env, send
from tests.signin_support import Issuer, new_issuer

pytestmark = pytest.mark.slow

REFRESH_S = 2.0
"""The served key set's period in the rotation test: short, so that the test waits little."""
PATIENCE_S = 180.0
"""OpenBao drops a key whose verification TTL has passed in its periodic function, about once
a minute (measured: 56 s after a rotation with a 2 s TTL)."""


def keys_url(issuer: Issuer) -> str:
    return f"{issuer.url}/.well-known/keys"


def published(issuer: Issuer) -> set[str]:
    """The key ids the issuer publishes now."""
    with urllib.request.urlopen(keys_url(issuer), timeout=10) as answer:
        return {str(k["kid"]) for k in json.loads(answer.read())["keys"]}


def kid(token: str) -> str:
    return str(jwt.get_unverified_header(token)["kid"])


def health(served: Served, token: str) -> Reply:
    headers = {"Authorization": f"Bearer {token}"}
    return send(urllib.request.Request(f"{served.url}/api/v1/health", headers=headers))


def wait_until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not done():
        assert time.monotonic() < deadline, f"not {what} within {PATIENCE_S:.0f} s"
        time.sleep(0.5)


def test_a_key_rotated_out_is_refused_after_the_next_read_and_the_new_key_accepted(
    openbao: servers.Server, tmp_path: Path
) -> None:
    issuer = new_issuer(openbao)
    issuer.person("sre", ["spotcap-sre"])
    home = tmp_path / "home"
    home.mkdir()  # an empty home: the health route answers 200 on it
    served = Served(home, tmp_path, "--oidc-issuer", issuer.url, "--oidc-audience",
                    issuer.audience, env={KEYS_REFRESH_ENV: str(REFRESH_S)})  # fmt: skip
    try:
        old = issuer.token("sre")
        assert health(served, old).status == 200  # its key read and in use
        # The issuer rotates its key; the old one is published for one second more.
        issuer.root.write(f"identity/oidc/key/{issuer.name}/rotate", verification_ttl="1s")
        new = issuer.token("sre")
        assert kid(new) != kid(old)
        assert health(served, new).status == 200
        wait_until(lambda: kid(old) not in published(issuer), "the old key unpublished")
        # The served keys are read again within REFRESH_S: from then on the old key is refused.
        wait_until(lambda: health(served, old).status == 401, "the old key refused")
        refused = health(served, old)
        assert refused.status == 401
        assert f"the token is not signed by a key of {issuer.url}" in refused.text
        expires = jwt.decode(old, options={"verify_signature": False})["exp"]
        assert expires > time.time() + 600  # refused for its key, not for its age
        assert health(served, new).status == 200
        assert health(served, issuer.token("sre")).status == 200
        assert old not in served.err.read_text() and new not in served.err.read_text()
    finally:
        served.stop()
        stores(Settings.load(home=home, region="dev")).stop_embedded_postgres()


def test_the_keys_are_read_again_on_their_period_and_not_before(openbao: servers.Server) -> None:
    issuer = new_issuer(openbao)
    issuer.person("sre", ["spotcap-sre"])
    now = [1000.0]
    keys = IssuerKeys(keys_url(issuer), refresh_s=60.0, clock=lambda: now[0])
    known = kid(issuer.token("sre"))
    assert keys.key(known).key_id == known and keys.reads == 1
    now[0] += 59.0
    assert keys.key(known).key_id == known and keys.reads == 1  # held
    now[0] += 2.0
    assert keys.key(known).key_id == known and keys.reads == 2  # read again
    # A key the issuer adds (a rotation publishes the next key) is found by the next read.
    before = published(issuer)
    issuer.root.write(f"identity/oidc/key/{issuer.name}/rotate")
    added = sorted(published(issuer) - before)[0]
    now[0] += 61.0
    assert keys.key(added).key_id == added and keys.reads == 3
    assert keys.failures == 0


def test_forged_key_ids_cost_the_issuer_one_read_per_cooldown(openbao: servers.Server) -> None:
    issuer = new_issuer(openbao)
    issuer.person("sre", ["spotcap-sre"])
    now = [1000.0]
    keys = IssuerKeys(keys_url(issuer), clock=lambda: now[0])
    known = kid(issuer.token("sre"))
    assert keys.key(known).key_id == known and keys.reads == 1
    for n in range(50):  # a flood of key ids the issuer never published, inside the cooldown
        with pytest.raises(LookupError):
            keys.key(f"forged-{n}")
    assert keys.reads == 1  # the issuer was not asked
    now[0] += UNSEEN_KEY_EVERY_S
    for n in range(50):  # past the cooldown: the first is looked up, the others are not
        with pytest.raises(LookupError):
            keys.key(f"forged-again-{n}")
    assert keys.reads == 2
    assert keys.key(known).key_id == known and keys.reads == 2 and keys.failures == 0


def test_the_keys_period_comes_from_the_environment_or_is_refused_in_a_sentence(
    tmp_path: Path,
) -> None:
    assert keys_refresh_s({}) == KEYS_REFRESH_S
    assert keys_refresh_s({KEYS_REFRESH_ENV: "2.5"}) == 2.5
    for bad in ("0", "-3", "soon", "inf", "nan"):
        with pytest.raises(SignInError, match=f"{KEYS_REFRESH_ENV}=.* is not a number of"):
            keys_refresh_s({KEYS_REFRESH_ENV: bad})
    done = subprocess.run(
        [SPOTCAP, "--home", str(tmp_path), "serve", "--port", "0", "--oidc-issuer",
         "http://127.0.0.1:9/v1/identity/oidc", "--oidc-audience", "console"],
        capture_output=True, text=True, timeout=120, check=False,
        env=child_env() | {KEYS_REFRESH_ENV: "soon"},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"{KEYS_REFRESH_ENV}='soon' is not a number of seconds above 0" in done.stderr
