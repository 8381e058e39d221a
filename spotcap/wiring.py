"""The composition root: turns the settings into what each part is handed (the log, the codec,
the stores, the run markers' folder, the archive); no part reads the settings itself."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from projections.stores import Stores
from replay.archive.storage import ArchiveStorage, open_storage
from schemas.codec import Codec
from schemas.events import Envelope
from schemas.registry import HttpSchemaRegistry
from spotcap.config import Settings
from streams import runs
from streams.embedded import EmbeddedLog
from streams.kafka import KafkaLog
from streams.log import EventLog

if TYPE_CHECKING:  # openstacksdk loads slowly: only the commands that act import it
    from provider.openstack import OpenStackProvider


SERVICE_WRITE_WAIT_S = 120.0
"""How long a service of the live topology waits for another writer of the embedded log."""


def open_log(settings: Settings, *, service: bool = False) -> EventLog:
    """Kafka when bootstrap servers are configured, else the embedded log under home; a
    `service` shares the embedded log's writer lock with the other services (per flush)."""
    if settings.kafka_bootstrap:
        return KafkaLog(settings.kafka_bootstrap)
    return EmbeddedLog(settings.log_dir, share_writes_s=SERVICE_WRITE_WAIT_S if service else None)


def make_codec(settings: Settings) -> Codec:
    """Single-object encoding, or the Confluent wire format when a registry is configured."""
    if settings.schema_registry_url:
        return Codec(registry=HttpSchemaRegistry(settings.schema_registry_url))
    return Codec()


def open_log_and_codec(settings: Settings) -> tuple[EventLog, Codec]:
    """The log and the codec of `settings`: what a child process of the demo opens
    (`sim.materialise.Opener`, as a `functools.partial` of this)."""
    return open_log(settings), make_codec(settings)


def describe_log(settings: Settings) -> str:
    """The configured log in words, without opening it."""
    if settings.kafka_bootstrap:
        return f"Kafka at {settings.kafka_bootstrap}"
    return f"embedded log at {settings.log_dir}"


def stores(settings: Settings) -> Stores:
    """The fleet state and the ledger: the configured servers, else embedded under home."""
    return Stores(settings.home, settings.postgres_dsn, settings.clickhouse_url, settings.region)


def runs_dir(settings: Settings) -> Path:
    """Where the run markers of the configured log live (`streams.runs.runs_dir`)."""
    return runs.runs_dir(settings.home, settings.log_dir, settings.kafka_bootstrap)


def archive_location(settings: Settings, location: str | None) -> str:
    """``--archive``, else $SPOTCAP_ARCHIVE, else ``<home>/archive``."""
    return location or os.environ.get("SPOTCAP_ARCHIVE") or str(settings.home / "archive")


def open_archive(
    settings: Settings, location: str | None, *, create: bool = False
) -> ArchiveStorage:
    return open_storage(archive_location(settings, location), create=create)


def open_provider(
    settings: Settings, path: Path, orchestrator_id: str, on_event: Callable[[Envelope], None]
) -> OpenStackProvider:
    """The OpenStack adapter of the provider file at `path`, its mutating calls drawn from the
    actuator's regional budget at the adapter's clock (`streams.actuation.BudgetHook`), whose
    events go to `on_event`. `ProviderConfigError` names what is wrong with the file."""
    from provider.openstack.config import open_openstack
    from streams.actuation import BudgetHook
    from streams.deciders import ActuatorGuard, DeciderSettings

    defaults = DeciderSettings()
    guard = ActuatorGuard(
        replace(defaults, actuator=replace(defaults.actuator, orchestrator_id=orchestrator_id))
    )
    hook = BudgetHook(guard, settings.region, max_wait_s=3600.0, on_event=on_event)
    return hook.follow(open_openstack(path, orchestrator_id=orchestrator_id, acquire=hook))
