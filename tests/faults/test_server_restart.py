"""A server killed with SIGKILL and started again from its folder comes back on the ports it had
(`infra.servers.process.ports_of`), so that a client that knew its address reconnects by itself:
a Kafka producer made before the kill delivers after the restart, without being made again.
OpenBao and versitygw come back with their data: OpenBao's PKI CA, transit key, KV secrets and
the tokens it issued; versitygw's locked object versions and their retention."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import hvac
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from infra import servers
from infra.servers.process import alive
from provider.nodes.authority import setup_pki
from streams.kafka import KafkaLog
from streams.log import TopicSpec

pytestmark = pytest.mark.slow


def _kill(folder: Path) -> None:
    pid = int(json.loads((folder / "server.json").read_text())["pid"])
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid)


@pytest.mark.parametrize("name", ["nats", "postgres"])
def test_a_killed_server_comes_back_on_its_address(name: str, tmp_path: Path) -> None:
    start = {"nats": servers.start_nats, "postgres": servers.start_postgres}[name]
    first = start(tmp_path / name)
    try:
        _kill(tmp_path / name)
        again = start(tmp_path / name)
        assert again.pid != first.pid and again.address == first.address
    finally:
        servers.stop(tmp_path / name)


def test_a_kafka_client_reconnects_to_a_restarted_broker(tmp_path: Path) -> None:
    folder = tmp_path / "kafka"
    first = servers.start_kafka(folder)
    try:
        log = KafkaLog(first.address)
        topic = f"restart-{uuid.uuid4().hex[:8]}"
        log.apply_topics([TopicSpec(topic, partitions=1, retention_ms=-1)])
        producer = log.producer()
        producer.produce(topic, b"before", key=b"k")
        assert len(producer.flush(60)) == 1
        _kill(folder)
        again = servers.start_kafka(folder)
        assert again.address == first.address
        producer.produce(topic, b"after", key=b"k")  # the same producer, no new address
        assert len(producer.flush(120)) == 1
        producer.close()
        assert log.end_offsets(topic) == {0: 2}
    finally:
        servers.stop(folder)


def test_a_killed_openbao_comes_back_with_its_keys_secrets_and_tokens(tmp_path: Path) -> None:
    folder = tmp_path / "openbao"
    first = servers.start_openbao(folder)
    try:
        root = hvac.Client(url=first.address, token=servers.openbao_token(first), timeout=10)
        ca = setup_pki(root, mount="pki-restart")
        root.sys.enable_secrets_engine("transit")
        root.write("transit/keys/signer", type="ed25519")
        signed = root.write("transit/sign/signer", input="aGVsbG8=")["data"]["signature"]
        root.secrets.kv.v2.create_or_update_secret(path="kept", secret={"value": "before"})
        policy = 'path "secret/data/kept" { capabilities = ["read"] }'
        root.sys.create_or_update_policy(name="reader", policy=policy)
        token = root.auth.token.create(policies=["reader"], ttl="1h")["auth"]["client_token"]
        _kill(folder)
        again = servers.start_openbao(folder)
        assert again.pid != first.pid and again.address == first.address
        reader = hvac.Client(url=first.address, token=token, timeout=10)  # issued before
        kept = reader.secrets.kv.v2.read_secret_version(path="kept", raise_on_deleted_version=True)
        assert kept["data"]["data"] == {"value": "before"}
        root = hvac.Client(url=first.address, token=servers.openbao_token(folder), timeout=10)
        assert root.adapter.get("/v1/pki-restart/ca/pem").text.strip() == ca.strip()
        verified = root.write("transit/verify/signer", input="aGVsbG8=", signature=signed)
        assert verified["data"]["valid"] is True
    finally:
        servers.stop(folder)
    # Stopped cleanly and started again: the same (a stop is not a reset).
    again = servers.start_openbao(folder)
    try:
        assert again.address == first.address
        reader = hvac.Client(url=first.address, token=token, timeout=10)
        kept = reader.secrets.kv.v2.read_secret_version(path="kept", raise_on_deleted_version=True)
        assert kept["data"]["data"] == {"value": "before"}
    finally:
        servers.stop(folder)


def test_a_killed_versitygw_comes_back_with_its_locked_versions(tmp_path: Path) -> None:
    folder = tmp_path / "versitygw"
    first = servers.start_versitygw(folder)
    try:
        access, secret = servers.versitygw_credentials(first)
        s3 = boto3.client(
            "s3", endpoint_url=first.address, aws_access_key_id=access,
            aws_secret_access_key=secret, region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"mode": "standard"}),
        )  # fmt: skip
        bucket = f"restart-{uuid.uuid4().hex[:8]}"
        s3.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
        until = datetime.now(UTC).replace(microsecond=0) + timedelta(days=2)
        put = s3.put_object(
            Bucket=bucket, Key="month/manifest.json", Body=b"locked",
            ObjectLockMode="COMPLIANCE", ObjectLockRetainUntilDate=until,
        )  # fmt: skip
        _kill(folder)
        again = servers.start_versitygw(folder)
        assert again.pid != first.pid and again.address == first.address
        # The same client (the address it knew): the object, its version and its lock are kept.
        body = s3.get_object(Bucket=bucket, Key="month/manifest.json")["Body"].read()
        assert body == b"locked"
        lock = s3.get_object_retention(Bucket=bucket, Key="month/manifest.json")["Retention"]
        assert lock["Mode"] == "COMPLIANCE" and lock["RetainUntilDate"] == until
        with pytest.raises(ClientError):
            s3.delete_object(Bucket=bucket, Key="month/manifest.json", VersionId=put["VersionId"])
    finally:
        servers.stop(folder)
