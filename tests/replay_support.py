"""Histories for the replay and archive tests: a simulated region written to an embedded log
and projected into the ledger, as `spotcap demo` then `spotcap project ledger` do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from sim.clock import DAY_US, EPOCH_US
from sim.region import SimConfig
from spotcap.cli import main
from spotcap.config import Settings
from tests.home import project, run_demo

NOV_29_US = EPOCH_US + 27 * DAY_US  # 2026-11-29T00:00Z: three days span two months
OCT_30_US = EPOCH_US - 3 * DAY_US  # 2026-10-30T00:00Z: two months that are over


class History:
    """A home holding a simulated region's log and its ledger."""

    def __init__(self, root: Path, config: SimConfig) -> None:
        self.root = root
        self.settings = Settings.load(home=root, region=config.region)
        self.args = ["--home", str(root), "--region", config.region]
        run_demo(self.settings, config)
        project(self.settings, "ledger")

    def cli(self, *args: str, code: int = 0) -> str:
        result = CliRunner().invoke(main, [*self.args, *args], catch_exceptions=False)
        assert result.exit_code == code, result.output
        return result.output

    def json(self, *args: str, code: int = 0) -> Any:
        """The command's --json, from its stdout alone (a notice may go to stderr)."""
        result = CliRunner().invoke(main, [*self.args, *args, "--json"], catch_exceptions=False)
        assert result.exit_code == code, result.output
        return json.loads(result.stdout)


def small_config(
    region: str = "rp", days: float = 3, workloads: int = 30, start_us: int = NOV_29_US
) -> SimConfig:
    """A small region over the turn of November 2026 (two months for the archive's chain)."""
    return SimConfig(seed=3, days=days, region=region, workloads=workloads, start_us=start_us)
