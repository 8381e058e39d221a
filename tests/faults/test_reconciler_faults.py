"""The reconciler (`spotcap run reconciler`, a process of its own) under faults of its fleet
state's PostgreSQL and of itself (issue 27): drift made behind spotcap's back on the served
cloud (instances deleted through Nova, a stranger tagged as ours) while the reconciler runs a
round a second; PostgreSQL killed (SIGKILL, started again on its port after 1-4 s) and paused
(SIGSTOP), the reconciler killed mid-pass and paused; more drift after each fault.

Nobody restarts the reconciler but for its own SIGKILL: it rides out PostgreSQL's faults by
itself (a round given up and tried again on a new connection; it used to end with a
traceback). Afterwards, from the log: each drift's corrective action was decided once, each
under its own id: one ``drift_detected`` per drifted instance, one ``instance_lost`` per
instance deleted outside, one adoption (``instance_launched``) for the stranger, nothing else;
a copy of an event is the same decision under the same id (the reconciler killed after it
wrote and started again writes it again; readers drop copies) and no process wrote one twice.

Bounded: pauses of 10-20 s, PostgreSQL down 1-4 s; a couple of minutes.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from infra import servers
from projections.catchup import Writer, catch_up
from projections.postgres.connection import connect
from projections.postgres.migrate import migrate
from provider.base import LaunchRequest, owned_tags
from provider.reconcile.compare import MISSING, UNKNOWN
from schemas.codec import Codec
from schemas.events import DriftDetected, Envelope, InstanceLaunched, InstanceLost
from sim.cloud import ServedCloud
from sim.cloud.serve import write_client_files
from streams.browse import Wanted, browse
from streams.embedded import EmbeddedLog
from streams.reader import Decoded
from streams.topics import region_topics
from streams.writer import EventWriter
from tests import kube_support as kube
from tests.cli_support import SPOTCAP
from tests.cloud_support import OWNER, POOL, REGION, adapter, create_server, served_clouds
from tests.cloud_support import connect as connect_cloud
from tests.faults.own_servers import own

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SEED = 27
PAUSE_S = (10.0, 20.0)
DOWN_S = (1.0, 4.0)
CODEC = Codec()
PRODUCER = "spotcap/reconciler"


@pytest.fixture
def clouds() -> Iterator[Callable[..., ServedCloud]]:
    yield from served_clouds()


@pytest.fixture
def own_postgres(tmp_path: Path) -> Iterator[servers.Server]:
    """A PostgreSQL of the test's own: it is killed."""
    yield from own(servers.start_postgres, tmp_path / "postgres")


class Reconciler:
    """`spotcap run reconciler` in a child process over the home's embedded log."""

    def __init__(self, home: Path, provider_file: Path, dsn: str) -> None:
        self.home, self.provider_file, self.dsn = home, provider_file, dsn
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0

    def start(self) -> None:
        self.runs += 1
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTCAP_")}
        argv = [SPOTCAP, "--home", str(self.home), "--region", REGION, "run", "reconciler",
                "--provider", str(self.provider_file), "--orchestrator-id", OWNER,
                "--postgres", self.dsn, "--every-s", "1", "--grace-s", "0"]  # fmt: skip
        with self.err(self.runs).open("wb") as err:
            self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env=env)

    def err(self, run: int) -> Path:
        return self.home.parent / f"reconciler-{run}.err"

    def said(self) -> str:
        return "".join(self.err(r).read_text() for r in range(1, self.runs + 1))

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def ours_in_log(home: Path) -> list[Envelope]:
    """The reconciler's events in the region's lifecycle topic, every copy."""
    log = EmbeddedLog(home / "log")
    try:
        return [
            item.envelope
            for item in browse(log, CODEC, f"{REGION}.lifecycle", REGION, Wanted())
            if isinstance(item, Decoded) and item.envelope.producer == PRODUCER
        ]
    finally:
        log.close()


