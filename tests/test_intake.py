"""The scheduler intake (`spotcap run intake`, `streams/intake`): pending pods on the session's
real kube-apiserver and pending jobs on its real Slurm become `capacity_claim_opened`, their end
`capacity_released`, each once, across a SIGKILL of the intake, changes made while it was
down, and restarts. The intake runs as a person runs it (the command, in a child process,
writing the embedded log); the log is read back by the test.

The first tests hold `streams.intake.claims.decide` and the readers of pods and jobs to their
rules without a server.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from infra import servers
from schemas.codec import Codec
from schemas.events import CapacityClaimOpened, CapacityReleased, Envelope
from streams.browse import Wanted, browse
from streams.embedded import EmbeddedLog
from streams.intake.claims import Batch, Book, Sighting, Stamp, decide
from streams.intake.kubernetes import cpu_millis
from streams.intake.service import IntakeReport
from streams.intake.slurm import stage_of, workload_of
from streams.log import UnknownTopicError
from streams.reader import Decoded
from tests import kube_support as kube
from tests.cli_support import SPOTCAP

REGION = "intake-test"
T0_US = 1_790_000_000_000_000
STAMP = Stamp(REGION, "intake", T0_US)


def _seen(claim: str, stage: Any, vcpu: int = 1) -> Sighting:
    return Sighting(f"slurm/c/{claim}", "etl", "slurm", "c", stage, vcpu, f"job {claim}", T0_US)


def claim_of(envelope: Envelope) -> str:
    """The claim an event is about ('' for any other event)."""
    return str(getattr(envelope.payload, "claim_id", ""))


def _after(book: Book, batch: Batch) -> list[Envelope]:
    events = decide(book, batch, STAMP)
    for envelope in events:
        book.apply(envelope)
    return events


def test_a_claim_opens_once_while_pending_and_is_released_once_when_its_work_ends() -> None:
    book = Book()
    pending = Batch("slurm/c/", [_seen("1", "pending", 4), _seen("2", "held")], True, T0_US)
    (opened,) = _after(book, pending)
    assert isinstance(opened.payload, CapacityClaimOpened)
    assert opened.payload.claim_id == "slurm/c/1" and opened.payload.requested_vcpu == 4
    assert _after(book, pending) == []  # seen again: nothing new
    assert _after(book, Batch("slurm/c/", [_seen("1", "running")], False, T0_US)) == []
    (released,) = _after(book, Batch("slurm/c/", [_seen("1", "ended")], False, T0_US))
    assert isinstance(released.payload, CapacityReleased)
    assert released.causation_id == opened.event_id and released.payload.released_vcpu == 4
    assert _after(book, Batch("slurm/c/", [_seen("1", "pending")], False, T0_US)) == []


def test_a_complete_batch_releases_what_it_no_longer_shows_and_only_under_its_prefix() -> None:
    book = Book()
    _after(book, Batch("slurm/c/", [_seen("1", "pending"), _seen("2", "pending")], True, T0_US))
    other = Sighting("kubernetes/k/ns/p/u", "web", "kubernetes", "k", "pending", 1, "pod", T0_US)
    _after(book, Batch("kubernetes/k/", [other], True, T0_US))
    gone = _after(book, Batch("slurm/c/", [_seen("2", "running")], True, T0_US + 5))
    assert [(claim_of(e), e.occurred_at) for e in gone] == [("slurm/c/1", T0_US + 5)]
    assert set(book.open) == {"slurm/c/2", "kubernetes/k/ns/p/u"}
    # Ids derive from the claim: a second intake deciding the same thing writes the same ids.
    again = Book()
    first = decide(again, Batch("slurm/c/", [_seen("1", "pending")], True, T0_US), STAMP)
    later = decide(again, Batch("slurm/c/", [_seen("1", "pending")], True, T0_US + 9), STAMP)
    assert [e.event_id for e in first] == [e.event_id for e in later]


def test_the_intake_says_what_it_wrote() -> None:
    said = IntakeReport(opened=3, released=1, open_now=2).describe()
    assert said == "claims: 3 opened, 1 released, 2 open"


def test_the_readers_take_cpus_and_workloads_as_the_schedulers_and_admission_do() -> None:
    assert [cpu_millis(q) for q in ("250m", "2", "1.5", "0.1", None, "x")] == [
        250, 2000, 1500, 100, 0, 0
    ]  # fmt: skip
    assert workload_of("run 7;spotcap:workload=genomics-align,retry", None) == "genomics-align"
    assert workload_of("xspotcap:workload=a", None) is None
    assert workload_of("spotcap:workload=a spotcap:workload=b", "c") is None
    assert workload_of("", "*thumbnail-backfill") == "thumbnail-backfill"
    assert stage_of({"job_state": "PENDING", "state_reason": "Resources"}) == "pending"
    assert stage_of({"job_state": "PENDING", "state_reason": "JobHeldUser"}) == "held"
    assert stage_of({"job_state": "COMPLETING"}) == "running"
    assert stage_of({"job_state": "CANCELLED"}) == "ended"


# -- the intake as a process ------------------------------------------------------------------

_STARTED: list[Intake] = []


@pytest.fixture(autouse=True)
def _no_intake_outlives_its_test() -> Iterator[None]:
    """A failed assertion leaves no intake running on the session's servers."""
    yield
    while _STARTED:
        proc = _STARTED.pop().proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


