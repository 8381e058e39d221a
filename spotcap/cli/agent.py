"""`spotcap agent`: the node agent (docs/agent.md) and its spool.

`run` is the long-running agent (systemd: ``infra/agent/spotcap-agent.service``); it needs no
control plane, and with ``--ship`` runs the embedded shipper beside it (where no Vector runs).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import sys
import threading
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from agent.config import AgentConfig, AgentConfigError, load_config
from agent.spool import spool_status
from spotcap.cli.output import console, emit_json, say, show, table
from spotcap.config import Settings
from spotcap.fail import fail


def _config(path: Path) -> AgentConfig:
    try:
        return load_config(path)
    except AgentConfigError as error:
        fail(str(error), "infra/agent/agent.example.toml lists every key with its default")


_CONFIG = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("/etc/spotcap/agent.toml"),
    show_default=True,
    help="The agent's TOML configuration (infra/agent/agent.example.toml lists every key).",
)


@click.group()
def agent() -> None:
    """The node agent: notices in, drains out, every step in the spool."""


# fmt: off
@agent.command("run")
@_CONFIG
@click.option("--ship", is_flag=True, help="Also ship the spool into the event log (embedded).")
@click.option("--clock", "clock_file", type=click.Path(exists=True, dir_okay=False), help="Event "
              "time from a served cloud's clock anchor (JSON), as `spotcap demo --live` runs it.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True, help="The least severe messages the agent logs.")
@click.pass_context
def run_command(ctx: click.Context, config_path: Path, ship: bool, clock_file: str | None,
                log_level: str) -> None:  # fmt: skip
    # fmt: on
    """Run the agent until SIGTERM or Ctrl-C (logs go to stderr, one line per step)."""
    config = _config(config_path)
    logging.basicConfig(
        level=getattr(logging, log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    from agent.clock import AnchoredClock
    from agent.service import run_until_stopped

    settings = (ctx.find_object(Settings) or Settings.load()) if ship else None
    clock = AnchoredClock.from_file(clock_file) if clock_file else None
    asyncio.run(run_until_stopped(config, _shipping(config, settings) if settings else None, clock))


def _shipping(config: AgentConfig, settings: Settings) -> Any:
    """The embedded shipper, to run beside the agent until it stops."""
    from agent.ship import ship_beside
    from spotcap.wiring import make_codec, open_log

    opened = functools.partial(open_log, settings)  # in the shipper's thread
    return ship_beside(config.spool_dir, opened, make_codec(settings), config.region)


@agent.command("check")
@_CONFIG
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def check_command(config_path: Path, as_json: bool) -> None:
    """Load the configuration and the bundle as `run` would; exit 1 if no bundle verifies."""
    from agent.service import check, describe_bundle, no_bundle

    config = _config(config_path)
    logging.basicConfig(level=logging.ERROR, format="%(message)s", stream=sys.stderr)
    bundle, report = check(config)
    refused, hint = no_bundle(config)
    if as_json:
        if bundle is None:
            fail(refused, hint, json_report=report)
        emit_json(report)
        return
    rows = [
        ("bundle", describe_bundle(bundle) if bundle else "[red]none verifies[/]"),
        ("drain paths", ", ".join(report["paths"])),
        ("NATS", ", ".join(config.notices.nats) or "off"),
        (
            "metadata poll",
            f"{config.notices.metadata_url or 'off'} every {config.notices.poll_interval_s:g} s",
        ),
        ("spool", str(config.spool_dir)),
        *(("[yellow]warning[/]", escape(w)) for w in report["warnings"]),
    ]
    shown = table(
        f"agent {config.instance_id} ({config_path})", ("what", "value"), rows, show_header=False
    )
    shown.columns[0].style = "bold"
    show(shown)
    if bundle is None:
        fail(refused, hint)


@agent.command("spool")
@_CONFIG
@click.option("--json", "as_json", is_flag=True, help="Print the segments as JSON.")
def spool_command(config_path: Path, as_json: bool) -> None:
    """The spool's segments, their size, and how far the embedded shipper got."""
    config = _config(config_path)
    status = spool_status(config.spool_dir)
    if as_json:
        emit_json(status)
        return
    rows = ((s["name"], f"{s['bytes']:,}") for s in status["segments"])
    show(table(f"spool {config.spool_dir}", ("segment", "bytes"), rows, right=("bytes",)))
    shipped = status["shipped"]
    console.print(
        f"total {status['total_bytes']:,} bytes of {config.spool.max_bytes:,}; shipped up to "
        + (f"segment {shipped['segment']} byte {shipped['offset']:,}" if shipped else "nothing yet")
    )


@agent.command("ship")
@_CONFIG
@click.option("--follow", is_flag=True, help="Keep shipping new lines every second.")
@click.option("--json", "as_json", is_flag=True, help="Print what was shipped as JSON.")
@click.pass_context
def ship_command(ctx: click.Context, config_path: Path, follow: bool, as_json: bool) -> None:
    """Ship the spool into the event log (at least once; consumers de-duplicate by event id)."""
    from agent.ship import SpoolShipper
    from spotcap.wiring import describe_log, make_codec, open_log
    from streams.log import LogError

    config = _config(config_path)
    settings = ctx.find_object(Settings) or Settings.load()
    event_log = open_log(settings)
    shipper = SpoolShipper(config.spool_dir, event_log, make_codec(settings), config.region)
    try:
        while True:
            shipper.ship_once()
            if not follow:
                break
            threading.Event().wait(1.0)
    except KeyboardInterrupt:
        pass
    except LogError as error:
        fail(f"cannot ship to the {describe_log(settings)}: {error}")
    finally:
        shipper.close()
        event_log.close()
    counts = shipper.counts
    if as_json:
        emit_json(dataclasses.asdict(counts))
        return
    say(
        f"shipped {counts.shipped:,} events to the {describe_log(settings)}"
        f" ({counts.dead_lettered:,} unreadable lines dead-lettered)"
    )
    for event_type, n in sorted(counts.by_type.items()):
        console.print(f"  {event_type:<24} {n:>8,}")
