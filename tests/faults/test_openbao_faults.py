"""OpenBao killed (SIGKILL, then started again from its folder) and paused (SIGSTOP, 10 s and
more) under the services that use it, each on a real OpenBao of the test's own:

- the actuator's capacity authority (ADR-29, `provider.authority`): with a live credential
  held, a renewal that cannot reach OpenBao is no refusal: the orders go out with the credential
  held, and the renewal is made once OpenBao answers; with no live credential held, the orders
  wait (nothing sent, nothing refused) and go out, each once, when OpenBao answers again;
- the actuator's node revoker and enroller: with OpenBao paused they try one node per backoff
  in all (the authority's, shared: 1 s doubled to 30 s), none in between, and once it answers
  every node is revoked or enrolled, once;
- a node agent renewing its certificate through the bundle service: the service answers 503
  (OpenBao cannot be reached: not a refusal), the agent keeps its certificate, still valid and
  still accepted by TLS, and renews once OpenBao answers again (the CA and the node's record
  kept across a restart);
- `spotcap serve` signing people in with OpenBao's OIDC tokens: a token signed by a key it has
  seen keeps working through the outage (the keys are cached); a token naming a key it has not
  seen is answered 503 with a sentence naming the issuer (never a 500, never let through), and
  200 once OpenBao is back (after the keys' backoff), with the same keys (Raft storage: a
  restart keeps them); keys whose period ends during the outage are kept one more period at
  most.
"""

from __future__ import annotations

import os
import signal
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import hvac
import jwt
import pytest
from cryptography import x509

from agent.identity import FetchError, NodeIdentityClient, identity_round
from console.signin import UNSEEN_KEY_EVERY_S, IssuerKeys, KeysUnreachableError
from infra import servers
from infra.servers.process import alive
from provider.actuator import ActuatorOptions, ActuatorService
from provider.authority import (
    RETRY_FIRST_S,
    RETRY_MAX_S,
    TIMEOUT_S,
    Backoff,
    ProjectAuthority,
    credential_path,
    openbao_client,
    setup_authority_store,
)
from provider.base import CALL_TAG
from provider.nodes import (
    Enroller,
    NodeIdentity,
    NodeLifecycle,
    Revoker,
    identity_of_certificate,
)
from provider.nodes.identity import serial_text
from schemas.events import ActuationRefused, Envelope, InstanceLaunched
from spotcap.config import Settings
from spotcap.wiring import stores
from tests.actuator_support import CODEC
from tests.faults.own_servers import kill
from tests.identity_support import REGION as NODES_REGION
from tests.identity_support import Setup, bundle_service, config_of, delivered, enrol
from tests.serve_support import Reply, Served, send
from tests.signin_support import TEMPLATE, Issuer, new_issuer
from tests.test_actuator import ME, Region
from tests.test_node_identity import lost

pytestmark = pytest.mark.slow

PROJECT = "spotcap"
PAUSE_S = 12.0
"""How long OpenBao stays paused or down at least (the issue's 10-40 s)."""
PATIENCE_S = 180.0


