"""Shared pytest fixtures: the real servers (Kafka, PostgreSQL, NATS, OpenBao, Slurm,
kube-apiserver over etcd, Toxiproxy) from infra/servers/.

Each server is started once per test session under the session's temporary directory and stopped
at the end. A server that cannot start fails the tests that need it (never skips them).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from infra import servers  # noqa: E402
from infra.servers.process import STATE_FILE  # noqa: E402
from projections.ledger.store import ChdbStore  # noqa: E402
from projections.postgres.connection import Connection, connect  # noqa: E402
from projections.postgres.migrate import drop, migrate  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    """Without --basetemp, the session's temporary folder is one of its own (not under pytest's
    shared ``pytest-of-<user>``, whose mode every other pytest session on the machine sets back to
    0700 when it starts: the embedded PostgreSQL, which runs as an unprivileged user with its data
    under a test's folder, then loses its own files and panics). Removed at the end of a session
    that passed; kept for a look after one that failed."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        # A suite run as a background job (``make test &``, nohup) starts with SIGINT ignored,
        # and every child it starts would inherit that: the tests that stop a command with
        # Ctrl-C would wait for it forever. A handled SIGINT goes back to the default in a child.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if config.option.basetemp is None:
        root = Path(tempfile.mkdtemp(prefix="spotcap-tests-"))
        root.chmod(0o755)
        config.option.basetemp = str(root / "tmp")
        config.stash[_OWN_BASETEMP] = root


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[_PASSED] = exitstatus == 0


def pytest_unconfigure(config: pytest.Config) -> None:
    root = config.stash.get(_OWN_BASETEMP, None)
    if root is not None and config.stash.get(_PASSED, False):
        shutil.rmtree(root, ignore_errors=True)


_OWN_BASETEMP = pytest.StashKey[Path]()
_PASSED = pytest.StashKey[bool]()


def _serve(
    tmp_path_factory: pytest.TempPathFactory, name: str, start: Callable[[Path], servers.Server]
) -> Iterator[servers.Server]:
    data_dir = tmp_path_factory.mktemp(name)
    try:
        server = start(data_dir)
    except servers.ServerError as exc:
        pytest.fail(f"could not start {name} for the tests:\n{exc}", pytrace=False)
    try:
        yield server
    finally:
        servers.stop(server)


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Server]:
    """A real single-node Kafka 4.4 (KRaft); ``.address`` is the bootstrap server."""
    yield from _serve(tmp_path_factory, "kafka", servers.start_kafka)


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Server]:
    """A real PostgreSQL 18; ``.address`` is a libpq URI (user postgres, trust auth)."""
    yield from _serve(tmp_path_factory, "postgres", servers.start_postgres)


@pytest.fixture(scope="session")
def nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Server]:
    """A real nats-server with JetStream; ``.address`` is ``nats://127.0.0.1:PORT``."""
    yield from _serve(tmp_path_factory, "nats", servers.start_nats)


@pytest.fixture(scope="session")
def openbao(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Server]:
    """A real OpenBao (Raft storage in its folder, kept across a restart); ``.address`` is
    ``http://127.0.0.1:PORT``, its root token is ``servers.openbao_token(openbao)``. Nothing is
    mounted but the defaults and KV v2 at ``secret/``."""
    yield from _serve(tmp_path_factory, "openbao", servers.start_openbao)


def fleet_schema(postgres: servers.Server, prefix: str = "t") -> Iterator[Connection]:
    """Body of a fixture: a migrated fleet-state schema of its own on `postgres`, named
    `prefix` and a random suffix, dropped after."""
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    conn = connect(postgres.address, schema)
    migrate(conn, schema)
    try:
        yield conn
    finally:
        drop(conn, schema)
        conn.close()


@pytest.fixture
def fleet(postgres: servers.Server) -> Iterator[Connection]:
    """A migrated fleet-state schema of its own on the session's PostgreSQL (dropped after)."""
    yield from fleet_schema(postgres)


