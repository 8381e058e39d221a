"""`spotcap cloud serve` as an operator runs it: a process of its own that prints its access as
one JSON line, is driven by the OpenStack adapter from a clouds.yaml written from that line, and
stops on SIGTERM with its summary; no secret on stderr."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
from pathlib import Path
from typing import Any

import requests
import yaml
from openstack.config import OpenStackConfig
from openstack.connection import Connection

from provider.base import OWNER_TAG, LaunchRequest, owned_tags
from provider.openstack import OpenStackProvider, PoolMapping
from schemas.pools import PoolCatalogue
from sim.cloud import CLOUD_NAME, SpeedClock
from tests.cli_support import SPOTCAP

PASSWORD = "a password nobody should see in a log"
START_S = 120.0  # a bound: the region compiles its contracts and listens within a second or two


def _line(process: subprocess.Popen[str], timeout_s: float) -> str:
    """The next line on the process's stdout, waiting at most `timeout_s`."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout_s):
            raise AssertionError(f"no line from spotcap cloud serve within {timeout_s} s")
    return process.stdout.readline()


def test_the_command_serves_a_cloud_the_adapter_drives_from_a_clouds_yaml(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTCAP_", "OS_"))}
    env["SPOTCAP_CLOUD_PASSWORD"] = PASSWORD
    command = [SPOTCAP, "--region", "eu9", "cloud", "serve", "--speed", "600", "--days", "1",
               "--seed", "3", "--workloads", "20"]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        access: dict[str, Any] = json.loads(_line(process, START_S))
        assert access["password"] == PASSWORD and access["region"] == "eu9"

        clouds_yaml = tmp_path / "clouds.yaml"
        clouds_yaml.write_text(yaml.safe_dump({"clouds": access["clouds"]}))
        region = OpenStackConfig(config_files=[str(clouds_yaml)]).get_one(cloud=CLOUD_NAME)
        catalogue = PoolCatalogue.from_yaml(requests.get(access["catalogue_url"], timeout=30).text)
        mapping = PoolMapping.from_yaml(
            requests.get(access["pool_mapping_url"], timeout=30).text, catalogue
        )
        provider = OpenStackProvider(
            Connection(config=region),
            orchestrator_id="orch-eu9",
            pools=mapping,
            feed_endpoint=access["feed_endpoint"],
            clock=SpeedClock.from_anchor(access["clock"]).now_us,
        )
        pool = next(p for p in sorted(catalogue, key=lambda p: p.pool_id)
                    if p.purchase_model == "reclaimable")  # fmt: skip
        launched = provider.launch(
            LaunchRequest(pool.pool_id, "wl-1", owned_tags("orch-eu9", "wl-1"))
        )
        assert [i.instance_id for i in provider.list_by_tag(OWNER_TAG, "orch-eu9")] == [
            launched.instance_id
        ]
        kinds = {e.event_type for e in provider.poll_events()}
        assert {"instance_launched", "rate_card", "forward_capacity"} <= kinds
        assert access["clock"]["speed"] == 600 and catalogue.region == "eu9"
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=START_S)
    assert process.returncode == 0, err[-2000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["region"] == "eu9" and summary["servers"] == 1
    assert summary["events_by_type"]["instance_launched"] == 1
    assert summary["now_us"] > summary["start_us"] and not summary["ended"]
    for secret in (PASSWORD, access["application_credential_secret"]):
        assert secret not in err


def test_the_served_days_end_the_command() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTCAP_", "OS_"))}
    done = subprocess.run(
        [SPOTCAP, "cloud", "serve", "--speed", "86400", "--days", "0.5", "--workloads", "0"],
        capture_output=True, text=True, env=env, timeout=START_S + 60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    access, summary = (json.loads(line) for line in done.stdout.strip().splitlines())
    assert summary["ended"] and summary["now_us"] == summary["end_us"]
    assert summary["end_us"] - summary["start_us"] == 12 * 3600 * 1_000_000
    assert access["clock"]["end_us"] == summary["end_us"]
