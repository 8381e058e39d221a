"""Which OpenStack region the services act on: the provider file (``--provider FILE``).

    format: spotcap.openstack-provider/v1
    cloud: spotcap-sim              # an entry of clouds.yaml (openstacksdk's own lookup)
    clouds_yaml: clouds.yaml        # optional: read this clouds.yaml instead
    catalogue: catalogue.yaml       # the region's pool catalogue (schemas.pools)
    pool_mapping: pools.yaml        # the catalogue's pools in Nova's words (mapping.py)
    feed_endpoint: https://feeds.example/v1   # the provider-built feeds (feeds.py)
    clock: wall                     # or a served simulated region's clock anchor

Paths are relative to the provider file. ``clock: wall`` is a real cloud's (events are stamped
with the wall clock); a simulated region served as a cloud (``spotcap cloud serve --client-dir``)
writes its anchor instead (``sim_start_us``, ``wall_start_us``, ``speed``, ``end_us``), and the
adapter stamps its events in the region's time (``now_us``), which runs ``speed`` times as fast
as real time (its ``clock_speed``; the actuator's budget hook sleeps by it). Credentials stay
in clouds.yaml (an application credential, ADR-29), never here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import yaml
from openstack.config import OpenStackConfig
from openstack.connection import Connection
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from provider.openstack.budget import Acquire, unbounded
from provider.openstack.mapping import PoolMapping, PoolMappingError
from provider.openstack.provider import OpenStackProvider
from schemas.pools import PoolCatalogue, PoolCatalogueError

FORMAT = "spotcap.openstack-provider/v1"


class ProviderConfigError(ValueError):
    """The provider file cannot be used; the message names the file and what is wrong."""


class ClockAnchor(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    sim_start_us: int
    wall_start_us: int
    speed: float = Field(gt=0)
    end_us: int

    def now_us(self) -> int:
        """The served region's time now (the server's ``sim.cloud.clock.SpeedClock``)."""
        elapsed_us = max(0, time.time_ns() // 1_000 - self.wall_start_us)
        return min(self.end_us, self.sim_start_us + int(elapsed_us * self.speed))


class ProviderFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    format: str
    cloud: str = Field(min_length=1)
    clouds_yaml: str | None = None
    catalogue: str = Field(min_length=1)
    pool_mapping: str = Field(min_length=1)
    feed_endpoint: str = Field(min_length=1)
    clock: Literal["wall"] | ClockAnchor = "wall"

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(exclude_none=True), sort_keys=False)


def load_provider_file(path: Path) -> ProviderFile:
    try:
        raw: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
        parsed = ProviderFile.model_validate(raw)
    except OSError as error:
        raise ProviderConfigError(f"{path}: cannot be read ({error.strerror})") from error
    except yaml.YAMLError as error:
        raise ProviderConfigError(f"{path}: not YAML: {error}") from error
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in error.errors()
        )
        raise ProviderConfigError(f"{path}: {problems}") from error
    if parsed.format != FORMAT:
        raise ProviderConfigError(f"{path}: format is {parsed.format!r}, expected {FORMAT!r}")
    return parsed


def open_openstack(
    path: Path,
    *,
    orchestrator_id: str,
    acquire: Acquire = unbounded,
    timeout_s: float = 30.0,
) -> OpenStackProvider:
    """The OpenStack adapter the provider file at `path` describes (see the module's doc)."""
    config = load_provider_file(path)
    base = path.parent

    def read(name: str) -> str:
        try:
            return (base / name).read_text(encoding="utf-8")
        except OSError as error:
            raise ProviderConfigError(
                f"{path}: {name} cannot be read ({error.strerror})"
            ) from error

    try:
        catalogue = PoolCatalogue.from_yaml(read(config.catalogue), source=config.catalogue)
        pools = PoolMapping.from_yaml(read(config.pool_mapping), catalogue, config.pool_mapping)
    except (PoolCatalogueError, PoolMappingError) as error:
        raise ProviderConfigError(f"{path}: {error}") from error
    files = [str(base / config.clouds_yaml)] if config.clouds_yaml else None
    try:
        region = OpenStackConfig(config_files=files).get_one(cloud=config.cloud)
    except Exception as error:  # openstacksdk raises its own config errors and KeyError
        where = (
            files[0] if files else "clouds.yaml (OS_CLIENT_CONFIG_FILE, ./, ~/.config/openstack)"
        )
        raise ProviderConfigError(
            f"{path}: cloud {config.cloud!r} is not in {where}: {error}"
        ) from error
    clock: Callable[[], int] = (
        (lambda: time.time_ns() // 1_000) if config.clock == "wall" else config.clock.now_us
    )
    speed = 1.0 if config.clock == "wall" else config.clock.speed
    return OpenStackProvider(
        Connection(config=region, api_timeout=timeout_s),
        orchestrator_id=orchestrator_id,
        pools=pools,
        feed_endpoint=config.feed_endpoint,
        acquire=acquire,
        timeout_s=timeout_s,
        clock=clock,
        clock_speed=speed,
    )