@dataclass
class Intake:
    """`spotcap run intake` in a child process, writing the embedded log under `home`."""

    home: Path
    args: tuple[str, ...]
    proc: subprocess.Popen[bytes] | None = None
    runs: int = 0

    def start(self) -> Intake:
        self.runs += 1
        self.err = self.home.parent / f"intake-{self.runs}.err"
        self.out = self.home.parent / f"intake-{self.runs}.out"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTCAP_")}
        argv = [SPOTCAP, "--home", str(self.home), "--region", REGION, "run", "intake", *self.args]
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        _STARTED.append(self)
        return self

    def said(self) -> str:
        return self.err.read_text()

    def wait_listed(self, prefix: str) -> None:
        kube.wait_until(lambda: f"intake: {prefix} lists" in self.said() or self._died(),
                        120, f"the intake to list {prefix}")  # fmt: skip
        assert not self._died(), self.said()

    def _died(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def kill(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, self.said()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> str:
        """SIGTERM; returns what it printed (its summary line)."""
        assert self.proc is not None and self.proc.poll() is None, self.said()
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=60) == 0, self.said()
        return self.out.read_text()


def claims_in_log(home: Path) -> list[Envelope]:
    """The claim events of the region's demand topic, in the order of each partition."""
    log = EmbeddedLog(home / "log")
    try:
        topic = f"{REGION}.demand"
        return [
            item.envelope
            for item in browse(log, Codec(), topic, REGION, Wanted())
            if isinstance(item, Decoded)
        ]
    except UnknownTopicError:  # the intake has not made it yet
        return []
    finally:
        log.close()


def wait_for_log(home: Path, what: str, predicate: Callable[[list[Envelope]], bool]) -> None:
    kube.wait_until(lambda: predicate(claims_in_log(home)), 120, what, every_s=0.5)


def _by_claim(events: list[Envelope]) -> dict[str, Counter[str]]:
    found: dict[str, Counter[str]] = {}
    for e in events:
        found.setdefault(claim_of(e), Counter())[e.event_type] += 1
    return found


def _check_once_each(events: list[Envelope]) -> dict[str, Counter[str]]:
    assert len({e.event_id for e in events}) == len(events)
    opened_ids = {e.payload.claim_id: e.event_id for e in events
                  if isinstance(e.payload, CapacityClaimOpened)}  # fmt: skip
    for e in events:
        if isinstance(e.payload, CapacityReleased):
            assert e.causation_id == opened_ids[e.payload.claim_id]
    by_claim = _by_claim(events)
    assert all(max(c.values()) == 1 for c in by_claim.values()), by_claim
    return by_claim


# -- Kubernetes -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def intake_token(kubernetes: servers.Server) -> Iterator[str]:
    """A token of the spotcap-intake account, with infra/kubernetes/intake-rbac.yaml applied."""
    api = kube.admin(kubernetes)
    kube.apply(api, kube.MANIFESTS / "intake-rbac.yaml")
    yield kube.service_account_token(api, "spotcap-system", "spotcap-intake")
    api.close()  # type: ignore[no-untyped-call]


def test_pending_pods_become_claims_once_across_a_kill_and_restarts(
    tmp_path: Path, kubernetes: servers.Server, intake_token: str
) -> None:
    api = kube.admin(kubernetes)
    v1 = kube.core(api)
    ns = kube.namespace(api, kube.unique("etl"))
    contract = {kube.WORKLOAD_LABEL: "etl-nightly"}

    def pending(name: str, **fields: Any) -> None:
        v1.create_namespaced_pod(ns, kube.pod_body(name, **fields))

    pending("loader-0", labels=contract, cpu="1500m")
    pending("loader-1", labels=contract, cpu="250m", init_cpu="3")
    pending("waiting", labels=contract)  # pending throughout
    pending("no-contract")
    kubeconfig = kube.write_kubeconfig(tmp_path / "intake.kubeconfig", kubernetes, intake_token)
    cluster = kube.unique("k8s")
    prefix = f"kubernetes/{cluster}/{ns}/"
    intake = Intake(tmp_path / "home", ("--kubeconfig", str(kubeconfig), "--cluster", cluster))
    intake.start()
    wait_for_log(intake.home, "three claims opened",
                 lambda e: _opened(e, prefix, {"loader-0", "loader-1", "waiting"}))  # fmt: skip
    intake.kill()
    # While it is away: one pod is deleted, one runs and succeeds, one more is created.
    v1.delete_namespaced_pod("loader-0", ns, grace_period_seconds=0)
    kube.set_phase(api, ns, "loader-1", "Running")
    kube.set_phase(api, ns, "loader-1", "Succeeded")
    pending("loader-2", labels=contract, cpu="2")
    intake.start()
    wait_for_log(intake.home, "the changes made while it was away", lambda events: (
        _released(events, prefix, {"loader-0", "loader-1"})
        and _opened(events, prefix, {"loader-2"})
    ))  # fmt: skip
    v1.delete_namespaced_pod("loader-2", ns)  # graceful: Terminating, seen by the watch
    wait_for_log(intake.home, "loader-2 released", lambda e: _released(e, prefix, {"loader-2"}))
    assert intake.stop().strip() == "claims: 1 opened, 3 released, 1 open"
    # A restart with nothing changed writes nothing.
    intake.start().wait_listed(f"kubernetes/{cluster}/")
    assert intake.stop().strip() == "claims: 0 opened, 0 released, 1 open"

    events = [e for e in claims_in_log(intake.home) if claim_of(e).startswith(prefix)]
    by_claim = _check_once_each(events)
    assert {c.split("/")[3]: dict(n) for c, n in by_claim.items()} == {
        "loader-0": {"capacity_claim_opened": 1, "capacity_released": 1},
        "loader-1": {"capacity_claim_opened": 1, "capacity_released": 1},
        "loader-2": {"capacity_claim_opened": 1, "capacity_released": 1},
        "waiting": {"capacity_claim_opened": 1},
    }
    vcpu = {e.payload.claim_id.split("/")[3]: e.payload.requested_vcpu for e in events
            if isinstance(e.payload, CapacityClaimOpened)}  # fmt: skip
    assert vcpu == {"loader-0": 2, "loader-1": 3, "loader-2": 2, "waiting": 1}
    assert all(e.key == "etl-nightly" and e.producer == "intake" for e in events)
    for run in range(1, intake.runs + 1):  # the token never reaches its output
        assert intake_token not in (tmp_path / f"intake-{run}.err").read_text()
    api.close()  # type: ignore[no-untyped-call]


def _claims_of(events: list[Envelope], event_type: str, prefix: str) -> set[str]:
    return {
        claim_of(e).removeprefix(prefix).split("/")[0]
        for e in events
        if e.event_type == event_type and claim_of(e).startswith(prefix)
    }


def _opened(events: list[Envelope], prefix: str, names: set[str]) -> bool:
    return names <= _claims_of(events, "capacity_claim_opened", prefix)


def _released(events: list[Envelope], prefix: str, names: set[str]) -> bool:
    return names <= _claims_of(events, "capacity_released", prefix)


def test_the_intakes_token_may_watch_pods_and_nothing_else_and_a_refusal_stops_it(
    tmp_path: Path, kubernetes: servers.Server, intake_token: str
) -> None:
    intake_api = kube.client_with_token(kubernetes, intake_token)
    v1 = kube.core(intake_api)
    try:
        v1.list_pod_for_all_namespaces(label_selector=kube.WORKLOAD_LABEL, watch=False)
        refused: list[Callable[[], object]] = [
            lambda: v1.create_namespaced_pod("default", kube.pod_body("x")),
            lambda: v1.list_namespaced_secret("spotcap-system"),
            lambda: v1.delete_collection_namespaced_pod("default"),
        ]
        for call in refused:
            with pytest.raises(ApiException) as error:
                call()
            assert error.value.status == 403
    finally:
        intake_api.close()  # type: ignore[no-untyped-call]
    # An account without the intake's role: the command stops with one sentence.
    api = kube.admin(kubernetes)
    ns = kube.namespace(api, kube.unique("nobody"))
    token = kube.service_account_token(api, ns, "default")
    api.close()  # type: ignore[no-untyped-call]
    kubeconfig = kube.write_kubeconfig(tmp_path / "nobody.kubeconfig", kubernetes, token)
    intake = Intake(tmp_path / "home", ("--kubeconfig", str(kubeconfig), "--cluster", "c"))
    proc = intake.start().proc
    assert proc is not None and proc.wait(timeout=120) == 1
    said = intake.said()
    assert "refused to list and watch pods (HTTP 403)" in said and "intake-rbac.yaml" in said
    assert "Traceback" not in said and token not in said


# -- Slurm ------------------------------------------------------------------------------------


def _slurm(slurm: servers.Server, *argv: str) -> str:
    env = {**os.environ, "SLURM_CONF": str(servers.slurm_conf(slurm))}
    return subprocess.run(
        list(argv), env=env, capture_output=True, text=True, timeout=30, check=True
    ).stdout


@pytest.fixture
def node(slurm: servers.Server) -> Iterator[servers.Server]:
    """The session's Slurm, its node idle again after the test."""
    yield slurm
    _slurm(slurm, "scancel", "--user=root")
    kube.wait_until(
        lambda: _slurm(slurm, "sinfo", "-h", "-n", "localhost", "-o", "%t").strip() == "idle",
        60, "the node to be idle again",
    )  # fmt: skip


def test_pending_slurm_jobs_become_claims_once_across_a_kill_and_restarts(
    tmp_path: Path, node: servers.Server
) -> None:
    def submit(*options: str, command: str = "sleep 600") -> str:
        out = _slurm(node, "sbatch", "--parsable", "-o", "/dev/null", "-p", "batch", *options,
                     "--wrap", command)  # fmt: skip
        return out.strip().split(";")[0]

    def state(job: str) -> str:
        return _slurm(node, "squeue", "-h", "-j", job, "-o", "%T").strip()

    blocker = submit("-c", "2")  # both CPUs of the node: what comes after waits for capacity
    kube.wait_until(lambda: state(blocker) == "RUNNING", 60, "the blocker to run")
    align = submit("--comment=spotcap:workload=genomics-align", "-c", "2")
    tune = submit("--comment=nightly; spotcap:workload=llm-finetune", command="sleep 1")
    held = submit("--hold", "--wckey=thumbnail-backfill")
    submit("-c", "1")  # names no workload
    cluster = kube.unique("hpc")
    prefix = f"slurm/{cluster}/"
    intake = Intake(tmp_path / "home", ("--slurmrestd", node.address, "--cluster", cluster,
                                         "--poll-interval-s", "0.5"))  # fmt: skip
    intake.start()
    wait_for_log(intake.home, "two claims opened", lambda e: _opened(e, prefix, {align, tune}))
    intake.kill()
    _slurm(node, "scancel", align)  # cancelled while the intake is away
    _slurm(node, "scontrol", "release", held)  # no longer held: pending for capacity
    intake.start()
    wait_for_log(intake.home, "the changes made while it was away", lambda e: (
        _released(e, prefix, {align}) and _opened(e, prefix, {held})
    ))  # fmt: skip
    _slurm(node, "scancel", blocker)  # capacity: the two others run; `tune` finishes
    wait_for_log(intake.home, "tune released", lambda e: _released(e, prefix, {tune}))
    _slurm(node, "scancel", held)
    wait_for_log(intake.home, "held released", lambda e: _released(e, prefix, {held}))
    assert intake.stop().strip() == "claims: 1 opened, 3 released, 0 open"
    intake.start().wait_listed(prefix)
    assert intake.stop().strip() == "claims: 0 opened, 0 released, 0 open"

    events = [e for e in claims_in_log(intake.home) if claim_of(e).startswith(prefix)]
    by_claim = _check_once_each(events)
    # claim ids: slurm/<cluster>/<job id>/<submit time>
    assert {c.removeprefix(prefix).split("/")[0]: dict(n) for c, n in by_claim.items()} == {
        job: {"capacity_claim_opened": 1, "capacity_released": 1} for job in (align, tune, held)
    }
    opened = {e.payload.claim_id.removeprefix(prefix).split("/")[0]:
              (e.key, e.payload.requested_vcpu)
              for e in events if isinstance(e.payload, CapacityClaimOpened)}  # fmt: skip
    assert opened == {
        align: ("genomics-align", 2),
        tune: ("llm-finetune", 1),
        held: ("thumbnail-backfill", 1),
    }
