"""The composition root: picks each seam's implementation from the settings."""

from __future__ import annotations

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
    if settings.kafka_bootstrap:
        return f"Kafka at {settings.kafka_bootstrap}"
    return f"embedded log at {settings.log_dir}"
