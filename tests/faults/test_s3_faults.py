"""versitygw killed (SIGKILL) and paused (SIGSTOP) during `spotcap archive export` of a month to
S3 with Object Lock, on a versitygw of the test's own:

- killed before one of the month's objects is written (a data file, the manifest's signature,
  the head's signature, the head): the export fails with one sentence saying to run it again;
  verify does not pass the month meanwhile (nothing partial is sealed); started again on its
  port, the same export completes the month, verify passes, and each of the month's objects
  has one version (what the first run wrote is not written again as a second version);
- paused for longer than 10 s while an object is written: the export waits and completes.
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from contracts.signing import generate_key_pem
from infra import servers
from infra.servers.process import alive
from replay.archive import layout
from replay.archive.s3 import S3Storage
from tests.faults.own_servers import kill
from tests.replay_support import History

pytestmark = pytest.mark.slow

MONTH = "2026-11"
REGION = "rp"
PAUSE_S = 12.0


class Gateway:
    """A versitygw of the test's own, the environment boto3 reads, and the faults."""

    def __init__(self, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.folder = folder
        self.server = servers.start_versitygw(folder)
        # boto3's default session keeps the first credentials it resolved: a session of this
        # test's own reads these (the one before is put back afterwards).
        monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
        access, secret = servers.versitygw_credentials(self.server)
        for name, value in (("AWS_ENDPOINT_URL_S3", self.server.address),
                            ("AWS_ACCESS_KEY_ID", access), ("AWS_SECRET_ACCESS_KEY", secret),
                            ("AWS_DEFAULT_REGION", "us-east-1")):  # fmt: skip
            monkeypatch.setenv(name, value)
        self.s3 = boto3.client(
            "s3", endpoint_url=self.server.address, aws_access_key_id=access,
            aws_secret_access_key=secret, region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}),
        )  # fmt: skip

    def kill(self) -> None:
        kill(self.server.pid)

    def start(self) -> None:
        address = self.server.address
        self.server = servers.start_versitygw(self.folder)
        assert self.server.address == address

    def versions(self, bucket: str, prefix: str) -> Counter[str]:
        """How many versions each key under `prefix` has."""
        listed = self.s3.list_object_versions(Bucket=bucket, Prefix=prefix)
        return Counter(str(v["Key"]) for v in listed.get("Versions", []))


@pytest.fixture
def gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Gateway]:
    found = Gateway(tmp_path / "versitygw", monkeypatch)
    try:
        yield found
    finally:
        if alive(found.server.pid):
            os.kill(found.server.pid, signal.SIGCONT)
        servers.stop(found.folder)


def fault_before(
    monkeypatch: pytest.MonkeyPatch, name: str, fault: Callable[[], None]
) -> list[str]:
    """Run `fault` once, when the export is about to write the object `name` (the real put
    then meets the faulted server); the keys written before it."""
    put = S3Storage.put
    written: list[str] = []

    def faulted(self: S3Storage, key: str, source: Path, retain_until: Any) -> None:
        if key.rsplit("/", 1)[-1] == name and not written.count("<fault>"):
            written.append("<fault>")
            fault()
        put(self, key, source, retain_until)
        written.append(key)

    monkeypatch.setattr(S3Storage, "put", faulted)
    return written


def keys(tmp_path: Path) -> tuple[list[str], list[str]]:
    private_pem, public_pem = generate_key_pem()
    (tmp_path / "k").write_bytes(private_pem)
    (tmp_path / "k.pub").write_bytes(public_pem)
    return ["--key", str(tmp_path / "k")], ["--public-key", str(tmp_path / "k.pub")]


@pytest.mark.parametrize(
    "before", [layout.COST_LINES, layout.SIGNATURE, layout.HEAD_SIGNATURE, layout.HEAD]
)
def test_an_export_cut_by_a_killed_s3_fails_in_a_sentence_and_a_rerun_completes_it(
    replay_history: History, gateway: Gateway, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, before: str,
) -> None:  # fmt: skip
    sign, public = keys(tmp_path)
    bucket = f"archive-{uuid.uuid4().hex[:10]}"
    url = f"s3://{bucket}/finance"
    export = ["archive", "export", "--month", MONTH, "--archive", url, *sign]
    verify = ["archive", "verify", "--archive", url, *public]
    written = fault_before(monkeypatch, before, gateway.kill)
    said = replay_history.cli(*export, code=1)
    assert "<fault>" in written and "Traceback" not in said
    assert f"archive export --month {MONTH}" in said and "again" in said, said
    gateway.start()
    # Nothing partial passes: the month is not sealed, or its head does not name it yet.
    found = replay_history.json(*verify, code=1)
    assert not found["ok"]
    replay_history.json(*export)
    report = replay_history.json(*verify)
    assert report["ok"], report
    versions = gateway.versions(bucket, f"finance/{REGION}/")
    assert versions and set(versions.values()) == {1}, versions


def test_an_export_rides_out_a_paused_s3(
    replay_history: History, gateway: Gateway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sign, public = keys(tmp_path)
    bucket = f"archive-{uuid.uuid4().hex[:10]}"
    url = f"s3://{bucket}/finance"

    def pause() -> None:
        os.kill(gateway.server.pid, signal.SIGSTOP)
        threading.Timer(PAUSE_S, os.kill, (gateway.server.pid, signal.SIGCONT)).start()

    written = fault_before(monkeypatch, layout.MANIFEST, pause)
    replay_history.json("archive", "export", "--month", MONTH, "--archive", url, *sign)
    assert "<fault>" in written and written[-1].endswith(layout.HEAD)  # all of it, in one run
    assert replay_history.json("archive", "verify", "--archive", url, *public)["ok"]
    versions = gateway.versions(bucket, f"finance/{REGION}/")
    assert versions and set(versions.values()) == {1}, versions
