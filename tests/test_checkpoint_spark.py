"""Spark through the checkpoint client (ADR-18): a Structured Streaming query in pyspark's local
mode (the machine's Java 17) saves its progress through the client on the real versitygw and
OpenBao after each micro-batch; its driver and JVM are killed (SIGKILL to the process group)
mid-run and its local disk thrown away, as a reclaim would; a new run on a fresh disk restores
the query's checkpoint folder and finishes, every input counted exactly once."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from infra import servers
from tests.checkpoint_support import make_workload

REPO = Path(__file__).resolve().parent.parent
FILES = 6


def _inputs(folder: Path) -> dict[int, int]:
    """One JSON file per micro-batch; file i holds the numbers i*10+1 .. i*10+i+1."""
    folder.mkdir()
    expected = {}
    for i in range(FILES):
        numbers = [i * 10 + k for k in range(1, i + 2)]
        path = folder / f"part-{i:02d}.json"
        path.write_text("".join(json.dumps({"n": n}) + "\n" for n in numbers))
        os.utime(path, (1_800_000_000 + i, 1_800_000_000 + i))  # the order Spark reads them
        expected[i] = sum(numbers)
    return expected


def _run(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.checkpoint_spark_job"], env=env, cwd=REPO,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


def test_a_killed_streaming_query_resumes_from_the_client_and_counts_each_input_once(
    tmp_path: Path, versitygw: servers.Server, openbao: servers.Server
) -> None:
    wl = make_workload(versitygw, openbao)
    expected = _inputs(tmp_path / "input")
    local = tmp_path / "node-disk"
    env = wl.child_env("stream", input=str(tmp_path / "input"), local=str(local), batch_s=1.0)
    env["SPARK_LOCAL_DIRS"] = str(tmp_path / "spark-scratch")

    first = _run(env)
    assert first.stdout is not None
    seen: list[dict[str, int]] = []
    try:
        for raw in first.stdout:
            line = json.loads(raw)
            if "batch" in line:
                seen.append(line)
                if line["batch"] == 2:  # its generation is saved: kill driver and JVM
                    os.killpg(first.pid, signal.SIGKILL)
                    break
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        first.wait(60)
        # what it printed before dying (on a loaded machine it may have gone a batch further)
        seen.extend(line for line in map(json.loads, first.stdout) if "batch" in line)
        first.stdout.close()
    last = seen[-1]["batch"]
    assert [s["batch"] for s in seen] == list(range(last + 1)) and 2 <= last < FILES - 1
    shutil.rmtree(local)  # the reclaimed node's disk is gone

    second = _run(env)
    lines = [json.loads(raw) for raw in second.communicate(timeout=600)[0].splitlines()]
    assert second.returncode == 0
    resumed = lines[0]["resumed_from"]
    assert resumed in (last, last + 1)  # the kill may fall between a save and its line
    rerun = [line["batch"] for line in lines if "batch" in line]
    # the newest saved batch was saved inside its foreachBatch, before Spark committed it: it
    # runs again with the same data and batch id, and its result replaces itself
    assert rerun == list(range(resumed, FILES))
    results = {int(k): v for k, v in lines[-1]["results"].items()}
    assert {b: r["total"] for b, r in results.items()} == expected
    assert {b: r["rows"] for b, r in results.items()} == {i: i + 1 for i in range(FILES)}
