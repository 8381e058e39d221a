"""Real node agents (`spotcap agent run`) on a few of the live region's instances: each with
its signed bundle, its notices from NATS and the cloud's metadata endpoint, a workload process
to drain on the local path, its spool shipped into the log (``--ship``), and event time from
the cloud's clock anchor (``--clock``), so a notice's deadline means what the cloud meant.

The bundles are the scenario's workloads' contracts (`sim.demo.write_contract_files`) compiled
and signed with a key made for the run (`spotcap contracts keygen`, `spotcap contracts
compile`), as an operator publishes them. The other nodes' agents are simulated
(`tap.SimulatedAgents`), which leaves alone the nodes that run a real one.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

from sim.cloud import ServedCloud
from sim.demo import write_contract_files
from sim.live.processes import SPOTCAP, LiveError, Service, child_env
from sim.region import SimConfig
from streams import children


class RealAgents:
    """The agents started so far, and what they share (bundles, key, clock)."""

    def __init__(self, folder: Path, global_args: list[str], cloud: ServedCloud) -> None:
        self.folder = folder
        self.global_args = global_args
        self.cloud = cloud
        self.agents: dict[str, Service] = {}
        self.workloads: list[subprocess.Popen[bytes]] = []

    def prepare(self, config: SimConfig, catalogue: Path) -> None:
        """The signed bundles of every workload, the key, the clock anchor."""
        contracts, bundles = self.folder / "contracts", self.folder / "bundles"
        write_contract_files(config, contracts)
        key = self.folder / "signer.pem"
        for argv in (
            ["contracts", "keygen", "--out", str(key)],
            ["contracts", "compile", str(contracts), "--out", str(bundles), "--pools",
             str(catalogue), "--key", str(key)],
        ):  # fmt: skip
            done = subprocess.run(
                [SPOTCAP, *argv], env=child_env(), capture_output=True, text=True, check=False
            )
            if done.returncode != 0:
                raise LiveError(f"the agents' bundles: `spotcap {' '.join(argv[:2])}` failed: "
                                f"{done.stderr.strip()[-1500:]}")  # fmt: skip
        anchor = self.cloud.access.clock.to_dict()
        (self.folder / "clock.json").write_text(json.dumps(anchor))

    def start(self, instance_id: str, workload_id: str, pool_id: str) -> None:
        """An agent on `instance_id`, with a workload process of its own to drain."""
        node = self.folder / "nodes" / instance_id
        node.mkdir(parents=True, exist_ok=True)
        marker = f"spotcap-live-workload-{instance_id}"
        self.workloads.append(
            subprocess.Popen(  # it ends with the run, even a run killed
                children.argv([sys.executable, "-c", "import time; time.sleep(86400)", marker]),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        access = self.cloud.access
        bundle = self.folder / "bundles" / f"{workload_id}.bundle.json"
        toml = f"""instance_id = {json.dumps(instance_id)}
region = {json.dumps(access.region)}
state_dir = {json.dumps(str(node / "state"))}
pool_id = {json.dumps(pool_id)}
metrics_listen = ""

[bundle]
path = {json.dumps(str(bundle))}
public_key = {json.dumps(str(self.folder / "signer.pem.pub"))}

[notices]
nats = [{json.dumps(access.nats_url or "")}]
metadata_url = {json.dumps(access.metadata_url)}
poll_interval_s = 0.5

[drain]
safety_margin_s = 1.0

[local]
match_cmdline = [{json.dumps(re.escape(marker))}]
term_grace_s = 2.0
"""
        (node / "agent.toml").write_text(toml)
        argv = [*self.global_args, "agent", "run", "--config", str(node / "agent.toml"), "--ship",
                "--clock", str(self.folder / "clock.json")]  # fmt: skip
        self.agents[instance_id] = Service(
            f"agent-{instance_id}", argv, self.folder / "logs"
        ).start()

    def stop(self) -> dict[str, str]:
        """Stop every agent (SIGTERM) and what is left of the workloads; their last lines."""
        said = {name: service.stop(60.0) for name, service in self.agents.items()}
        for proc in self.workloads:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        self.agents.clear()
        self.workloads.clear()
        return said
