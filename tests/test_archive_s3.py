"""The archive on a real S3 server that enforces Object Lock (versitygw): exported objects are
locked in compliance mode for seven years, the server refuses to delete a locked version or to
shorten its retention, verify checks the retention, and a new version put over a file is found."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from contracts.signing import generate_key_pem
from infra import servers
from replay.archive import layout
from replay.rule_file import shipped_rule_path
from tests.replay_support import History


@pytest.fixture
def s3_env(versitygw: servers.Server, monkeypatch: pytest.MonkeyPatch) -> Any:
    access, secret = servers.versitygw_credentials(versitygw)
    for name, value in (
        ("AWS_ENDPOINT_URL_S3", versitygw.address),
        ("AWS_ACCESS_KEY_ID", access),
        ("AWS_SECRET_ACCESS_KEY", secret),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        monkeypatch.setenv(name, value)
    return boto3.client(
        "s3",
        endpoint_url=versitygw.address,
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}),
    )


def test_an_archive_on_s3_is_locked_and_verified(
    replay_history: History, s3_env: Any, tmp_path: Path
) -> None:
    private_pem, public_pem = generate_key_pem()
    (tmp_path / "k").write_bytes(private_pem)
    (tmp_path / "k.pub").write_bytes(public_pem)
    bucket = f"archive-{uuid.uuid4().hex[:10]}"
    url = f"s3://{bucket}/finance"
    done = replay_history.json(
        "archive", "export", "--month", "2026-11", "--archive", url, "--key", str(tmp_path / "k")
    )
    assert done["archive"] == f"the archive in {url}"
    key = "finance/" + layout.key("rp", "2026-11", layout.EVENTS)
    lock = s3_env.get_object_retention(Bucket=bucket, Key=key)["Retention"]
    assert lock["Mode"] == "COMPLIANCE"
    assert lock["RetainUntilDate"].astimezone(UTC) == datetime(2033, 12, 1, tzinfo=UTC)
    args = ["archive", "verify", "--archive", url, "--public-key", str(tmp_path / "k.pub")]
    report = replay_history.json(*args)
    assert report["ok"] and not [f for m in report["months"] for f in m["findings"]]

    # The server refuses what compliance mode forbids, to the root account too.
    version = s3_env.head_object(Bucket=bucket, Key=key)["VersionId"]
    with pytest.raises(ClientError) as deleted:
        s3_env.delete_object(Bucket=bucket, Key=key, VersionId=version)
    assert deleted.value.response["Error"]["Code"] == "AccessDenied"
    with pytest.raises(ClientError) as shortened:
        s3_env.put_object_retention(
            Bucket=bucket,
            Key=key,
            VersionId=version,
            Retention={"Mode": "COMPLIANCE", "RetainUntilDate": datetime(2027, 1, 1, tzinfo=UTC)},
        )
    assert shortened.value.response["Error"]["Code"] == "AccessDenied"
    assert replay_history.json(*args)["ok"]

    # Versioning lets anyone put a new version over a file: the locked original stays, and
    # verify reads the current one and says it changed.
    s3_env.put_object(Bucket=bucket, Key=key, Body=b"not the archive")
    found = replay_history.json(*args, code=1)
    messages = [f"{f['subject']}: {f['message']}" for m in found["months"] for f in m["findings"]]
    assert any(m.startswith("events.parquet: SHA-256 is") for m in messages), messages
    assert any(m.startswith("events.parquet: is not locked") for m in messages), messages
    versions = s3_env.list_object_versions(Bucket=bucket, Prefix=key)["Versions"]
    assert len(versions) == 2


def test_the_head_on_s3_is_locked_and_its_deletion_found(
    replay_history: History, s3_env: Any, tmp_path: Path
) -> None:
    """The signed head is locked like the months; deleting it (a delete marker: the locked
    version stays) is found, as is a head put over it without a lock."""
    private_pem, public_pem = generate_key_pem()
    (tmp_path / "k").write_bytes(private_pem)
    (tmp_path / "k.pub").write_bytes(public_pem)
    bucket = f"archive-{uuid.uuid4().hex[:10]}"
    url = f"s3://{bucket}/finance"
    replay_history.json(
        "archive", "export", "--month", "2026-11", "--archive", url, "--key", str(tmp_path / "k")
    )
    head = "finance/" + layout.head_key("rp")
    assert s3_env.get_object_retention(Bucket=bucket, Key=head)["Retention"]["Mode"] == (
        "COMPLIANCE"
    )
    args = ["archive", "verify", "--archive", url, "--public-key", str(tmp_path / "k.pub")]
    assert replay_history.json(*args)["ok"]
    signed = s3_env.get_object(Bucket=bucket, Key=head)["Body"].read()
    s3_env.put_object(Bucket=bucket, Key=head, Body=signed)  # the same bytes, unlocked
    found = replay_history.json(*args, code=1)
    messages = [f"{f['subject']}: {f['message']}" for m in found["months"] for f in m["findings"]]
    assert "head: head.json is not locked in compliance mode: it was put over the head" in (
        messages
    ), messages
    s3_env.delete_object(Bucket=bucket, Key=head)  # a delete marker over both versions
    found = replay_history.json(*args, code=1)
    messages = [f"{f['subject']}: {f['message']}" for m in found["months"] for f in m["findings"]]
    assert any(m.startswith("head: is missing from") for m in messages), messages
    versions = s3_env.list_object_versions(Bucket=bucket, Prefix=head)["Versions"]
    assert len(versions) == 2  # the locked head is still there, for whoever looks


def test_replay_from_an_s3_archive(replay_history: History, s3_env: Any, tmp_path: Path) -> None:
    private_pem, _ = generate_key_pem()
    (tmp_path / "k").write_bytes(private_pem)
    url = f"s3://archive-{uuid.uuid4().hex[:10]}"
    replay_history.json(
        "archive", "export", "--month", "2026-11", "--archive", url, "--key", str(tmp_path / "k")
    )
    report = replay_history.json(
        "replay",
        "--rules",
        str(shipped_rule_path("recorded")),
        "--source",
        "archive",
        "--archive",
        url,
        "--diff",
        "--to",
        "2026-11-29",
    )
    assert report["diff"]["identical"] and report["events"] > 1000