class Bao:
    """An OpenBao of the test's own (Raft storage in its folder), its root client, and the
    faults: `kill` (SIGKILL) and `start` again from the folder, `pause` / `resume`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.server = servers.start_openbao(folder)
        self.address = self.server.address
        self.client = hvac.Client(url=self.address, token=servers.openbao_token(folder))

    def kill(self) -> None:
        kill(self.server.pid)

    def start(self) -> None:
        self.server = servers.start_openbao(self.folder)
        assert self.server.address == self.address  # clients reconnect to what they knew

    def pause(self) -> None:
        """SIGSTOP, and wait until every thread of OpenBao has stopped: `kill` returns before
        a thread running on the other core has, and on a loaded machine such a thread once
        answered the request sent right after (the test saw a read succeed while "paused")."""
        os.kill(self.server.pid, signal.SIGSTOP)
        deadline = time.monotonic() + PATIENCE_S
        while not all_stopped(self.server.pid):
            assert time.monotonic() < deadline, f"OpenBao not stopped within {PATIENCE_S:.0f} s"
            time.sleep(0.01)

    def resume(self) -> None:
        os.kill(self.server.pid, signal.SIGCONT)


def all_stopped(pid: int) -> bool:
    """Whether every thread of process `pid` is stopped by a signal (state T in /proc)."""
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        states.append(stat[stat.rindex(")") + 2])
    return all(state == "T" for state in states)


@pytest.fixture
def bao(tmp_path: Path) -> Iterator[Bao]:
    found = Bao(tmp_path / "openbao")
    try:
        yield found
    finally:
        if alive(found.server.pid):
            found.resume()
        servers.stop(found.folder)


def publish(bao: Bao, mount: str, region: str, *, lease_s: int, life_s: float) -> str:
    """What the issuer publishes (`provider.authority.CredentialIssuer`): a credential that
    expires `life_s` from now, under an OpenBao lease of `lease_s`; its id."""
    credential_id = uuid.uuid4().hex
    bao.client.secrets.kv.v1.create_or_update_secret(
        path=credential_path(region, PROJECT), mount_point=mount,
        secret={"auth_url": "http://keystone.invalid/v3", "application_credential_id":
                credential_id, "application_credential_secret": uuid.uuid4().hex,
                "expires_at_s": str(int(time.time() + life_s)), "ttl": f"{lease_s}s"},
    )  # fmt: skip
    return credential_id


class Acting:
    """The actuator service (in this process) on a quiet simulated region, under a
    capacity authority read from `bao` through hvac with the service's own timeout."""

    def __init__(self, bao: Bao, root: Path) -> None:
        self.region = Region(root)
        self.mount = f"authority-{uuid.uuid4().hex[:8]}"
        setup_authority_store(bao.client, self.mount)
        client = hvac.Client(url=bao.address, token=bao.client.token, timeout=TIMEOUT_S)
        self.authority = ProjectAuthority(
            client, self.region.provider.region, PROJECT, mount=self.mount
        )
        options = ActuatorOptions(snapshot_every_s=0.0, poll_s=0.05, authority=self.authority)
        self.service = ActuatorService(self.region.log, CODEC, self.region.provider,
                                       self.region.state_dir, orchestrator_id=ME,
                                       options=options)  # fmt: skip

    def step_until(self, done: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + PATIENCE_S
        while not done():
            assert time.monotonic() < deadline, f"not {what} within {PATIENCE_S:.0f} s"
            self.service.step()

    def step_for(self, seconds: float) -> None:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            self.service.step()

    def launched_by_order(self) -> Counter[str]:
        return Counter(
            e.payload.tags[CALL_TAG] for e in self.region.events()
            if isinstance(e.payload, InstanceLaunched) and CALL_TAG in e.payload.tags
        )  # fmt: skip

    def refused(self) -> list[ActuationRefused]:
        return [e.payload for e in self.region.events() if isinstance(e.payload, ActuationRefused)]


def test_a_paused_openbao_does_not_stop_an_actuator_holding_a_live_credential(
    bao: Bao, tmp_path: Path
) -> None:
    acting = Acting(bao, tmp_path)
    region = acting.region.provider.region
    first = publish(bao, acting.mount, region, lease_s=2, life_s=3600)
    with acting.service as service:
        acting.step_until(lambda: service.caught_up and acting.authority.reads >= 1, "read")
        assert acting.authority.credential().application_credential_id == first
        bao.pause()
        paused_at = time.monotonic()
        try:
            time.sleep(1.5)  # past half the 2 s lease: the next call renews first
            acting.region.placement()  # four launch orders
            acting.step_until(lambda: service.counts.launched == 4, "carried out under the pause")
            assert acting.authority.failures >= 1  # it did try to renew, and could not
            acting.step_for(max(0.0, PAUSE_S - (time.monotonic() - paused_at)))
        finally:
            bao.resume()
        second = publish(bao, acting.mount, region, lease_s=3600, life_s=3600)
        acting.step_until(  # renewed once OpenBao answers (after its backoff)
            lambda: acting.authority.credential().application_credential_id == second,
            "renewed after the pause",
        )
        assert service.counts.launched == 4
    assert acting.refused() == []
    launched = acting.launched_by_order()
    assert len(launched) == 4 and set(launched.values()) == {1}


@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_orders_wait_for_openbao_when_no_live_credential_is_held_and_go_out_once(
    bao: Bao, tmp_path: Path, fault: str
) -> None:
    acting = Acting(bao, tmp_path)
    region = acting.region.provider.region
    publish(bao, acting.mount, region, lease_s=2, life_s=4)  # expires while OpenBao is out
    with acting.service as service:
        acting.step_until(lambda: service.caught_up and acting.authority.reads >= 1, "read")
        expires_at = acting.authority.credential().expires_at_s
        if fault == "kill":
            bao.kill()
        else:
            bao.pause()
        out_at = time.monotonic()
        try:
            while time.time() < expires_at + 0.5:  # bounded: the credential's own 4 s
                service.step()
            acting.region.placement()  # four launch orders, and no live credential
            acting.step_for(max(2.0, PAUSE_S - (time.monotonic() - out_at)))
            assert service.counts.launched == 0  # nothing acted without a live credential
            assert acting.refused() == []  # and nothing refused for an outage
            assert service.book.open_orders == 4 and service.actuator.waiting is not None
            assert "OpenBao" in service.actuator.waiting
        finally:
            if fault == "kill":
                bao.start()
            else:
                bao.resume()
        publish(bao, acting.mount, region, lease_s=3600, life_s=3600)  # the issuer's next
        acting.step_until(lambda: service.counts.launched == 4, "carried out after OpenBao")
        assert service.counts.launched == 4
    assert acting.refused() == []
    launched = acting.launched_by_order()
    assert len(launched) == 4 and set(launched.values()) == {1}


JWKS_COOLDOWN_S = UNSEEN_KEY_EVERY_S
"""Sign-in reads the keys again for a key id it has not seen only once 30 s have passed since
its last read (its guard against forged key ids flooding the issuer)."""


def fresh_key_token(issuer: Issuer, person: str) -> str:
    """A token of `person` for this server's audience, signed by a new key of the issuer (one
    that no key set fetched before it holds)."""
    name = f"{issuer.name}-k{uuid.uuid4().hex[:6]}"
    issuer.ids.create_named_key(name, allowed_client_ids=["*"], algorithm="RS256")
    role = name.removeprefix(f"{issuer.name}-")
    issuer.ids.create_or_update_role(
        f"{issuer.name}-{role}", key=name, template=TEMPLATE, client_id=issuer.audience, ttl="1h"
    )
    return issuer.token(person, role)


def health(served: Served, token: str) -> Reply:
    headers = {"Authorization": f"Bearer {token}"}
    return send(urllib.request.Request(f"{served.url}/api/v1/health", headers=headers))


def wait_out_the_cooldown(since: float) -> None:
    time.sleep(max(0.0, since + JWKS_COOLDOWN_S + 1 - time.monotonic()))  # bounded: 31 s


def answers_after_its_backoff(served: Served, token: str) -> None:
    """`token` is accepted once the keys are read again: a failed read is retried after a
    backoff of 1 s (doubled per further failure), and answered 503 until then, never 401."""
    deadline = time.monotonic() + 60
    while (reply := health(served, token)).status != 200:
        assert reply.status == 503 and "cannot be reached" in reply.text, reply.text
        assert time.monotonic() < deadline, "not accepted within 60 s of OpenBao's return"
        time.sleep(0.5)


def test_sign_in_keeps_known_keys_through_an_openbao_outage_and_says_503_for_new_ones(
    bao: Bao, tmp_path: Path
) -> None:
    issuer = new_issuer(bao.server)
    issuer.person("sre", ["spotcap-sre"])
    home = tmp_path / "home"
    home.mkdir()  # an empty home: the health route answers 200 on it
    served = Served(home, tmp_path, "--oidc-issuer", issuer.url, "--oidc-audience",
                    issuer.audience)  # fmt: skip
    try:
        known = issuer.token("sre")
        assert health(served, known).status == 200  # the discovery and keys, read and cached
        fetched_at = time.monotonic()
        unseen = fresh_key_token(issuer, "sre")
        wait_out_the_cooldown(fetched_at)
        bao.pause()
        try:
            assert health(served, known).status == 200  # its key is cached
            refused = health(served, unseen)  # its key must be fetched: OpenBao does not answer
            assert refused.status == 503, refused.text
            assert f"the sign-in issuer {issuer.url} cannot be reached" in refused.text
        finally:
            bao.resume()
        answers_after_its_backoff(served, unseen)  # asked again 1 s after the failed read
        fetched_at = time.monotonic()
        unseen = fresh_key_token(issuer, "sre")
        wait_out_the_cooldown(fetched_at)
        bao.kill()
        try:
            assert health(served, known).status == 200
            refused = health(served, unseen)
            assert refused.status == 503, refused.text
            assert f"the sign-in issuer {issuer.url} cannot be reached" in refused.text
        finally:
            bao.start()
        answers_after_its_backoff(served, unseen)  # the same keys after the restart
        assert health(served, known).status == 200
        assert health(served, issuer.token("sre")).status == 200
    finally:
        served.stop()
        stores(Settings.load(home=home, region="dev")).stop_embedded_postgres()


def test_sign_in_keys_outlive_a_failed_read_by_one_period_at_most(bao: Bao) -> None:
    """The keys' period passed while OpenBao is paused: the keys read stay in use for one more
    period, OpenBao asked once per backoff meanwhile, a key id not among them answered
    unreachable (never let through); then nothing is accepted until OpenBao answers."""
    issuer = new_issuer(bao.server)
    issuer.person("sre", ["spotcap-sre"])
    known = str(jwt.get_unverified_header(issuer.token("sre"))["kid"])
    now = [1000.0]
    keys = IssuerKeys(f"{issuer.url}/.well-known/keys", refresh_s=60.0, timeout_s=2.0,
                      clock=lambda: now[0])  # fmt: skip
    assert keys.key(known).key_id == known and keys.reads == 1
    bao.pause()
    try:
        now[0] += 61.0  # the period has passed: read again, and OpenBao does not answer
        assert keys.key(known).key_id == known  # the keys read stay in use
        assert keys.failures == 1 and keys.reads == 1
        now[0] += 0.5  # inside the 1 s backoff: OpenBao is not asked
        assert keys.key(known).key_id == known and keys.failures == 1
        with pytest.raises(KeysUnreachableError):  # unknown: cannot be told, so not accepted
            keys.key("a-key-id-not-read")
        assert keys.failures == 1
        now[0] += 1.0  # past the backoff: asked once more, which doubles it
        assert keys.key(known).key_id == known and keys.failures == 2
        now[0] += 1.0  # inside the 2 s backoff
        assert keys.key(known).key_id == known and keys.failures == 2
        now[0] = 1000.0 + 120.0  # two periods since the keys were read: none is used
        with pytest.raises(KeysUnreachableError, match="its keys cannot be read"):
            keys.key(known)
    finally:
        bao.resume()
    now[0] += RETRY_MAX_S  # past any backoff: read again, and used
    assert keys.key(known).key_id == known and keys.reads == 2


@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_an_agent_keeps_its_certificate_through_an_openbao_outage_and_renews_after(
    bao: Bao, tmp_path: Path, fault: str
) -> None:
    token = servers.openbao_token(bao.folder)
    service = bundle_service(bao.server, tmp_path, client=openbao_client(bao.address, token))
    setup = next(service)
    try:
        identity, config = enrol(setup, "i-outage", "wl-a")
        now = [time.time()]
        client = NodeIdentityClient(config, NODES_REGION, "i-outage", clock=lambda: now[0])
        assert identity_round(client, config.path) == "bundle fetched"
        now[0] += 0.6 * 3600  # past half the certificate's hour: renewal is due
        held = config.certificate.read_bytes()
        _, expires_at = client.expires_at_s()
        if fault == "kill":
            bao.kill()
        else:
            bao.pause()
        out_at = time.monotonic()
        try:
            said = identity_round(client, config.path)
            # The service could not check or sign: 503, not a refusal (403), and not a TLS
            # failure: the certificate in use still opens the connection.
            assert said.startswith("failed: the bundle service answered 503"), said
            assert "OpenBao is unreachable" in said
            assert config.certificate.read_bytes() == held and expires_at > time.time()
            time.sleep(max(0.0, PAUSE_S - (time.monotonic() - out_at)))
        finally:
            if fault == "kill":
                bao.start()
            else:
                bao.resume()
        said = identity_round(client, config.path)
        assert said == "certificate renewed, bundle unchanged", said
        assert config.certificate.read_bytes() != held
        renewed = x509.load_pem_x509_certificate(config.certificate.read_bytes())
        assert identity_of_certificate(renewed) == identity
    finally:
        service.close()


def test_a_node_whose_signature_failed_after_its_token_was_spent_enrols_on_its_next_try(
    bao: Bao, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenBao pauses between the unwrap of a node's token (spent from then on) and the
    signature of its key: the node is answered 503, keeps its token and key, and its next try
    (the same key, the spent token) is signed once OpenBao is back; not stranded."""
    token = servers.openbao_token(bao.folder)
    service = bundle_service(bao.server, tmp_path, client=openbao_client(bao.address, token))
    setup = next(service)
    try:
        identity, config = delivered(setup, "i-strand", "wl-a")
        post = setup.authority._post

        def pause_before_signing(path: str, body: dict[str, Any], what: str) -> dict[str, Any]:
            if path.startswith("sign/"):
                bao.pause()
            return post(path, body, what)

        monkeypatch.setattr(setup.authority, "_post", pause_before_signing)
        client = NodeIdentityClient(config, NODES_REGION, "i-strand")
        try:
            with pytest.raises(FetchError, match=r"503.*OpenBao is unreachable"):
                client.enrol_if_needed()
        finally:
            bao.resume()
        monkeypatch.undo()
        assert config.token.exists() and config.key.exists()
        assert not config.certificate.exists()
        key = config.key.read_bytes()
        assert client.enrol_if_needed() is True  # the spent token, the same key: signed
        assert config.key.read_bytes() == key and not config.token.exists()
        certificate = x509.load_pem_x509_certificate(config.certificate.read_bytes())
        assert identity_of_certificate(certificate) == identity
        record = setup.authority.record(identity)
        assert record is not None and len(record.serials) == 1 and record.nonce == ""
    finally:
        service.close()


def test_the_revoker_and_enroller_back_off_from_a_paused_openbao_and_lose_nothing(
    bao: Bao, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The actuator's follower of nodes (enroller and revoker sharing the authority's backoff,
    as `nodes_from_env` builds it) under a paused OpenBao: one try per backoff in all (3 s),
    none in between however many steps, the backoff doubling to 30 s; once OpenBao answers,
    every pending enrolment and revocation is made, once."""
    token = servers.openbao_token(bao.folder)
    service = bundle_service(bao.server, tmp_path, client=openbao_client(bao.address, token))
    setup = next(service)
    try:
        gone = [f"i-gone-{n}" for n in range(3)]
        for instance in gone:
            enrol(setup, instance, "wl-a")
        now = [1000.0]
        backoff = Backoff(clock=lambda: now[0])
        state = tmp_path / "state"
        revoker = Revoker(setup.authority, state / "revocations", backoff)
        enroller = Enroller(setup.authority, tmp_path / "boot", state / "enrolments", backoff)
        nodes = NodeLifecycle(enroller, revoker)
        new = [f"i-new-{n}" for n in range(3)]
        for instance in gone:
            nodes.observe(lost(instance))
        for instance in new:
            nodes.observe(launched(instance))
        bao.pause()
        try:
            caplog.clear()
            assert nodes.drain() == 6  # all still pending
            tried = [r.getMessage() for r in caplog.records if "yet (tried again" in r.message]
            assert len(tried) == 1, tried  # one node in all: the others would wait as long
            assert "nor the 2 other(s) pending" in tried[0] and "unreachable" in tried[0]
            assert "tried again in 1 s" in tried[0]
            for _ in range(50):  # steps inside the backoff: OpenBao is not asked
                assert nodes.drain() == 6
            assert backoff.failures == 1
            waits_s = [backoff.wait_s]
            for _ in range(6):  # one try after each backoff, which doubles up to 30 s
                now[0] += waits_s[-1]
                assert nodes.drain() == 6
                waits_s.append(backoff.wait_s)
            assert waits_s == [RETRY_FIRST_S * 2**i for i in range(5)] + [RETRY_MAX_S] * 2
            assert backoff.failures == 7
        finally:
            bao.resume()
        assert nodes.drain() == 6  # OpenBao answers, but its backoff is not over
        caplog.clear()
        # Everything pending at the first step after the backoff; a loaded OpenBao just resumed
        # may miss a request's 3 s again (then its node is cleaned first, one backoff later).
        assert any(drained(nodes, now) == 0 for _ in range(8))
        assert any("OpenBao answers again" in r.getMessage() for r in caplog.records)
        assert nodes.drain() == 0 and backoff.failures_in_a_row == 0
        assert len(set(revoker.revoked)) == 3 and len(enroller.enrolled) == 3  # once each
        each_node_once(setup, tmp_path / "boot", new, gone)
        nodes.close()
        again = Enroller(setup.authority, tmp_path / "boot", state / "enrolments", backoff)
        assert again.drain() == 0  # nothing enrolled twice after a restart
        again.close()
    finally:
        service.close()


def drained(nodes: NodeLifecycle, now: list[float]) -> int:
    """One step of the follower after the longest backoff; what is still pending."""
    now[0] += RETRY_MAX_S
    return nodes.drain()


def each_node_once(setup: Setup, boot: Path, new: list[str], gone: list[str]) -> None:
    """Each new node delivered its token once, and enrolled with it, with one live
    certificate (the one it holds); each node gone retired, with none."""
    authority = setup.authority
    assert sorted(p.name for p in boot.iterdir()) == new
    for instance in gone:
        record = authority.record(NodeIdentity(NODES_REGION, instance))
        assert record is not None and record.retired
    for instance in new:  # each boots with its token: makes its key and enrols
        client = NodeIdentityClient(config_of(setup, boot / instance), NODES_REGION, instance)
        assert client.enrol_if_needed()
    live = authority.live_serials(*(NodeIdentity(NODES_REGION, i) for i in new + gone))
    for instance in new:
        delivered = x509.load_pem_x509_certificate((boot / instance / "node.pem").read_bytes())
        assert live[NodeIdentity(NODES_REGION, instance)] == [serial_text(delivered)]
    for instance in gone:
        assert live[NodeIdentity(NODES_REGION, instance)] == []


def launched(instance: str) -> Envelope:
    payload = InstanceLaunched(instance, "pool-1", "wl-a", 8, "reclaimable", {})
    return Envelope(str(uuid.uuid4()), "instance_launched", 1, 1, NODES_REGION, instance, None,
                    None, "test", payload)  # fmt: skip
