"""The scheduler intakes under faults of their servers and of themselves (issue 27): the
Kubernetes intake while kube-apiserver is killed (SIGKILL, then started again on its ports by
`infra.servers`) and paused (SIGSTOP), and etcd killed and paused; the Slurm intake while
slurmctld and slurmrestd are; then each intake killed and paused itself. Work is created and
ended throughout by the test (pods, jobs), on servers of the test's own.

Nobody restarts the intake but for its own SIGKILL (as its supervisor would): it rides out every
server fault by itself (a watch resumed from its resourceVersion or listed again after a
410 Gone; a poll that fails tried again). Afterwards, compared with what the test did: every
piece of work has its claim opened once and released once on the log, each event once (nothing
lost, nothing doubled), and the intake's process ran throughout.

A 410 Gone for real: the Kubernetes intake paused while pods change and etcd compacts its
history, on a kube-apiserver that serves watches from etcd (no watch cache: a cache would
still hold the version, and answer the watch from it).

Bounded: pauses of 10-20 s, servers down 1-4 s, a few minutes per test; waits are generous and
nothing asserts a wall time.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from infra import servers
from infra.servers.process import read_state
from schemas.events import CapacityClaimOpened, CapacityReleased, Envelope
from streams.intake.kubernetes import WATCH_WINDOW_S
from tests import kube_support as kube
from tests.faults.own_servers import own
from tests.test_intake import Intake, claim_of, claims_in_log

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SEED = 27
PAUSE_S = (10.0, 20.0)
DOWN_S = (1.0, 4.0)
STEP_S = 0.4
"""Between two steps of the test's work: one piece created, one whose claim is on the log
ended."""
RETRY_FOR_S = 300.0


def _retry(what: str, call: Callable[[], bool]) -> None:
    """Call until it says done; a server that is down or paused is waited out (bounded)."""
    deadline = time.monotonic() + RETRY_FOR_S
    while not call():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not done within {RETRY_FOR_S:.0f} s")
        time.sleep(0.5)


class Churn(threading.Thread):
    """The test's work: at each step a new piece of work is created (pending) and the oldest
    one whose claim the intake opened is ended, until `stop`; every call is retried until the
    server answers, so the test knows exactly what it did."""

    def __init__(
        self, create: Callable[[str], None], end: Callable[[str], None],
        opened: Callable[[], set[str]],
    ) -> None:  # fmt: skip
        super().__init__(name="churn", daemon=True)
        self._create, self._end, self._opened = create, end, opened
        self.created: list[str] = []
        self.ended: list[str] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                name = f"w{len(self.created):03d}"
                self._create(name)
                self.created.append(name)
                opened = self._opened()
                ready = [n for n in self.created if n in opened and n not in self.ended]
                if ready:
                    self._end(ready[0])
                    self.ended.append(ready[0])
                self.stop.wait(STEP_S)
        except BaseException as error:  # the test says so
            self.error = error

    def end_one(self, name: str) -> None:
        self._end(name)
        self.ended.append(name)

    def finish(self) -> None:
        self.stop.set()
        self.join(RETRY_FOR_S + 60)
        assert not self.is_alive() and self.error is None, self.error


def _pid(folder: Path, part: str | None) -> int:
    state = read_state(folder)
    assert state is not None
    if part is None:
        return int(state["pid"])
    (pid,) = (int(c["pid"]) for c in state["companions"] if c["name"] == part)
    return pid


class Faults:
    """Faults one after another at seeded random moments; what was done, for the report."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.done: list[str] = []

    def gap(self) -> None:
        time.sleep(self.rng.uniform(2.0, 5.0))

    def kill_server(self, what: str, folder: Path, part: str | None,
                    start: Callable[[Path], servers.Server]) -> None:  # fmt: skip
        self.gap()
        os.kill(_pid(folder, part), signal.SIGKILL)
        down = self.rng.uniform(*DOWN_S)
        time.sleep(down)
        start(folder)  # as its service manager would: the part killed, on its ports
        self.done.append(f"SIGKILL {what}, started again {down:.1f} s later")

    def pause(self, what: str, pid: int) -> None:
        self.gap()
        paused = self.rng.uniform(*PAUSE_S)
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(paused)
        finally:
            os.kill(pid, signal.SIGCONT)
        self.done.append(f"SIGSTOP {what}, {paused:.1f} s")

    def kill_intake(self, intake: Intake) -> None:
        self.gap()
        intake.kill()
        intake.start()
        self.done.append("SIGKILL the intake, started again at once")