class Region:
    """The served cloud with 8 of spotcap's instances, the home's log and the fleet state
    projected from it; drift made behind spotcap's back, and what it must lead to."""

    def __init__(self, tmp_path: Path, cloud: ServedCloud, postgres: servers.Server) -> None:
        self.cloud, self.home = cloud, tmp_path / "home"
        self.nova = connect_cloud(cloud.access).compute
        provider = adapter(cloud)
        log = EmbeddedLog(self.home / "log")
        log.apply_topics(region_topics(REGION))
        writer = EventWriter(log, CODEC, REGION)
        request = LaunchRequest(POOL, "wl-faulted", owned_tags(OWNER, "wl-faulted"))
        self.ours = [provider.launch(request).instance_id for _ in range(8)]
        for event in provider.poll_events():
            writer.write(event)
        writer.close()
        fleet = connect(postgres.address)
        migrate(fleet)
        catch_up(log, CODEC, REGION, Writer("fleet", fleet=fleet))  # the state knows all 8
        fleet.close()
        log.close()
        self.provider_file = write_client_files(cloud, tmp_path / "client")
        self.drifted: dict[str, str] = {}  # instance -> kind

    def delete_behind_its_back(self) -> None:
        instance = self.ours[len(self.drifted)]
        self.nova.delete_server(instance)
        self.drifted[instance] = MISSING

    def stranger(self) -> None:
        """A server tagged as ours that spotcap never launched."""
        tags = {k.replace("/", ":"): v for k, v in owned_tags(OWNER, "wl-stranger").items()}
        tags |= {"spotcap.io:pool": POOL, "spotcap.io:purchase-model": "reclaimable"}
        made = create_server(self.cloud, connect_cloud(self.cloud.access), POOL, tags,
                             tags=[f"spotcap.io:owner={OWNER}"])  # fmt: skip
        self.drifted[made] = UNKNOWN

    def wait_reported(self) -> None:
        def reported() -> set[str]:
            return {e.payload.instance_id for e in ours_in_log(self.home)
                    if isinstance(e.payload, DriftDetected)}  # fmt: skip

        kube.wait_until(lambda: set(self.drifted) <= reported(), 180,
                        f"drift of {sorted(self.drifted)}", every_s=1.0)  # fmt: skip


def test_the_reconciler_rides_out_postgres_faults_and_its_own_and_acts_once(
    tmp_path: Path, clouds: Callable[..., ServedCloud], own_postgres: servers.Server
) -> None:
    region = Region(tmp_path, clouds(), own_postgres)
    reconciler = Reconciler(region.home, region.provider_file, own_postgres.address)
    rng = random.Random(SEED)
    region.delete_behind_its_back()
    region.stranger()
    reconciler.start()
    region.wait_reported()
    done: list[str] = []
    folder = own_postgres.data_dir
    # PostgreSQL killed, then paused: the reconciler rides both out by itself.
    region.delete_behind_its_back()
    os.kill(servers.server_status(folder)["pid"], signal.SIGKILL)
    down = rng.uniform(*DOWN_S)
    time.sleep(down)
    servers.start_postgres(folder)
    done.append(f"SIGKILL PostgreSQL, started again {down:.1f} s later")
    region.wait_reported()
    region.delete_behind_its_back()
    paused = _pause(servers.server_status(folder)["pid"], rng)
    done.append(f"SIGSTOP PostgreSQL, {paused:.1f} s")
    region.wait_reported()
    assert reconciler.running() and reconciler.runs == 1, reconciler.said()
    # The reconciler itself: killed mid-pass (it runs a round a second), then paused.
    region.delete_behind_its_back()
    time.sleep(rng.uniform(0.0, 1.0))
    assert reconciler.proc is not None
    reconciler.proc.send_signal(signal.SIGKILL)
    reconciler.proc.wait(timeout=30)
    reconciler.start()
    done.append("SIGKILL the reconciler, started again at once")
    region.wait_reported()
    region.delete_behind_its_back()
    assert reconciler.proc is not None
    paused = _pause(reconciler.proc.pid, rng)
    done.append(f"SIGSTOP the reconciler, {paused:.1f} s")
    region.wait_reported()
    time.sleep(3)  # a few more rounds: they must decide nothing new
    assert reconciler.running() and reconciler.proc is not None, reconciler.said()
    reconciler.proc.send_signal(signal.SIGTERM)
    assert reconciler.proc.wait(timeout=60) == 0, reconciler.said()

    _check_once(ours_in_log(region.home), region.drifted, reconciler.runs)
    said = reconciler.said()
    assert "the fleet state is unreachable" in said and "Traceback" not in said, said
    print(f"\n{len(region.drifted)} drifts; " + "; ".join(done))


def _pause(pid: int, rng: random.Random) -> float:
    paused = rng.uniform(*PAUSE_S)
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(paused)
    finally:
        os.kill(pid, signal.SIGCONT)
    return paused


def _check_once(events: list[Envelope], drifted: dict[str, str], runs: int) -> None:
    """One decision per drift, each under its own id; copies are the same decision, at most one
    per run of the reconciler."""
    by_id: dict[str, set[str]] = {}
    for e in events:
        by_id.setdefault(e.event_id, set()).add(repr(e.payload))
    assert [i for i, payloads in by_id.items() if len(payloads) > 1] == []  # one decision each
    copies = Counter(e.event_id for e in events)
    assert max(copies.values()) <= runs, copies
    distinct = {e.event_id: e for e in events}.values()
    kinds = Counter(
        (type(e.payload).__name__, e.payload.instance_id, getattr(e.payload, "kind", ""))
        for e in distinct
        if isinstance(e.payload, DriftDetected | InstanceLost | InstanceLaunched)
    )
    expected: Counter[tuple[str, str, str]] = Counter()
    for instance, kind in drifted.items():
        expected[("DriftDetected", instance, kind)] += 1
        what = "InstanceLost" if kind == MISSING else "InstanceLaunched"
        expected[(what, instance, "")] += 1
    assert kinds == expected
    assert len(distinct) == sum(expected.values())  # nothing else
