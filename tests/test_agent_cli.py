"""`spotcap agent` as an operator runs it: check, run as a process (drains on a notice, serves
its metrics, stops on SIGTERM), spool and ship; the systemd unit and the example configuration
as shipped in infra/agent/."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from agent.config import load_config
from agent.service import describe_bundle, no_bundle
from tests.agent_support import bundle, notice, reap, spool_events, wait_for, workload, write_bundle

REPO = Path(__file__).resolve().parent.parent
SPOTCAP = [sys.executable, "-m", "spotcap.cli"]


def _spotcap(*argv: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    if home is not None:
        env["SPOTCAP_HOME"] = str(home)
    return subprocess.run(
        [*SPOTCAP, *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _write_config(tmp_path: Path, **extra: str) -> Path:
    lines = [
        'instance_id = "i-cli-1"',
        'region = "eu-west-1"',
        f'state_dir = "{tmp_path / "state"}"',
        'metrics_listen = "127.0.0.1:0"',
        "[bundle]",
        f'path = "{tmp_path / "bundle.json"}"',
        f'public_key = "{tmp_path / "bundle.pub"}"',
    ]
    for table, body in extra.items():
        lines += [f"[{table}]", body]
    path = tmp_path / "agent.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_check_says_what_the_node_would_do_and_refuses_a_node_without_a_bundle(
    tmp_path: Path,
) -> None:
    write_bundle(tmp_path, bundle(scheduler="slurm", drain_budget_s=75))
    cfg = _write_config(tmp_path)
    done = _spotcap("agent", "check", "--config", str(cfg), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["bundle"]["drain_budget_s"] == 75 and report["paths"] == ["local"]
    human = _spotcap("agent", "check", "--config", str(cfg))
    assert "etl v3: slurm, drain budget 75 s" in human.stdout
    (tmp_path / "bundle.json").write_bytes(b"{}")
    (tmp_path / "state" / "last-good.bundle.json").unlink()
    refused = _spotcap("agent", "check", "--config", str(cfg))
    assert refused.returncode == 1 and "none verifies" in refused.stdout
    assert "refusing the bundle" in refused.stderr


def test_the_bundle_and_its_absence_in_words(tmp_path: Path) -> None:
    said = describe_bundle(bundle(scheduler="slurm", drain_budget_s=75))
    assert said == ("etl v3: slurm, drain budget 75 s, checkpoint application, proactive drain off")
    assert describe_bundle(bundle(proactive_drain_on_advisory=True)).endswith("drain on")
    config = load_config(_write_config(tmp_path))
    refused, hint = no_bundle(config)
    assert refused == (
        f"no bundle verifies: neither {tmp_path / 'bundle.json'} nor the last good one in "
        f"{tmp_path / 'state'}"
    )
    assert "spotcap contracts compile" in hint


def test_a_bad_configuration_is_one_sentence_naming_the_key(tmp_path: Path) -> None:
    cfg = _write_config(tmp_path, notices="poll_intervall_s = 5")
    done = _spotcap("agent", "run", "--config", str(cfg))
    assert done.returncode == 1
    assert "[notices] poll_intervall_s: unknown key" in done.stderr
    assert "Traceback" not in done.stderr


def test_run_drains_on_a_notice_serves_metrics_and_stops_on_sigterm(tmp_path: Path) -> None:
    import asyncio

    from provider.notices import MetadataServer, NoticeBoard

    marker = f"spotcap-cli-{tmp_path.name}"
    write_bundle(tmp_path)
    proc_wl = workload(marker)
    board = NoticeBoard()

    async def serve_and_check() -> str:
        async with MetadataServer(board) as metadata:
            cfg = _write_config(
                tmp_path,
                notices=f'metadata_url = "{metadata.url}"\npoll_interval_s = 0.1',
                local=f'match_cmdline = ["{marker}"]',
            )
            agent = await asyncio.create_subprocess_exec(
                *SPOTCAP,
                "agent",
                "run",
                "--config",
                str(cfg),
                cwd=REPO,
                stderr=asyncio.subprocess.PIPE,
            )
            assert agent.stderr is not None
            port = None
            while port is None:
                line = (await asyncio.wait_for(agent.stderr.readline(), 30)).decode()
                assert line, "the agent exited before serving its metrics"
                if "metrics on http://" in line:
                    port = int(line.rsplit(":", 1)[1].split("/")[0])
            board.post(notice("i-cli-1", deadline_s=60))
            await asyncio.to_thread(wait_for, lambda: proc_wl.poll() is not None, 20, "the drain")
            await asyncio.sleep(0.3)
            url = f"http://127.0.0.1:{port}/metrics"
            scraped: str = await asyncio.to_thread(
                lambda: str(urllib.request.urlopen(url, timeout=5).read().decode())
            )
            agent.send_signal(signal.SIGHUP)  # systemctl reload: re-read the bundle, live on
            await asyncio.sleep(0.5)
            assert agent.returncode is None
            agent.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(agent.wait(), 30) == 0
            return scraped

    try:
        scraped = asyncio.run(serve_and_check())
    finally:
        reap([proc_wl])
    assert 'spotcap_agent_notices_total{kind="notice",source="metadata"} 1.0' in scraped
    assert 'spotcap_agent_drain_duration_seconds_count{path="local"} 1.0' in scraped
    assert (
        "spotcap_agent_spool_bytes" in scraped
        and "spotcap_agent_drain_overruns_total 0.0" in scraped
    )
    assert 'spotcap_agent_bundle_contract_version{workload="etl"} 3.0' in scraped
    types = [line["event_type"] for line in spool_events(tmp_path / "state" / "spool")]
    assert {"notice_received", "drain_started", "drain_completed"} <= set(types)
    _ship_and_check(tmp_path, len(types))


def _ship_and_check(tmp_path: Path, lines: int) -> None:
    """The embedded shipper puts the spool on the log; a second run ships nothing new."""
    home = tmp_path / "home"
    cfg = tmp_path / "agent.toml"
    unprepared = _spotcap("agent", "ship", "--config", str(cfg), home=home)
    assert unprepared.returncode == 1 and "spotcap topics apply" in unprepared.stderr
    assert "Traceback" not in unprepared.stderr
    _spotcap("--region", "eu-west-1", "topics", "apply", home=home)
    shipped = _spotcap("agent", "ship", "--config", str(cfg), "--json", home=home)
    assert shipped.returncode == 0, shipped.stderr
    assert json.loads(shipped.stdout)["shipped"] == lines
    again = _spotcap("agent", "ship", "--config", str(cfg), "--json", home=home)
    assert json.loads(again.stdout)["shipped"] == 0
    status = json.loads(_spotcap("agent", "spool", "--config", str(cfg), "--json").stdout)
    assert status["shipped"]["segment"] == 1 and status["total_bytes"] > 0


def test_the_example_configuration_loads() -> None:
    config = load_config(REPO / "infra" / "agent" / "agent.example.toml")
    assert config.notices.poll_interval_s == 5.0
    assert config.drain.scheduler_call_timeout_s == 0.8
    assert config.kubernetes.node_name == "node-0412"


def test_the_systemd_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.fail("systemd-analyze is not installed (apt-get install systemd)")
    unit = tmp_path / "spotcap-agent.service"
    text = (REPO / "infra" / "agent" / "spotcap-agent.service").read_text()
    # The unit names the installed binary; point it at this checkout's for the check.
    fake_bin = tmp_path / "spotcap"
    fake_bin.write_text("#!/bin/sh\n")
    fake_bin.chmod(0o755)
    unit.write_text(text.replace("/usr/local/bin/spotcap", str(fake_bin)))
    done = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    problems = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if "spotcap-agent.service" in line
        and "kubelet.service" not in line
        and "slurmd.service" not in line
    ]
    assert done.returncode == 0 or not problems, done.stdout + done.stderr
    assert not problems, problems


def test_the_slurm_server_is_one_of_the_infra_servers_commands(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "infra.servers", "slurm", "status", "--dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3  # known, and not running there
    assert json.loads(done.stdout)["running"] is False
