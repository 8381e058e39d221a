"""Shared pytest fixtures: the real servers (Kafka, PostgreSQL, NATS, OpenBao) from infra/servers/.

Each server is started once per test session under the session's temporary directory and stopped
at the end. A server that cannot start fails the tests that need it (never skips them).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from infra import servers  # noqa: E402


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
    """A real OpenBao dev server (in memory); ``.address`` is ``http://127.0.0.1:PORT``, its root
    token is ``servers.openbao_token(openbao)``. Nothing is mounted but the defaults."""
    yield from _serve(tmp_path_factory, "openbao", servers.start_openbao)
