"""The composition root: turns the settings into what each part is handed (the log, the codec,
the stores, the run markers' folder, the archive); no part reads the settings itself."""

from __future__ import annotations

import os
import re
from pathlib import Path

from projections.stores import Stores
from replay.archive.storage import ArchiveStorage, open_storage
from schemas.codec import Codec
from schemas.registry import HttpSchemaRegistry
from spotcap.config import Settings
from streams.embedded import EmbeddedLog
from streams.kafka import KafkaLog
from streams.log import EventLog


def open_log(settings: Settings) -> EventLog:
    """Kafka when bootstrap servers are configured, else the embedded log under home."""
    if settings.kafka_bootstrap:
        return KafkaLog(settings.kafka_bootstrap)
    return EmbeddedLog(settings.log_dir)


def make_codec(settings: Settings) -> Codec:
    """Single-object encoding, or the Confluent wire format when a registry is configured."""
    if settings.schema_registry_url:
        return Codec(registry=HttpSchemaRegistry(settings.schema_registry_url))
    return Codec()


def describe_log(settings: Settings) -> str:
    """The configured log in words, without opening it."""
    if settings.kafka_bootstrap:
        return f"Kafka at {settings.kafka_bootstrap}"
    return f"embedded log at {settings.log_dir}"


def stores(settings: Settings) -> Stores:
    """The fleet state and the ledger: the configured servers, else embedded under home."""
    return Stores(settings.home, settings.postgres_dsn, settings.clickhouse_url, settings.region)


def runs_dir(settings: Settings) -> Path:
    """Where the run markers of the configured log live (`streams.runs`)."""
    if settings.kafka_bootstrap:
        name = re.sub(r"[^A-Za-z0-9.-]+", "_", settings.kafka_bootstrap)
        return settings.home / "runs" / f"kafka-{name}"
    return settings.log_dir / "_runs"


def archive_location(settings: Settings, location: str | None) -> str:
    """``--archive``, else $SPOTCAP_ARCHIVE, else ``<home>/archive``."""
    return location or os.environ.get("SPOTCAP_ARCHIVE") or str(settings.home / "archive")


def open_archive(
    settings: Settings, location: str | None, *, create: bool = False
) -> ArchiveStorage:
    return open_storage(archive_location(settings, location), create=create)