def _fault_the_intake(faults: Faults, intake: Intake, churn: Churn) -> None:
    """After the servers' faults (which it rode out: still the first run), the intake's own:
    killed and started again, then paused; then the test's work stops."""
    assert intake.proc is not None and intake.proc.poll() is None, intake.said()
    assert intake.runs == 1
    faults.kill_intake(intake)
    assert intake.proc is not None
    faults.pause("the intake", intake.proc.pid)
    faults.gap()
    churn.finish()
    assert intake.proc.poll() is None, intake.said()


def _end_the_rest(
    churn: Churn,
    claimed: Callable[[str], set[str]],
    lost: Callable[[], set[str]] = set,
) -> None:
    """Once every piece of work's claim is open, the work not ended yet is ended; then every
    claim must be released. Work its scheduler lost (`lost`) may have no claim."""
    gone = lost()
    kube.wait_until(lambda: set(churn.created) - gone <= claimed(OPENED), 180,
                    "every claim opened", every_s=1.0)  # fmt: skip
    for name in churn.created:
        if name not in churn.ended:
            churn.end_one(name)
    kube.wait_until(lambda: claimed(OPENED) <= claimed(RELEASED), 180, "every claim released",
                    every_s=1.0)  # fmt: skip


OPENED, RELEASED = "capacity_claim_opened", "capacity_released"


def _check(
    events: list[Envelope], name_of: Callable[[Envelope], str], created: list[str],
    lost: set[str],
) -> None:  # fmt: skip
    """Each piece of work the test created has one claim opened and one released, each event
    once; work its scheduler lost (`lost`) has those two or none."""
    ids = Counter(e.event_id for e in events)
    assert [i for i, n in ids.items() if n > 1] == []
    by_work: dict[str, Counter[str]] = {}
    for e in events:
        by_work.setdefault(name_of(e), Counter())[e.event_type] += 1
    expected = {OPENED: 1, RELEASED: 1}
    wrong = {w: dict(c) for w, c in by_work.items() if dict(c) != expected}
    assert wrong == {}
    assert set(by_work) <= set(created)
    assert sorted(set(created) - set(by_work)) == sorted(lost - set(by_work))
    opened = {claim_of(e): e.event_id for e in events if isinstance(e.payload, CapacityClaimOpened)}
    for e in events:
        if isinstance(e.payload, CapacityReleased):
            assert e.causation_id == opened[e.payload.claim_id]


# -- Kubernetes -------------------------------------------------------------------------------


class Pods:
    """The test's pods: each call retried until the server answers (409 on a create, 404 on
    a delete: an earlier try that timed out went through)."""

    def __init__(self, v1: Any, ns: str) -> None:
        self.v1, self.ns = v1, ns
        self.deletes = 0

    def create(self, name: str) -> None:
        body = kube.pod_body(name, labels={kube.WORKLOAD_LABEL: "etl"}, cpu="500m")

        def once() -> bool:
            try:
                self.v1.create_namespaced_pod(self.ns, body, _request_timeout=10)
            except ApiException as error:
                return bool(error.status == 409)
            except Exception:  # down or paused: try again
                return False
            return True

        _retry(f"create pod {name}", once)

    def end(self, name: str) -> None:
        self.deletes += 1
        grace = None if self.deletes % 2 else 0  # half at once, half as a graceful delete

        def once() -> bool:
            try:
                self.v1.delete_namespaced_pod(name, self.ns, grace_period_seconds=grace,
                                              _request_timeout=10)  # fmt: skip
            except ApiException as error:
                return bool(error.status == 404)
            except Exception:
                return False
            return True

        _retry(f"delete pod {name}", once)


