"""The checkpoint client on the real versitygw and OpenBao: a generation is published whole or
not at all (a save killed after a part was uploaded leaves no generation), retention by
generations and by days, the control plane's credentials refused by the bucket and by the key,
a tampered part or manifest refused on restore, and restart semantics with quarantine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from checkpoint import (
    KeyAccessError,
    NoValidGenerationError,
    Retention,
    S3Bucket,
    StoreAccessDeniedError,
    UnitQuarantinedError,
    UnitRunner,
)
from checkpoint.manifest import Manifest
from checkpoint.retention import DAY_US
from infra import servers
from schemas.checkpoints import Quarantined, Written
from tests.checkpoint_support import Reports, Workload, make_workload


@pytest.fixture
def workload(versitygw: servers.Server, openbao: servers.Server) -> Workload:
    return make_workload(versitygw, openbao)


def _manifest(workload: Workload, unit: str, generation: int) -> Manifest:
    raw = workload.bucket.get_bytes(f"units/{unit}/manifests/{generation:012d}.json")
    assert raw is not None
    return Manifest.from_json(raw)


def test_save_list_and_restore_the_newest_generation(workload: Workload, tmp_path: Path) -> None:
    reports = Reports()
    client = workload.client("train-0", reporter=reports)
    model = os.urandom(3 * 1024 * 1024 + 17)  # more than one sealing chunk
    first = client.save({"model": model, "optimizer": b"adam"}, step=100)
    second = client.save({"model": model[::-1], "optimizer": b"adam2"}, step=200)
    assert (first.generation, second.generation) == (1, 2)
    assert [g.generation for g in client.generations()] == [1, 2]
    manifest = _manifest(workload, "train-0", 2)
    assert (manifest.workload_id, manifest.unit_id, manifest.step) == (
        workload.workload_id,
        "train-0",
        200,
    )
    sizes = {p.name: (p.plain_bytes, len(p.sha256)) for p in manifest.parts}
    assert sizes == {"model": (len(model), 64), "optimizer": (5, 64)}
    restored = client.restore()
    assert restored is not None and (restored.generation, restored.step) == (2, 200)
    assert restored.parts == {"model": model[::-1], "optimizer": b"adam2"}
    on_disk = client.restore(into=tmp_path / "r")
    assert on_disk is not None and on_disk.files["model"].read_bytes() == model[::-1]
    # every publish is reported with the real figures
    assert [
        (m.generation, m.step, m.final) for m in reports.messages if isinstance(m, Written)
    ] == [
        (1, 100, False),
        (2, 200, False),
    ]
    written = reports.messages[1]
    assert isinstance(written, Written) and written.written_bytes == second.written_bytes
    assert written.written_bytes > len(model) and written.duration_s > 0
    assert workload.client("nothing-yet").restore() is None


_CHILD = """
import os
from tests.checkpoint_support import client_from_env
client, config = client_from_env()
fifo = open(config["fifo"], "rb")
client.save({"a-first": os.urandom(200_000), "b-second": fifo}, step=99)
"""


def test_a_save_killed_after_its_first_part_leaves_no_generation(
    workload: Workload, tmp_path: Path
) -> None:
    client = workload.client("unit-k")
    client.save({"a-first": b"one", "b-second": b"two"}, step=1)
    fifo = tmp_path / "part.fifo"
    os.mkfifo(fifo)
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD],
        env=workload.child_env("unit-k", fifo=str(fifo)),
        cwd=Path(__file__).resolve().parent.parent,
    )
    writer = os.open(fifo, os.O_WRONLY)  # the child has opened it: the save is under way
    try:
        os.write(writer, b"half of the second part")
        part = "units/unit-k/generations/000000000002/a-first"
        deadline = time.monotonic() + 60
        while not any(o.key == part for o in workload.bucket.objects("units/unit-k/generations/")):
            assert time.monotonic() < deadline, "the first part was never uploaded"
            time.sleep(0.05)
        # A reader meanwhile sees generation 1 only: the new one has no manifest yet.
        assert [g.generation for g in client.generations()] == [1]
        child.kill()  # SIGKILL in the middle of the save
        child.wait(30)
    finally:
        os.close(writer)
    assert [g.generation for g in client.generations()] == [1]
    restored = client.restore()
    assert restored is not None and restored.parts == {"a-first": b"one", "b-second": b"two"}
    # A save killed inside a multipart upload leaves the upload open (made here by hand).
    stale = "units/unit-k/generations/000000000002/b-second"
    upload = workload.s3.create_multipart_upload(Bucket=workload.bucket.name, Key=stale)
    workload.s3.upload_part(
        Bucket=workload.bucket.name,
        Key=stale,
        UploadId=upload["UploadId"],
        PartNumber=1,
        Body=b"x" * 1024,
    )
    assert workload.bucket.uploads("units/unit-k/") == [(stale, upload["UploadId"])]
    # The next save skips the interrupted generation's number; pruning removes its parts and
    # aborts its upload.
    third = client.save({"a-first": b"1", "b-second": b"2"}, step=2)
    assert third.generation == 3
    keys = {o.key for o in workload.bucket.objects("units/unit-k/generations/")}
    assert part not in keys
    assert workload.bucket.uploads("units/unit-k/") == []
    assert [g.generation for g in client.generations()] == [1, 3]


def test_retention_keeps_three_generations_or_seven_days(workload: Workload) -> None:
    client = workload.client("by-count")
    for step in range(5):
        client.save({"state": bytes([step])}, step=step)
    assert [g.generation for g in client.generations()] == [3, 4, 5]
    assert client.restore() is not None
    parts = {o.key.split("/")[3] for o in workload.bucket.objects("units/by-count/generations/")}
    assert parts == {"000000000003", "000000000004", "000000000005"}

    now = [1_800_000_000_000_000]
    by_days = workload.client(
        "by-days", retention=Retention(generations=None, days=7), now_us=lambda: now[0]
    )
    for day in (0, 2, 6, 9):
        now[0] = 1_800_000_000_000_000 + day * DAY_US
        by_days.save({"state": bytes([day])}, step=day)
    # at day 9, day 0 is older than seven days; day 2 is exactly seven days old and kept
    assert [g.step for g in by_days.generations()] == [2, 6, 9]
    now[0] += 30 * DAY_US  # a month idle: the newest is kept whatever its age
    report = by_days.prune()
    assert report.kept == (4,) and report.pruned == (2, 3)
    restored = by_days.restore()
    assert restored is not None and restored.step == 9


def test_the_control_planes_credentials_can_neither_read_nor_decrypt(workload: Workload) -> None:
    client = workload.client("secret-unit")
    marker = b"THE-WORKLOAD'S-OWN-STATE " * 2000
    client.save({"state": marker}, step=7)
    manifest_key = "units/secret-unit/manifests/000000000001.json"
    part_key = "units/secret-unit/generations/000000000001/state"

    # The bucket: the control plane's S3 account is refused every operation.
    platform = S3Bucket(workload.control_plane_s3, workload.bucket.name)
    for attempt in (
        lambda: platform.get_bytes(manifest_key),
        lambda: platform.objects("units/"),
        lambda: platform.put_bytes("units/secret-unit/manifests/000000000009.json", b"{}"),
        lambda: platform.delete([manifest_key]),
    ):
        with pytest.raises(StoreAccessDeniedError):
            attempt()
    with pytest.raises(ClientError) as policy:
        workload.control_plane_s3.get_bucket_policy(Bucket=workload.bucket.name)
    assert policy.value.response["Error"]["Code"] == "AccessDenied"

    # The key: even with the bytes in hand (read here with the storage's root), the control
    # plane's OpenBao token cannot unwrap the data key, and the bytes hold no plaintext.
    stored = workload.root_s3.get_object(Bucket=workload.bucket.name, Key=part_key)["Body"].read()
    assert b"WORKLOAD'S-OWN-STATE" not in stored
    manifest = Manifest.from_json(
        workload.root_s3.get_object(Bucket=workload.bucket.name, Key=manifest_key)["Body"].read()
    )
    with pytest.raises(KeyAccessError) as refused:
        workload.keys(workload.control_plane_token).unwrap(manifest.wrapped_key)
    assert refused.value.status == 403
    assert workload.control_plane_token not in str(refused.value)
    with pytest.raises(KeyAccessError):
        workload.keys(workload.control_plane_token).new_data_key()
    as_platform = workload.client("secret-unit")
    as_platform.bucket = S3Bucket(workload.root_s3, workload.bucket.name)
    as_platform.keys = workload.keys(workload.control_plane_token)
    with pytest.raises(KeyAccessError):
        as_platform.restore()
    restored = client.restore()  # the workload itself still can
    assert restored is not None and restored.parts["state"] == marker


def _flip(workload: Workload, key: str, at: int) -> None:
    s3, bucket = workload.root_s3, workload.bucket.name
    data = bytearray(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    data[at] ^= 0x01
    s3.put_object(Bucket=bucket, Key=key, Body=bytes(data))


def test_a_tampered_part_or_manifest_is_refused_on_restore(workload: Workload) -> None:
    client = workload.client("tamper")
    for step in (1, 2, 3):
        client.save({"model": os.urandom(50_000), "meta": f"step {step}".encode()}, step=step)
    _flip(workload, "units/tamper/generations/000000000003/model", 40_000)
    restored = client.restore()
    assert restored is not None and restored.generation == 2
    ((generation, why),) = restored.refused
    assert generation == 3 and why.startswith("part model:") and "SHA-256" in why

    # A manifest changed to match the altered part (or to claim another step) no longer
    # authenticates: its MAC is under the data key only the workload can unwrap.
    manifest_key = "units/tamper/manifests/000000000002.json"
    data = json.loads(workload.bucket.get_bytes(manifest_key) or b"")
    data["step"] = 999
    workload.root_s3.put_object(
        Bucket=workload.bucket.name, Key=manifest_key, Body=json.dumps(data).encode()
    )
    restored = client.restore()
    assert restored is not None and restored.generation == 1
    assert [g for g, _ in restored.refused] == [3, 2]
    assert "does not authenticate" in dict(restored.refused)[2]

    _flip(workload, "units/tamper/generations/000000000001/meta", 30)
    with pytest.raises(NoValidGenerationError) as none:
        client.restore()
    assert [g for g, _ in none.value.refused] == [3, 2, 1]
    assert dict(none.value.refused)[1].startswith("part meta:")


def test_restart_semantics_effects_once_and_quarantine(workload: Workload) -> None:
    reports = Reports()
    client = workload.client("unit-r", reporter=reports)
    client.save({"state": b"halfway"}, step=5)
    resume = UnitRunner(client, "resume", max_failures=2)
    with resume.start() as attempt:
        assert attempt.restored is not None and attempt.restored.step == 5
    requeue = UnitRunner(workload.client("unit-q"), "requeue")
    workload.client("unit-q").save({"state": b"ignored"}, step=3)
    with requeue.start() as attempt:
        assert attempt.restored is None  # an idempotent unit runs again from its start
        published: list[str] = []
        attempt.complete(lambda: published.append("output"))
    with requeue.start() as again:
        assert again.completed  # done already: nothing runs, nothing is published twice
        again.complete(lambda: published.append("output"))
    assert published == ["output"]

    # A unit that fails after each restore is quarantined at the second failure, reported,
    # and refused from then on.
    for _ in range(2):
        with pytest.raises((RuntimeError, UnitQuarantinedError)), resume.start():
            raise RuntimeError("poison input")
    with pytest.raises(UnitQuarantinedError, match="failed 2 times after restores"):
        resume.start()
    (quarantined,) = [m for m in reports.messages if isinstance(m, Quarantined)]
    assert quarantined.unit_id == "unit-r" and quarantined.failed_restores == 2
    assert resume.state().quarantined


def test_an_attempt_that_vanishes_after_a_restore_counts_as_a_failure(workload: Workload) -> None:
    client = workload.client("unit-v")
    client.save({"state": b"x"}, step=1)
    runner = UnitRunner(client, "resume", max_failures=2)
    runner.start()  # never ended: the process was killed without a notice
    runner.start()  # second vanished attempt
    with pytest.raises(UnitQuarantinedError):
        runner.start()


_ALONE = """
import importlib.abc, json, os, sys
BLOCKED = {
    "contracts", "streams", "projections", "agent", "provider", "sim", "replay", "console",
    "spotcap", "infra", "pydantic", "fastavro", "avro", "yaml", "hvac", "requests",
    "confluent_kafka", "faust", "psycopg", "chdb", "clickhouse_connect", "pyarrow", "nats",
    "kubernetes", "prometheus_client", "openstack", "fastapi", "uvicorn", "torch", "pyspark",
}
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED or (
            name.startswith("schemas.") and name != "schemas.checkpoints"
        ):
            raise ImportError(f"the client imported {name}")
        return None
sys.meta_path.insert(0, Refuse())
import boto3
from botocore.config import Config
from checkpoint import CheckpointClient, S3Bucket, TransitKeys
cfg = json.loads(os.environ["CKPT_TEST"])
s3 = boto3.client("s3", endpoint_url=cfg["gw"], aws_access_key_id=cfg["access"],
                  aws_secret_access_key=cfg["secret"], region_name="us-east-1",
                  config=Config(s3={"addressing_style": "path"}))
client = CheckpointClient(cfg["workload"], cfg["unit"], S3Bucket(s3, cfg["bucket"]),
                          TransitKeys(cfg["bao"], cfg["token"], cfg["key"]))
client.save({"state": b"alone"}, step=1)
print(client.restore().parts["state"].decode())
"""


def test_the_client_works_with_nothing_of_the_control_plane_importable(workload: Workload) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _ALONE],
        env=workload.child_env("alone"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "alone"
