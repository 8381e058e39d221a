"""A home's parts, as the command line wires them (`spotcap.wiring`), for tests that drive a
part over a home: the demo into its log, the projections caught up from it."""

from __future__ import annotations

from typing import Any

from projections.catchup import RunReport, Which, catch_up, open_writer
from sim.demo import run_demo as run_demo_on
from sim.region import SimConfig
from spotcap.config import Settings
from spotcap.wiring import make_codec, open_log, runs_dir, stores


def run_demo(settings: Settings, config: SimConfig, **options: Any) -> dict[str, Any]:
    """`sim.demo.run_demo` into the home's log (`options` as it takes them)."""
    log = open_log(settings)
    try:
        return run_demo_on(log, make_codec(settings), runs_dir(settings), config, **options)
    finally:
        log.close()


def project(settings: Settings, which: Which, *, fresh: bool = False) -> RunReport:
    """One projection of the home caught up with its log (with `fresh`, rebuilt)."""
    log = open_log(settings)
    try:
        writer = open_writer(stores(settings), which, fresh=fresh)
        return catch_up(log, make_codec(settings), settings.region, writer)
    finally:
        log.close()