@pytest.fixture
def own_kubernetes(tmp_path: Path) -> Iterator[servers.Server]:
    """A kube-apiserver and etcd of the test's own: they are killed."""
    yield from own(servers.start_kubernetes, tmp_path / "kubernetes")


def test_the_kubernetes_intake_rides_out_kube_apiserver_and_etcd_faults_and_its_own(
    tmp_path: Path, own_kubernetes: servers.Server
) -> None:
    folder = own_kubernetes.data_dir
    api = kube.admin(own_kubernetes)
    kube.apply(api, kube.MANIFESTS / "intake-rbac.yaml")
    token = kube.service_account_token(api, "spotcap-system", "spotcap-intake")
    ns = kube.namespace(api, "churn")
    v1 = kube.core(api)
    kubeconfig = kube.write_kubeconfig(tmp_path / "intake.kubeconfig", own_kubernetes, token)
    prefix = "kubernetes/faulted/"  # claim ids: kubernetes/<cluster>/<namespace>/<pod>/<uid>
    intake = Intake(tmp_path / "home", ("--kubeconfig", str(kubeconfig), "--cluster",
                                         "faulted"))  # fmt: skip

    def pod(event: Envelope) -> str:
        return claim_of(event).removeprefix(prefix).split("/")[1]

    def mine() -> list[Envelope]:
        return [e for e in claims_in_log(intake.home) if claim_of(e).startswith(prefix)]

    def claimed(event_type: str) -> set[str]:
        return {pod(e) for e in mine() if e.event_type == event_type}

    intake.start().wait_listed(prefix)
    pods = Pods(v1, ns)
    churn = Churn(pods.create, pods.end, lambda: claimed(OPENED))
    churn.start()
    faults = Faults(SEED)
    faults.kill_server("kube-apiserver", folder, None, servers.start_kubernetes)
    faults.pause("kube-apiserver", _pid(folder, None))
    faults.kill_server("etcd", folder, "etcd", servers.start_kubernetes)
    faults.pause("etcd", _pid(folder, "etcd"))
    _fault_the_intake(faults, intake, churn)
    _end_the_rest(churn, claimed)
    intake.stop()
    _check(mine(), pod, churn.created, set())
    assert len(churn.created) >= 20, churn.created  # the work went on through the faults
    said = "".join(
        (tmp_path / f"intake-{run}.err").read_text() for run in range(1, intake.runs + 1)
    )
    assert token not in said and "Traceback" not in said
    print(f"\n{len(churn.created)} pods; " + "; ".join(faults.done))
    api.close()  # type: ignore[no-untyped-call]


@pytest.fixture
def uncached_kubernetes(tmp_path: Path) -> Iterator[servers.Server]:
    """A kube-apiserver of the test's own that serves every watch from etcd (no watch cache):
    a watch from a compacted revision is answered 410 Gone by the server itself."""
    yield from own(partial(servers.start_kubernetes, watch_cache=False), tmp_path / "kubernetes")


