"""`spotcap run actuator` and `spotcap run reconciler`: the services of the live topology that
talk to the provider (`provider.actuator`, `provider.reconcile`; docs/operating.md)."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import click

from projections.postgres.connection import FleetDatabaseError
from projections.stores import StoreError
from provider.actuator import MAX_AGE_S, ActuatorOptions, ActuatorStateError, run_actuator
from provider.authority import NoAuthorityError, authority_from_env
from provider.base import ProviderError
from provider.nodes import (
    NodeAuthorityError,
    bundle_service_from_env,
    followed,
    nodes_from_env,
)
from provider.openstack.config import ProviderConfigError
from provider.reconcile import GRACE_S, Reconciler, run_reconciler
from schemas.events import Envelope
from spotcap.cli.options import need_home, postgres_option, with_postgres
from spotcap.cli.output import emit_json, say
from spotcap.config import Settings
from spotcap.fail import fail
from spotcap.wiring import make_codec, open_log, open_provider, stores
from streams.deciders import DeciderSettings
from streams.log import LogError
from streams.writer import EventWriter

PROBLEMS = (ProviderConfigError, ProviderError, ActuatorStateError, LogError, StoreError,
            FleetDatabaseError, NoAuthorityError, NodeAuthorityError, OSError)  # fmt: skip
provider_option = click.option(
    "--provider", "provider_file", required=True, metavar="FILE",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="The provider file: which cloud, its pools, its feeds (docs/providers.md); "
    "`spotcap cloud serve --client-dir DIR` writes DIR/provider.yaml.")  # fmt: skip
OWNER = DeciderSettings().actuator.orchestrator_id
owner_option = click.option(
    "--orchestrator-id", default=OWNER, show_default=True,
    help="The owner tag of spotcap's instances (actuator.orchestrator_id).")  # fmt: skip


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def provider_for(
    settings: Settings, path: Path, owner: str = OWNER, events: list[Envelope] | None = None
) -> Any:
    """The provider of the file at `path`; fails unless it is the region's."""
    on_event = (events if events is not None else []).append
    provider = open_provider(settings, path, owner, on_event)
    if provider.region != settings.region:
        fail(f"{path} is the provider of region {provider.region}, not of {settings.region}.",
             f"pass --region {provider.region}, or {settings.region}'s provider file")  # fmt: skip
    return provider