@pytest.fixture(scope="session", autouse=True)
def no_server_outlives_the_suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """After every other fixture is torn down, stop any server still running under this
    session's temporary directory (say an embedded PostgreSQL a `spotcap demo` started in a
    test's home, which by design outlives the command until `spotcap db stop`), and warn with
    its folder, so that the test that left it can be made to stop it."""
    yield
    base = tmp_path_factory.getbasetemp()
    left = sorted(  # resolved: pytest links "<test>current" to a test's latest folder
        {
            state.parent.resolve()
            for depth in range(1, 5)
            for state in base.glob("*/" * depth + STATE_FILE)
        }
    )
    for data_dir in left:
        servers.stop(data_dir)
    if left:
        warnings.warn(
            "servers were left running under the suite's tmp folder and are now stopped: "
            + ", ".join(str(d.relative_to(base.resolve())) for d in left),
            stacklevel=1,
        )


@pytest.fixture(scope="session", autouse=True)
def chdb_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The one chdb data path of this test process (chdb admits one per process): every
    in-process ledger, the CLI's included, gets a database of its own inside it. Autouse, so
    that no test opens chdb elsewhere first."""
    path = tmp_path_factory.mktemp("chdb")
    before = os.environ.get("SPOTCAP_CHDB_PATH")
    os.environ["SPOTCAP_CHDB_PATH"] = str(path)
    try:
        yield path
    finally:
        if before is None:
            os.environ.pop("SPOTCAP_CHDB_PATH", None)
        else:
            os.environ["SPOTCAP_CHDB_PATH"] = before


@pytest.fixture
def ledger_store(chdb_path: Path) -> Iterator[ChdbStore]:
    """An embedded ledger database of its own (dropped after)."""
    store = ChdbStore(chdb_path, f"t_{uuid.uuid4().hex[:12]}")
    try:
        yield store
    finally:
        store.command(f"DROP DATABASE IF EXISTS {store.database}")


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Server]:
    """A real one-node Slurm 22.05 (slurmctld, slurmd, munged, slurmrestd) from Debian's
    packages; ``.address`` is ``unix:<rest socket>``, ``servers.slurm_conf(slurm)`` the
    ``SLURM_CONF``. The node is ``localhost``, the partition ``batch``."""
    yield from _serve(tmp_path_factory, "slurm", servers.start_slurm)


@pytest.fixture(scope="session")
def kubernetes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Server]:
    """A real kube-apiserver v1.37.2 over Debian's etcd (no kubelet, no controllers; RBAC);
    ``.address`` is ``https://127.0.0.1:PORT``, ``servers.kubeconfig(kubernetes)`` the
    administrator's kubeconfig. Shared by the session: each test works in namespaces and on
    nodes of its own (``tests/kube_support.py``)."""
    yield from _serve(tmp_path_factory, "kubernetes", servers.start_kubernetes)


@pytest.fixture(scope="session")
def versitygw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Server]:
    """A real versitygw S3 server (posix backend, versioning, Object Lock enforced);
    ``.address`` is ``http://127.0.0.1:PORT``, the keys are ``servers.versitygw_credentials``."""
    yield from _serve(tmp_path_factory, "versitygw", servers.start_versitygw)


@pytest.fixture(scope="session")
def toxiproxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Server]:
    """A real Toxiproxy (network faults on loopback: latency, black holes, resets);
    ``servers.Toxiproxy(toxiproxy.address)`` makes proxies. Shared by the session: each test
    makes proxies of its own, under names of its own."""
    yield from _serve(tmp_path_factory, "toxiproxy", servers.start_toxiproxy)


@pytest.fixture(scope="session")
def replay_history(tmp_path_factory: pytest.TempPathFactory, chdb_path: Path) -> Any:
    """A small simulated region over the turn of November 2026 (two months), in an embedded
    log and projected into the ledger (tests.replay_support.History)."""
    from tests.replay_support import History, small_config

    return History(tmp_path_factory.mktemp("replay-history"), small_config())