def test_the_kubernetes_intake_lists_again_when_etcd_compacted_its_watch_version_away(
    tmp_path: Path, uncached_kubernetes: servers.Server
) -> None:
    """The intake paused past its watch's window while pods change and etcd compacts its
    history: on waking, its watch from the version it had is answered 410 Gone; it lists again,
    and what changed meanwhile becomes claims once each."""
    api = kube.admin(uncached_kubernetes)
    kube.apply(api, kube.MANIFESTS / "intake-rbac.yaml")
    token = kube.service_account_token(api, "spotcap-system", "spotcap-intake")
    ns = kube.namespace(api, "compacted")
    pods = Pods(kube.core(api), ns)
    kubeconfig = kube.write_kubeconfig(tmp_path / "intake.kubeconfig", uncached_kubernetes, token)
    prefix = "kubernetes/compacted/"
    intake = Intake(tmp_path / "home", ("--kubeconfig", str(kubeconfig), "--cluster",
                                         "compacted"))  # fmt: skip

    def mine() -> list[Envelope]:
        return [e for e in claims_in_log(intake.home) if claim_of(e).startswith(prefix)]

    def claimed(event_type: str) -> set[str]:
        return {claim_of(e).split("/")[3] for e in mine() if e.event_type == event_type}

    def until(what: str, opened: set[str], released: set[str]) -> None:
        kube.wait_until(lambda: claimed(OPENED) >= opened and claimed(RELEASED) >= released,
                        180, what, every_s=0.5)  # fmt: skip

    try:
        intake.start().wait_listed(prefix)
        for name in ("stays", "deleted", "succeeds"):
            pods.create(name)
        until("the first pods' claims", {"stays", "deleted", "succeeds"}, set())
        assert intake.proc is not None
        os.kill(intake.proc.pid, signal.SIGSTOP)
        try:
            # Past its watch's window: the server has ended the watch it had open, so what changes
            # now is seen only by the watch it sends on waking, from the version it had.
            time.sleep(WATCH_WINDOW_S + 10)
            pods.end("deleted")  # graceful (the first delete): Terminating, still listed
            kube.set_phase(api, ns, "succeeds", "Running")
            kube.set_phase(api, ns, "succeeds", "Succeeded")
            pods.create("created")
            revision = servers.compact_etcd(uncached_kubernetes)
        finally:
            os.kill(intake.proc.pid, signal.SIGCONT)
        until("the changes made while it slept", {"created"}, {"deleted", "succeeds"})
        said = intake.said()
        assert "the watch's version is gone (410); listing again" in said, said
        for name in ("stays", "created"):
            pods.end(name)
        until("every claim released", set(), {"stays", "created"})
        assert intake.stop().strip() == "claims: 4 opened, 4 released, 0 open"
        _check(mine(), lambda e: claim_of(e).split("/")[3], ["stays", "deleted", "succeeds",
               "created"], set())  # fmt: skip
        assert intake.proc.poll() == 0 and intake.runs == 1 and revision > 0
        assert token not in intake.said() and "Traceback" not in intake.said()
    finally:  # a failed run leaves no intake behind
        if intake.proc is not None and intake.proc.poll() is None:
            intake.proc.kill()
            intake.proc.wait(timeout=60)
    api.close()  # type: ignore[no-untyped-call]


# -- Slurm ------------------------------------------------------------------------------------


@pytest.fixture
def own_slurm(tmp_path: Path) -> Iterator[servers.Server]:
    """A Slurm of the test's own: its slurmctld and slurmrestd are killed."""
    yield from own(servers.start_slurm, tmp_path / "slurm")


class Jobs:
    """The test's Slurm jobs, known by their names (``churn-<name>``): each call retried until
    slurmctld answers; a submission or a cancel that went through unanswered is found by the
    job's name."""

    def __init__(self, server: servers.Server) -> None:
        self.env = {**os.environ, "SLURM_CONF": str(servers.slurm_conf(server))}

    def slurm(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True,
                              timeout=30, check=False)  # fmt: skip

    def states(self, name: str) -> list[str] | None:
        """The states of the jobs of this name slurmctld holds (None: it did not answer)."""
        listed = self.slurm("squeue", "-h", "-t", "all", "--name", f"churn-{name}", "-o", "%T")
        return listed.stdout.split() if listed.returncode == 0 else None

    def create(self, name: str) -> None:
        def once() -> bool:
            states = self.states(name)
            if states is None:  # slurmctld does not answer: an sbatch would not know either
                return False
            if states:  # an earlier try went through
                return True
            done = self.slurm(
                "sbatch",
                "--parsable",
                "-o",
                "/dev/null",
                "-J",
                f"churn-{name}",
                "--comment=spotcap:workload=genomics-align",
                "--wrap",
                "sleep 600",
            )
            return done.returncode == 0  # fmt: skip

        _retry(f"submit job {name}", once)

    def end(self, name: str) -> None:
        def once() -> bool:
            self.slurm("scancel", "--name", f"churn-{name}")  # then look: it may have gone
            states = self.states(name)  # through unanswered
            return states is not None and all(s == "CANCELLED" for s in states)

        _retry(f"cancel job {name}", once)

    def lost(self, names: list[str]) -> set[str]:
        """The jobs slurmctld no longer knows: submitted (sbatch answered) shortly before its
        SIGKILL, they were not in its saved state when it started again."""
        listed = self.slurm("squeue", "-h", "-t", "all", "-o", "%j")
        assert listed.returncode == 0, listed.stderr
        return {n for n in names if f"churn-{n}" not in listed.stdout.split()}


