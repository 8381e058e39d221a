"""``spotcap agent``: the node agent (DESIGN.md §6) and its spool.

    spotcap agent run --config /etc/spotcap/agent.toml [--ship] [--speed X]
    spotcap agent check --config FILE [--json]
    spotcap agent spool --config FILE [--json]
    spotcap agent ship --config FILE [--follow] [--json]

``run`` is the long-running agent (systemd: ``infra/agent/spotcap-agent.service``); it needs
no control plane. ``--ship`` also runs the embedded shipper in the same process (the embedded
default, where no Vector runs). ``check`` loads the configuration and the bundle as ``run``
would and says what the node would do. ``spool`` reports the spool; ``ship`` ships it into the
event log (Kafka with ``--kafka``, else the embedded log under ``--home``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent.config import AgentConfig, AgentConfigError, load_config
from agent.spool import ShippedPosition, segments
from spotcap.config import Settings
from spotcap.fail import fail

console = Console()


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


@agent.command("run")
@_CONFIG
@click.option("--ship", is_flag=True, help="Also ship the spool into the event log (embedded).")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="The least severe messages the agent logs.",
)
@click.pass_context
def run_command(ctx: click.Context, config_path: Path, ship: bool, log_level: str) -> None:
    """Run the agent until SIGTERM or Ctrl-C (logs go to stderr, one line per step)."""
    config = _config(config_path)
    logging.basicConfig(
        level=getattr(logging, log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    settings = ctx.find_object(Settings) if ship else None
    if ship and settings is None:
        settings = Settings.load()
    asyncio.run(_run(config, settings))


async def _run(config: AgentConfig, ship_settings: Settings | None) -> None:
    from agent.service import Agent

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ship_stop = threading.Event()
    shipper_thread = None
    async with Agent(config) as node:
        loop.add_signal_handler(signal.SIGHUP, node.bundles.load)  # systemctl reload
        if node.metrics_port is not None:
            logging.getLogger("agent").info(
                "metrics on http://%s/metrics",
                config.metrics_listen.rpartition(":")[0] + f":{node.metrics_port}"
                if config.metrics_listen
                else "",
            )
        if ship_settings is not None:
            shipper_thread = threading.Thread(
                target=_ship_forever,
                args=(config, ship_settings, ship_stop),
                name="spool-shipper",
                daemon=True,
            )
            shipper_thread.start()
        await stop.wait()
    ship_stop.set()
    if shipper_thread is not None:
        shipper_thread.join(10.0)


def _ship_forever(config: AgentConfig, settings: Settings, stop: threading.Event) -> None:
    from spotcap.spool_ship import SpoolShipper
    from spotcap.wiring import make_codec, open_log

    log = logging.getLogger("spotcap.spool_ship")
    event_log = open_log(settings)
    shipper = SpoolShipper(config.spool_dir, event_log, make_codec(settings), config.region)
    try:
        while not stop.is_set():
            try:
                shipper.ship_once()
            except Exception:  # the log may be away; the spool keeps everything meanwhile
                log.exception("shipping the spool failed; retrying in 5 s")
                stop.wait(5.0)
            stop.wait(1.0)
    finally:
        shipper.close()
        event_log.close()


@agent.command("check")
@_CONFIG
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def check_command(config_path: Path, as_json: bool) -> None:
    """Load the configuration and the bundle as `run` would; exit 1 if no bundle verifies."""
    from agent.bundle import BundleStore
    from agent.logind import inhibit_delay_warning

    config = _config(config_path)
    logging.basicConfig(level=logging.ERROR, format="%(message)s", stream=sys.stderr)
    bundle = BundleStore(config.bundle, config.state_dir).load()
    warning = (
        inhibit_delay_warning(config.kubernetes.kubelet_config, config.kubernetes.logind_conf)
        if config.kubernetes.node_name
        else None
    )
    report: dict[str, Any] = {
        "instance_id": config.instance_id,
        "region": config.region,
        "bundle": bundle.model_dump(mode="json") if bundle else None,
        "paths": [
            p
            for p, on in (
                ("kubernetes", config.kubernetes.node_name),
                ("slurm", config.slurm.node_name),
                ("local", True),
            )
            if on
        ],
        "nats": list(config.notices.nats),
        "metadata_url": config.notices.metadata_url,
        "poll_interval_s": config.notices.poll_interval_s,
        "spool_dir": str(config.spool_dir),
        "warnings": [warning] if warning else [],
    }
    refused = (
        f"no bundle verifies: neither {config.bundle.path} nor the last good one in "
        f"{config.state_dir}"
    )
    hint = "write this workload's signed bundle and its public key (spotcap contracts compile)"
    if as_json:
        if bundle is None:
            fail(refused, hint, json_report=report)
        click.echo(json.dumps(report, indent=2, sort_keys=True))
    else:
        table = Table(title=f"agent {config.instance_id} ({config_path})", show_header=False)
        table.add_column("what", style="bold")
        table.add_column("value")
        if bundle:
            table.add_row(
                "bundle",
                f"{bundle.workload_id} v{bundle.contract_version}: {bundle.scheduler}, drain "
                f"budget {bundle.drain_budget_s} s, checkpoint {bundle.checkpoint_method}, "
                f"proactive drain {'on' if bundle.proactive_drain_on_advisory else 'off'}",
            )
        else:
            table.add_row("bundle", "[red]none verifies[/]")
        table.add_row("drain paths", ", ".join(report["paths"]))
        table.add_row("NATS", ", ".join(config.notices.nats) or "off")
        table.add_row(
            "metadata poll",
            f"{config.notices.metadata_url or 'off'} every {config.notices.poll_interval_s:g} s",
        )
        table.add_row("spool", str(config.spool_dir))
        for w in report["warnings"]:
            table.add_row("[yellow]warning[/]", escape(w))
        console.print(table)
        if bundle is None:
            fail(refused, hint)


@agent.command("spool")
@_CONFIG
@click.option("--json", "as_json", is_flag=True, help="Print the segments as JSON.")
def spool_command(config_path: Path, as_json: bool) -> None:
    """The spool's segments, their size, and how far the embedded shipper got."""
    config = _config(config_path)
    found = segments(config.spool_dir)
    shipped = ShippedPosition.load(config.spool_dir)
    rows = [(path.name, path.stat().st_size) for _, path in found]
    if as_json:
        click.echo(
            json.dumps(
                {
                    "dir": str(config.spool_dir),
                    "segments": [{"name": n, "bytes": b} for n, b in rows],
                    "total_bytes": sum(b for _, b in rows),
                    "shipped": dataclasses.asdict(shipped) if shipped else None,
                },
                indent=2,
                sort_keys=True,
            )
        )
        return
    table = Table(title=f"spool {config.spool_dir}")
    table.add_column("segment")
    table.add_column("bytes", justify="right")
    for name, size in rows:
        table.add_row(name, f"{size:,}")
    console.print(table)
    console.print(
        f"total {sum(b for _, b in rows):,} bytes of {config.spool.max_bytes:,}; shipped up to "
        + (f"segment {shipped.segment} byte {shipped.offset:,}" if shipped else "nothing yet")
    )


@agent.command("ship")
@_CONFIG
@click.option("--follow", is_flag=True, help="Keep shipping new lines every second.")
@click.option("--json", "as_json", is_flag=True, help="Print what was shipped as JSON.")
@click.pass_context
def ship_command(ctx: click.Context, config_path: Path, follow: bool, as_json: bool) -> None:
    """Ship the spool into the event log (at least once; consumers de-duplicate by event id)."""
    from spotcap.spool_ship import SpoolShipper
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
        click.echo(json.dumps(dataclasses.asdict(counts), indent=2, sort_keys=True))
        return
    console.print(
        f"shipped {counts.shipped:,} events to the {describe_log(settings)}"
        f" ({counts.dead_lettered:,} unreadable lines dead-lettered)"
    )
    for event_type, n in sorted(counts.by_type.items()):
        console.print(f"  {event_type:<24} {n:>8,}")