@click.command("actuator")
@provider_option
@owner_option
@click.option("--state", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Its state folder (default <home>/actuator/<region>): one each.")  # fmt: skip
@click.option("--max-age-s", type=click.FloatRange(1.0), default=MAX_AGE_S, show_default=True,
              help="An order older than this when it could go is refused as stale.")  # fmt: skip
@click.pass_obj
def actuator(settings: Settings, /, provider_file: Path, orchestrator_id: str,
             state: Path | None, max_age_s: float) -> None:  # fmt: skip
    """Carry out the deciders' orders through the provider, each once, until SIGTERM.

    Reads the region's log (Kafka with --kafka, else the home's embedded log), launches and
    deletes as the actuator guard ordered, and writes the provider's answers to the log.
    With SPOTCAP_AUTHORITY_PROJECT (and BAO_ADDR, BAO_TOKEN) it acts with that project's
    short-lived credentials read from OpenBao, and refuses what it has no authority for; with
    SPOTCAP_NODES_PKI_MOUNT it revokes the certificates of the nodes deleted or lost, and with
    SPOTCAP_NODES_DIR too it enrols each node it launched (its identity under that folder).
    """
    need_home(settings, log=True)
    side: list[Envelope] = []
    stop = _stop_on_signals()
    try:
        provider = provider_for(settings, provider_file, orchestrator_id, side)
        authority = authority_from_env(os.environ, settings.region, provider.session)
        if authority is not None:
            say(f"capacity authority: {authority.describe()}", err=True)
        folder = state or settings.home / "actuator" / settings.region
        nodes = nodes_from_env(os.environ, folder)  # revocations durable: survive a crash
        counts = run_actuator(
            open_log(settings, service=True), make_codec(settings), provider, folder,
            orchestrator_id=orchestrator_id, should_stop=stop.is_set, side_events=side,
            options=ActuatorOptions(max_age_s=max_age_s, authority=authority, follower=nodes),
            on_progress=lambda p: say(p.describe(), err=True),
        )  # fmt: skip
    except PROBLEMS as error:
        fail(f"the actuator of region {settings.region} stopped: {error}")
    say(f"actuator stopped: {counts.describe()}")


@click.command("reconciler")
@provider_option
@owner_option
@postgres_option
@click.option("--every-s", type=click.FloatRange(1.0), default=60.0, show_default=True,
              help="Seconds between two rounds.")  # fmt: skip
@click.option("--grace-s", type=click.FloatRange(0.0), default=GRACE_S, show_default=True,
              help="An instance launched more recently is not judged yet.")  # fmt: skip
@click.option("--once", is_flag=True, help="One round: print what differs and stop.")
@click.option("--json", "as_json", is_flag=True, help="With --once: the drifts as JSON.")
@click.pass_obj
def reconciler(settings: Settings, /, provider_file: Path, orchestrator_id: str, *,
               postgres_dsn: str | None, every_s: float, grace_s: float, once: bool,
               as_json: bool) -> None:  # fmt: skip
    """Compare the provider's tags with the fleet state on a clock, and write what differs.

    Lists what the provider runs tagged as spotcap's, reads the fleet state's live instances,
    and writes drift_detected events (an adopted instance's launch, a vanished one's loss)
    to the log. It never deletes anything.
    """
    settings = need_home(with_postgres(settings, postgres_dsn), log=True, fleet=True)
    stop = _stop_on_signals()
    try:
        provider = provider_for(settings, provider_file, orchestrator_id, [])
        log = open_log(settings, service=True)
        writer = EventWriter(log, make_codec(settings), settings.region)
        with stores(settings).open_fleet() as conn:
            rec = Reconciler(provider, conn, writer.write, writer.flush, grace_s=grace_s,
                             reconnect=stores(settings).open_fleet)  # fmt: skip
            if once:
                report = rec.round()
            else:
                run_reconciler(rec, every_s=every_s, should_stop=stop.is_set,
                               on_round=lambda r: say(r.progress(), err=True),
                               on_error=lambda line: say(line, err=True))  # fmt: skip
                return
        writer.close()
    except PROBLEMS as error:
        fail(f"the reconciler of region {settings.region} stopped: {error}")
    if as_json:
        emit_json(report.as_json())
        return
    for line in report.lines():
        say(line)


@click.command("bundles")
@click.option("--bundles", "folder", required=True, type=click.Path(path_type=Path),
              help="The signed bundles: `spotcap contracts compile --key`'s --out.")  # fmt: skip
@click.option("--host", default="127.0.0.1", show_default=True, help="The address it listens on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8443, show_default=True,
              help="The port it listens on.")  # fmt: skip
@click.option("--pki-mount", default="pki", show_default=True,
              help="OpenBao's PKI engine of the nodes' CA (BAO_ADDR, BAO_TOKEN).")  # fmt: skip
@click.pass_obj
def bundles(settings: Settings, /, folder: Path, host: str, port: int, pki_mount: str) -> None:
    """Serve each node its own signed bundle over mutual TLS (each node proves who it is with
    a certificate from the nodes' CA), until SIGTERM; while a canary runs, the bundle
    its pool is on, following the region's log."""
    stop = _stop_on_signals()
    try:
        releases = followed(open_log(settings, service=True), make_codec(settings),
                            settings.region, stop.is_set)  # fmt: skip
        running = bundle_service_from_env(os.environ, folder, host, port, pki_mount,
                                          state_dir=settings.home / "bundles",
                                          releases=releases)  # fmt: skip
    except (NodeAuthorityError, OSError) as error:
        fail(f"the bundle service did not start: {error}")
    say(f"bundle service at {running.address} (mutual TLS, nodes' CA of {pki_mount})", err=True)
    stop.wait()
    running.stop()