def _run_the_blocker(jobs: Jobs, server: servers.Server) -> None:
    """A job holding the node's 2 CPUs, so that the test's jobs stay pending (the intake
    claims pending work); it runs before the faults, and slurmctld has saved it running, so
    that a slurmctld killed later recovers it as it was."""
    blocker = jobs.slurm("sbatch", "--parsable", "-o", "/dev/null", "-J", "blocker", "-c", "2",
                         "--wrap", "sleep 3600")  # fmt: skip
    assert blocker.returncode == 0, blocker.stderr
    job = blocker.stdout.strip().split(";")[0]
    seen = [""]

    def running() -> bool:
        seen[0] = jobs.slurm("squeue", "-h", "-j", job, "-o", "%T %r").stdout.strip()
        return seen[0].startswith("RUNNING")

    deadline = time.monotonic() + 180
    while not running():  # it starts at slurmctld's next scheduling pass (2 s apart)
        assert time.monotonic() < deadline, f"the blocker did not run in 180 s: {seen[0]!r}"
        time.sleep(0.5)
    # Anything slurmctld saves after this change saves the blocker running.
    marker = f"running-{uuid.uuid4().hex[:12]}"
    marked = jobs.slurm("scontrol", "update", f"JobId={job}", f"AdminComment={marker}")
    assert marked.returncode == 0, marked.stderr
    kube.wait_until(lambda: servers.job_state_holds(server, marker), 120,
                    "slurmctld to save the running blocker in its state", every_s=0.2)  # fmt: skip


def test_the_slurm_intake_rides_out_slurmctld_and_slurmrestd_faults_and_its_own(
    tmp_path: Path, own_slurm: servers.Server
) -> None:
    folder = own_slurm.data_dir
    jobs = Jobs(own_slurm)
    _run_the_blocker(jobs, own_slurm)
    prefix = "slurm/faulted/"  # claim ids: slurm/<cluster>/<job id>/<submit time>
    intake = Intake(tmp_path / "home", ("--slurmrestd", own_slurm.address, "--cluster",
                                         "faulted", "--poll-interval-s", "0.5"))  # fmt: skip

    def mine() -> list[Envelope]:
        return [e for e in claims_in_log(intake.home) if claim_of(e).startswith(prefix)]

    def named(events: list[Envelope]) -> dict[str, str]:
        """Claim id -> the test's name of its job, from the opened claim's reason."""
        return {
            claim_of(e): re.findall(r"\(churn-(\w+)\)", e.payload.reason)[0]
            for e in events if isinstance(e.payload, CapacityClaimOpened)
        }  # fmt: skip

    def claimed(event_type: str) -> set[str]:
        events = mine()
        names = named(events)
        return {names[claim_of(e)] for e in events if e.event_type == event_type}

    intake.start().wait_listed(prefix)
    churn = Churn(jobs.create, jobs.end, lambda: claimed(OPENED))
    churn.start()
    faults = Faults(SEED)
    faults.kill_server("slurmctld", folder, None, servers.start_slurm)
    faults.pause("slurmctld", _pid(folder, None))
    faults.kill_server("slurmrestd", folder, "slurmrestd", servers.start_slurm)
    faults.pause("slurmrestd", _pid(folder, "slurmrestd"))
    _fault_the_intake(faults, intake, churn)
    lost = jobs.lost(churn.created)
    _end_the_rest(churn, claimed, lambda: lost)
    intake.stop()
    events = mine()
    names = named(events)
    _check(events, lambda e: names[claim_of(e)], churn.created, lost)
    assert len(churn.created) >= 20, churn.created
    reported = sorted(lost & set(names.values()))  # claimed, then lost: released once
    print(f"\n{len(churn.created)} jobs, {len(lost)} lost by slurmctld ({sorted(lost)}; "
          f"claimed before, released once: {reported}); " + "; ".join(faults.done))  # fmt: skip
