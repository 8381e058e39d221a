"""The actuator's read of its provider credential when OpenBao is slow or down (ADR-29, issue
24), against a real OpenBao of this test's own, stopped with SIGSTOP (it accepts connections
and answers nothing: a stalled server, the slow case at its worst) and resumed with SIGCONT.

A read that gets no answer within the client's timeout fails with one sentence naming
OpenBao's address and what to check, and no secret; OpenBao is then not asked again before a
backoff that doubles and stops doubling at `BACKOFF_S`'s bound; a credential already held and
unexpired is used meanwhile (calls go out), one never read is refused with that sentence; once
OpenBao answers again the next read after the backoff takes the credential and clears it all.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hvac
import pytest

from infra import servers
from provider.authority import (
    BACKOFF_S,
    OPENBAO_TIMEOUT_S,
    NoAuthorityError,
    ProjectAuthority,
    authority_from_env,
    setup_authority_store,
)
from tests.test_capacity_authority import PROJECT, clouds
from tests.test_capacity_authority import Authority as Store

__all__ = ["clouds"]  # a fixture, used by name

TIMEOUT_S = 1.0  # the test's client timeout: each read of a stalled OpenBao costs this


@pytest.fixture
def own_openbao(tmp_path: Path) -> Iterator[servers.Server]:
    """An OpenBao of this test's own: stopping it stalls no other test."""
    server = servers.start_openbao(tmp_path / "openbao")
    try:
        yield server
    finally:
        os.kill(server.pid, signal.SIGCONT)  # never leave it stopped
        servers.stop(server)


class Stalled:
    """SIGSTOP the server for the body, SIGCONT after (whatever happens)."""

    def __init__(self, server: servers.Server) -> None:
        self.pid = server.pid

    def __enter__(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def __exit__(self, *exc: object) -> None:
        os.kill(self.pid, signal.SIGCONT)


def test_a_stalled_openbao_is_said_in_a_sentence_backed_off_and_recovered(
    own_openbao: servers.Server, clouds: Any
) -> None:
    token = servers.openbao_token(own_openbao)
    root = hvac.Client(url=own_openbao.address, token=token)
    mount = f"authority-{uuid.uuid4().hex[:8]}"
    setup_authority_store(root, mount)
    store = Store(root, mount, clouds())
    store.issuer().issue()
    client = hvac.Client(url=own_openbao.address, token=token, timeout=TIMEOUT_S)
    now = [time.time()]
    held = ProjectAuthority(
        client, store.cloud.access.region, PROJECT, mount=mount, renew_after=0.5,
        clock=lambda: now[0],
    )  # fmt: skip
    fresh = ProjectAuthority(
        client, store.cloud.access.region, PROJECT, mount=mount, clock=lambda: now[0]
    )
    credential = held.credential()
    assert held.attempts == 1 and held.trouble is None

    with Stalled(own_openbao):
        now[0] += 1900  # past half the lease: read again, and OpenBao does not answer
        assert held.refusal("launch") is None  # the held credential is unexpired: used
        assert held.attempts == 2 and held.attempts_failed == 1
        said = held.trouble
        assert said is not None
        assert f"from OpenBao at {own_openbao.address}" in said
        assert "did not answer in time" in said and "ReadTimeout" in said
        assert "check that OpenBao runs there, unsealed" in said and "BAO_TOKEN" in said
        assert said.endswith("asked again in 1 s")
        for secret in (token, credential.application_credential_secret):
            assert secret not in said
        # Inside the backoff OpenBao is not asked: no read, however many calls.
        for _ in range(5):
            assert held.refusal("launch") is None
        assert held.attempts == 2

        # Never read: refused, with the same sentence.
        with pytest.raises(NoAuthorityError) as refused:
            fresh.credential()
        assert f"from OpenBao at {own_openbao.address}" in str(refused.value)
        reason = fresh.refusal("launch")  # inside its backoff: refused without asking
        assert reason is not None and "did not answer in time" in reason
        assert fresh.attempts == 1

        # Each further failure doubles the wait, up to the bound and no further.
        waits = []
        for _ in range(8):
            now[0] += waits[-1] if waits else BACKOFF_S[0]
            held.keep_fresh()
            assert held.trouble is not None
            waits.append(float(held.trouble.rsplit("in ", 1)[1].removesuffix(" s")))
        assert waits == [2.0, 4.0, 8.0, 16.0, 32.0, BACKOFF_S[1], BACKOFF_S[1], BACKOFF_S[1]]
        assert held.attempts == 10  # one read per backoff, never more

    # OpenBao answers again: the read after the backoff takes the credential, all clear.
    now[0] += BACKOFF_S[1]
    assert held.refusal("launch") is None
    assert held.trouble is None and held.attempts == 11
    now[0] += BACKOFF_S[0]
    assert fresh.refusal("launch") is None and fresh.trouble is None


def test_the_actuators_client_gives_openbao_a_bounded_time(
    own_openbao: servers.Server, clouds: Any
) -> None:
    """`authority_from_env` (what `spotcap run actuator` builds) with OpenBao stalled from its
    start: its client waits `OPENBAO_TIMEOUT_S` for an answer (not hvac's 30 s default), the
    start's read fails, and the call is refused in the sentence without asking again."""
    token = servers.openbao_token(own_openbao)
    root = hvac.Client(url=own_openbao.address, token=token)
    mount = f"authority-{uuid.uuid4().hex[:8]}"
    setup_authority_store(root, mount)
    store = Store(root, mount, clouds())
    store.issuer().issue()
    env = {
        "SPOTCAP_AUTHORITY_PROJECT": PROJECT,
        "SPOTCAP_AUTHORITY_MOUNT": mount,
        "BAO_ADDR": own_openbao.address,
        "BAO_TOKEN": token,
    }
    with Stalled(own_openbao):
        authority = authority_from_env(env, store.cloud.access.region, None)
        assert authority is not None and authority.attempts == 1
        # hvac keeps the timeout with the adapter's request options
        assert authority._client.adapter._kwargs["timeout"] == OPENBAO_TIMEOUT_S
        reason = authority.refusal("launch")
        assert reason is not None and f"OpenBao at {own_openbao.address}" in reason
        assert token not in reason
    assert authority.attempts == 1  # inside the backoff: not asked again
