"""The real servers of infra/servers/ answer, and a Kafka that cannot start says why."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from infra import servers
from infra.servers.gobuild import GoCommand, fetch_go_command

REPO_ROOT = Path(__file__).resolve().parent.parent

# librdkafka logs through Python logging, not to stderr after the session has ended.
CLIENT_LOG = logging.getLogger("tests.kafka")


@pytest.mark.kafka
def test_kafka_topic_produce_consume(kafka: servers.Server) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # NewTopic: not re-exported
        AdminClient,
        NewTopic,
    )

    topic = f"infra-check-{uuid.uuid4().hex[:8]}"
    admin_conf: dict[str, Any] = {"bootstrap.servers": kafka.address, "logger": CLIENT_LOG}
    admin = AdminClient(admin_conf)
    for future in admin.create_topics(
        [NewTopic(topic, num_partitions=3, replication_factor=1)]
    ).values():
        future.result(timeout=30)
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3

    producer = Producer(
        {
            "bootstrap.servers": kafka.address,
            "partitioner": "murmur2_random",
            "acks": "all",
            "logger": CLIENT_LOG,
        }
    )
    sent = {f"key-{i}": f"value-{i}" for i in range(10)}
    for key, value in sent.items():
        producer.produce(topic, key=key.encode(), value=value.encode())
    assert producer.flush(30) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": kafka.address,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "logger": CLIENT_LOG,
        }
    )
    received: dict[str, str] = {}
    partitions: set[int] = set()
    try:
        consumer.subscribe([topic])
        for _ in range(60):
            if len(received) == len(sent):
                break
            for msg in consumer.consume(num_messages=10, timeout=1.0):
                assert msg.error() is None, msg.error()
                raw_key, raw_value, partition = msg.key(), msg.value(), msg.partition()
                assert raw_key is not None and raw_value is not None and partition is not None
                received[raw_key.decode()] = raw_value.decode()
                partitions.add(partition)
    finally:
        consumer.close()
    assert received == sent
    assert len(partitions) > 1  # ten keys spread over the three partitions


def test_postgres_table_roundtrip(postgres: servers.Server) -> None:
    import psycopg

    assert postgres.address.startswith("postgresql://postgres@127.0.0.1:")
    with psycopg.connect(postgres.address, autocommit=True) as conn:
        conn.execute("CREATE TABLE infra_check (id int PRIMARY KEY, note text NOT NULL)")
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO infra_check VALUES (%s, %s)", [(i, f"n{i}") for i in range(5)]
            )
        rows = conn.execute("SELECT id, note FROM infra_check ORDER BY id").fetchall()
        conn.execute("DROP TABLE infra_check")
    assert rows == [(i, f"n{i}") for i in range(5)]


def test_nats_publish_subscribe(nats: servers.Server) -> None:
    import nats as nats_py

    async def roundtrip() -> bytes:
        nc = await nats_py.connect(nats.address, connect_timeout=5, allow_reconnect=False)
        try:
            sub = await nc.subscribe("infra.check")
            await nc.publish("infra.check", b"hello")
            await nc.flush()
            msg = await sub.next_msg(timeout=5)
            return bytes(msg.data)
        finally:
            await nc.close()

    assert asyncio.run(roundtrip()) == b"hello"


def test_state_file_and_status(nats: servers.Server) -> None:
    state = json.loads((nats.data_dir / "server.json").read_text())
    assert (state["name"], state["address"], state["pid"]) == ("nats", nats.address, nats.pid)
    assert servers.server_status(nats.data_dir)["running"] is True
    # starting again on the same directory returns the running server
    assert servers.start_nats(nats.data_dir) == nats


def test_nats_stop_is_clean_and_idempotent(tmp_path: Path) -> None:
    server = servers.start_nats(tmp_path / "nats")
    servers.stop(server)
    assert servers.server_status(server.data_dir)["running"] is False
    servers.stop(server)  # again: nothing to do
    servers.stop(server.data_dir)


def test_openbao_answers_with_its_root_token(openbao: servers.Server) -> None:
    import hvac

    token = servers.openbao_token(openbao)
    client = hvac.Client(url=openbao.address, token=token, timeout=10)
    assert client.is_authenticated()
    assert client.sys.read_health_status(method="GET")["sealed"] is False
    assert (openbao.data_dir / "token").stat().st_mode & 0o077 == 0  # owner only
    assert token not in Path(f"/proc/{openbao.pid}/cmdline").read_text()
    assert servers.start_openbao(openbao.data_dir) == openbao


def test_openbao_with_a_missing_binary_fails_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTCAP_BAO", "/nonexistent/bin/bao")
    with pytest.raises(servers.ServerError) as info:
        servers.start_openbao(tmp_path / "bao", timeout_s=10)
    assert str(info.value).startswith("openbao: ")
    assert "/nonexistent/bin/bao" in str(info.value)


def test_openbao_cli_start_status_stop(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "infra.servers", "openbao"]
    data_dir = tmp_path / "bao"

    def run(action: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*cli, action, "--dir", str(data_dir)],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            check=False,
            timeout=60,
        )

    started = run("start")
    try:
        assert started.returncode == 0, started.stderr
        assert json.loads(started.stdout)["address"].startswith("http://127.0.0.1:")
        assert run("status").returncode == 0
    finally:
        assert run("stop").returncode == 0
    assert run("status").returncode == 3


def test_kafka_with_bogus_java_fails_with_its_log(tmp_path: Path) -> None:
    fake_java = tmp_path / "java"
    fake_java.write_text("#!/bin/sh\necho 'Error: fake JVM refuses to run' >&2\nexit 3\n")
    fake_java.chmod(fake_java.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(servers.ServerError) as info:
        servers.start_kafka(tmp_path / "kafka", timeout_s=20, java=str(fake_java))
    message = str(info.value)
    assert message.startswith("kafka: ")
    assert "fake JVM refuses to run" in message  # the log tail
    assert "How to fix" in message


def test_kafka_with_missing_java_fails_naming_it(tmp_path: Path) -> None:
    with pytest.raises(servers.ServerError) as info:
        servers.start_kafka(tmp_path / "kafka", timeout_s=20, java="/nonexistent/bin/java")
    assert str(info.value).startswith("kafka: ")
    assert "/nonexistent/bin/java" in str(info.value)


def test_cli_help_and_error_exit(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "infra.servers"]
    out = subprocess.run(
        [*cli, "--help"], capture_output=True, text=True, cwd=REPO_ROOT, check=True
    ).stdout
    assert "fetch-kafka" in out and "status" in out
    env = {**os.environ, "SPOTCAP_JAVA": "/nonexistent/bin/java"}
    with_error = subprocess.run(
        [*cli, "kafka", "start", "--dir", str(tmp_path / "k")],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        check=False,
    )
    assert with_error.returncode == 1
    assert with_error.stderr.startswith("kafka: ")
    assert with_error.stdout == ""


def test_a_go_build_that_fails_names_the_module_keeps_its_log_and_leaves_no_binary(
    tmp_path: Path,
) -> None:
    """The real go toolchain, asked for a module the proxy does not have."""
    command = GoCommand(
        "nothing",
        "github.com/spotcap-invalid/nothing/cmd/nothing",
        "v0.0.1",
        tmp_path / "nothing-v0.0.1" / "nothing",
        timeout_s=300,
    )
    with pytest.raises(servers.ServerError) as info:
        fetch_go_command(command)
    message = str(info.value)
    assert message.startswith("nothing: building nothing failed")
    assert "github.com/spotcap-invalid/nothing/cmd/nothing@v0.0.1" in message
    assert "How to fix" in message
    assert (command.binary.parent / "build.log").read_text()  # go's own words are kept
    assert sorted(p.name for p in command.binary.parent.iterdir()) == [".fetch.lock", "build.log"]


def test_a_go_build_without_go_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPOTCAP_GO", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    command = GoCommand("tool", "example.org/tool", "v1.0.0", tmp_path / "tool" / "tool")
    with pytest.raises(servers.ServerError) as info:
        fetch_go_command(command)
    assert "go is not on PATH" in str(info.value)
    assert "SPOTCAP_GO" in str(info.value)


def test_kube_apiserver_answers_and_keeps_its_token_off_command_lines(
    kubernetes: servers.Server,
) -> None:
    from tests import kube_support as kube

    api = kube.admin(kubernetes)
    try:
        from kubernetes import client as k8s

        assert k8s.VersionApi(api).get_code().git_version == "v1.37.2"
    finally:
        api.close()  # type: ignore[no-untyped-call]
    status = json.loads(
        subprocess.run(
            [sys.executable, "-m", "infra.servers", "kubernetes", "status",
             "--dir", str(kubernetes.data_dir)],
            capture_output=True, text=True, cwd=REPO_ROOT, check=True,
        ).stdout
    )  # fmt: skip
    assert status["running"] and [c["name"] for c in status["companions"]] == ["etcd"]
    token = (kubernetes.data_dir / "tokens.csv").read_text().split(",")[0]
    for secret in ("tokens.csv", "admin.kubeconfig", "pki/sa.key"):
        assert stat.S_IMODE((kubernetes.data_dir / secret).stat().st_mode) == 0o600, secret
    for pid in (kubernetes.pid, status["companions"][0]["pid"]):
        assert token not in Path(f"/proc/{pid}/cmdline").read_bytes().decode()
    assert token not in kubernetes.log_path.read_text()


def test_commands_starting_one_postgres_at_once_share_one_server(tmp_path: Path) -> None:
    """Two `spotcap` commands on one home may both start its embedded PostgreSQL at the same
    moment: one initdb, one postmaster, and every caller gets its address."""
    data_dir = tmp_path / "pg"
    command = [sys.executable, "-m", "infra.servers", "postgres"]
    starts = [
        subprocess.Popen(
            [*command, "start", "--dir", str(data_dir)],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    try:
        said = [start.communicate(timeout=300) for start in starts]
        assert [start.returncode for start in starts] == [0, 0, 0], [err for _, err in said]
        assert len({json.loads(out)["address"] for out, _ in said}) == 1
        assert len({json.loads(out)["pid"] for out, _ in said}) == 1
    finally:
        subprocess.run(
            [*command, "stop", "--dir", str(data_dir)], cwd=REPO_ROOT, timeout=120, check=False
        )
