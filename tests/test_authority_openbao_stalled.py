"""The actuator's read of its provider credential when OpenBao is slow or down (ADR-29, issue
24), against a real OpenBao of this test's own, stopped with SIGSTOP (it accepts connections
and answers nothing: a stalled server, the slow case at its worst) and resumed with SIGCONT.

A read that gets no answer within the client's timeout fails with one sentence naming
OpenBao's address and what to check, and no secret; OpenBao is then not asked again before a
backoff that doubles and stops doubling at `RETRY_MAX_S`; a credential already held and
unexpired is used meanwhile (calls go out); with none held a call waits (not refused); once
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
    RETRY_FIRST_S,
    RETRY_MAX_S,
    TIMEOUT_S,
    AuthorityUnavailableError,
    ProjectAuthority,
    authority_from_env,
    setup_authority_store,
)
from tests.test_capacity_authority import PROJECT, clouds
from tests.test_capacity_authority import Authority as Store

__all__ = ["clouds"]  # a fixture, used by name

CLIENT_TIMEOUT_S = 1.0  # the test's client timeout: each read of a stalled OpenBao costs this


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
    client = hvac.Client(url=own_openbao.address, token=token, timeout=CLIENT_TIMEOUT_S)
    now = [time.time()]
    held = ProjectAuthority(
        client, store.cloud.access.region, PROJECT, mount=mount, renew_after=0.5,
        clock=lambda: now[0],
    )  # fmt: skip
    fresh = ProjectAuthority(
        client, store.cloud.access.region, PROJECT, mount=mount, clock=lambda: now[0]
    )
    credential = held.credential()
    assert held.reads == 1 and held.failures == 0

    with Stalled(own_openbao):
        now[0] += 1900  # past half the lease: read again, and OpenBao does not answer
        assert held.refusal("launch") is None  # the held credential is unexpired: used
        assert held.reads == 1 and held.failures == 1

        # Never read: the call waits (not refused), with one sentence and no secret.
        with pytest.raises(AuthorityUnavailableError) as waits:
            fresh.credential()
        said = str(waits.value)
        assert f"from OpenBao at {own_openbao.address}" in said
        assert "did not answer in time" in said and "ReadTimeout" in said
        assert "check that OpenBao runs there, unsealed" in said
        for secret in (token, credential.application_credential_secret):
            assert secret not in said
        with pytest.raises(AuthorityUnavailableError, match="asked again in"):
            fresh.refusal("launch")  # inside its backoff: not asked
        assert fresh.failures == 1

        # Inside the backoff OpenBao is not asked: no read, however many calls.
        for _ in range(5):
            assert held.refusal("launch") is None
        assert held.failures == 1

        # Each further failure doubles the wait, up to the bound and no further.
        waits_s = [held.backoff.wait_s]
        for _ in range(7):
            now[0] += waits_s[-1]
            held.keep_fresh()
            waits_s.append(held.backoff.wait_s)
        assert waits_s == [RETRY_FIRST_S * 2**i for i in range(5)] + [RETRY_MAX_S] * 3
        assert held.failures == 8  # one read per backoff, never more

    # OpenBao answers again: the read after the backoff takes the credential, all clear.
    now[0] += RETRY_MAX_S
    assert held.refusal("launch") is None
    assert held.reads == 2 and held.failures_in_a_row == 0
    now[0] += RETRY_FIRST_S
    assert fresh.refusal("launch") is None and fresh.reads == 1


def test_the_actuators_client_gives_openbao_a_bounded_time(
    own_openbao: servers.Server, clouds: Any
) -> None:
    """`authority_from_env` (what `spotcap run actuator` builds) with OpenBao stalled from its
    start: its client waits `TIMEOUT_S` for an answer (not hvac's 30 s default), the start's
    read fails, and a call waits with a sentence, without asking again inside the backoff."""
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
        assert authority is not None and authority.failures == 1
        # hvac keeps the timeout with the adapter's request options
        assert authority._client.adapter._kwargs["timeout"] == TIMEOUT_S
        with pytest.raises(AuthorityUnavailableError) as waits:
            authority.refusal("launch")
        assert token not in str(waits.value)
    assert authority.failures == 1  # inside the backoff: not asked again
