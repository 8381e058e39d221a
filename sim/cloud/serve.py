"""The served cloud, composed: the region on its clock, Keystone, Nova, Placement, Blazar, the
feeds and ``/sim/v1`` on one HTTP port, the notices on NATS and the metadata endpoint, and the
driver that keeps the region up with its clock between calls.

    with ServedCloud(CloudConfig(SimConfig(seed=1, days=1), speed=600, nats_url=url)) as cloud:
        access = cloud.access        # auth URL, credentials, feed endpoint, clock anchor
        ...                          # drive it with OpenStackProvider(Connection(**access...))

`serve_cloud` is the command's one call (`spotcap cloud serve`): it serves until the region's
days are over, SIGTERM or Ctrl-C, and hands `ready` the access JSON first.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from provider.openstack.config import FORMAT as PROVIDER_FORMAT
from provider.openstack.config import ClockAnchor as ProviderClock
from provider.openstack.config import ProviderFile
from schemas.events import Advisory, InstanceDeleted, InstanceLost, NoticeReceived
from schemas.pools import PoolCatalogue
from sim.cloud.blazar import Leases
from sim.cloud.clock import ClockAnchor
from sim.cloud.errors import CloudError
from sim.cloud.feeds import Feeds
from sim.cloud.http import CloudHTTPServer, Request, Response, route
from sim.cloud.keystone import CloudCredentials, Identity
from sim.cloud.nova import Nova
from sim.cloud.outlet import NoticeOutlet
from sim.cloud.placement import Placement
from sim.cloud.region import CloudRegion
from sim.cloud.status import Status
from sim.region import SimConfig

CLOUD_NAME = "spotcap-sim"


@dataclass(frozen=True)
class CloudConfig:
    """What a served cloud is: the simulated region, how fast its clock runs, where it listens."""

    sim: SimConfig
    speed: float = 60.0
    """Sim seconds per wall second."""
    host: str = "127.0.0.1"
    port: int = 0
    metadata_host: str = "127.0.0.1"
    metadata_port: int = 0
    nats_url: str | None = None
    """Where notices are published (None: the metadata endpoint only)."""
    credentials: CloudCredentials | None = field(default=None, repr=False)
    """None: drawn at start."""
    mark_s: int = 3600
    min_step_s: float = 0.005
    """The driver advances the region at most this often (wall seconds) ..."""
    max_step_s: float = 0.25
    """... and at least this often."""


@dataclass(frozen=True)
class CloudAccess:
    """How to reach a served cloud: printed once, on stdout, by `spotcap cloud serve`."""

    base_url: str
    region: str
    credentials: CloudCredentials = field(repr=False)
    metadata_url: str
    nats_url: str | None
    clock: ClockAnchor

    @property
    def auth_url(self) -> str:
        return f"{self.base_url}/v3"

    @property
    def feed_endpoint(self) -> str:
        return f"{self.base_url}/feed"

    def connection_options(self, *, application_credential: bool = True) -> dict[str, Any]:
        """Keyword arguments of ``openstack.connection.Connection`` for this cloud."""
        c = self.credentials
        options: dict[str, Any] = {
            "auth_url": self.auth_url,
            "region_name": self.region,
            "identity_interface": "public",
        }
        if application_credential:
            return options | {
                "auth_type": "v3applicationcredential",
                "application_credential_id": c.application_credential_id,
                "application_credential_secret": c.application_credential_secret,
            }
        return options | {
            "auth_type": "password",
            "username": c.username,
            "password": c.password,
            "project_name": c.project_name,
            "user_domain_name": "Default",
            "project_domain_name": "Default",
        }

    def clouds(self) -> dict[str, Any]:
        """The ``clouds:`` entries of a clouds.yaml for this cloud (application credential, as
        ADR-29 has it, and password)."""
        entries = {}
        for name, appcred in ((CLOUD_NAME, True), (f"{CLOUD_NAME}-password", False)):
            options = self.connection_options(application_credential=appcred)
            auth_type = options.pop("auth_type")
            region = options.pop("region_name")
            options.pop("identity_interface")
            entries[name] = {
                "auth_type": auth_type,
                "auth": options,
                "region_name": region,
                "identity_api_version": 3,
            }
        return entries

    def to_json(self) -> dict[str, Any]:
        c = self.credentials
        return {
            "auth_url": self.auth_url,
            "region": self.region,
            "project_name": c.project_name,
            "username": c.username,
            "password": c.password,
            "application_credential_id": c.application_credential_id,
            "application_credential_secret": c.application_credential_secret,
            "clouds": self.clouds(),
            "feed_endpoint": self.feed_endpoint,
            "metadata_url": self.metadata_url,
            "nats_url": self.nats_url,
            "clock": self.clock.to_dict(),
            "status_url": f"{self.base_url}/sim/v1/status",
            "catalogue_url": f"{self.base_url}/sim/v1/catalogue",
            "pool_mapping_url": f"{self.base_url}/sim/v1/pool-mapping",
        }


class ServedCloud:
    """A simulated region served behind the OpenStack API subset; a context manager."""

    def __init__(self, config: CloudConfig) -> None:
        self.config = config
        self.credentials = config.credentials or CloudCredentials.generate()
        self.region = CloudRegion(config.sim, config.speed, mark_s=config.mark_s)
        self.identity = Identity(self.credentials, config.sim.region)
        self.leases = Leases(self.region, self.credentials)
        self.nova = Nova(self.region, self.leases, self.credentials)
        self.placement = Placement(self.region, self.leases)
        self.feeds = Feeds(self.region)
        self.status = Status(self.region)
        self.outlet = NoticeOutlet(
            config.nats_url, host=config.metadata_host, port=config.metadata_port
        )
        routes = [
            route("GET", "/v3", self._identity_version, auth=False),
            route("POST", "/v3/auth/tokens", self._token, auth=False),
            route("POST", "/v3/users/([0-9a-f]+)/application_credentials", self._appcred),
            *self.nova.routes(),
            *self.placement.routes(),
            *self.leases.routes(),
            *self.feeds.routes(),
            *self.status.routes(),
        ]
        self.http = CloudHTTPServer(
            routes, self.identity, host=config.host, port=config.port, around=self._at_now
        )
        self._stop = threading.Event()
        self._driver: threading.Thread | None = None
        self._failure: Exception | None = None
        self._access: CloudAccess | None = None

    @property
    def access(self) -> CloudAccess:
        if self._access is None:
            raise RuntimeError("the cloud is not started")
        return self._access

    def start(self) -> CloudAccess:
        self.outlet.start()
        for kind in (NoticeReceived, Advisory, InstanceLost, InstanceDeleted):
            self.region.on(kind.EVENT_TYPE, self.outlet.deliver)
        self.region.open()
        self.http.start()
        self._driver = threading.Thread(target=self._drive, name="cloud-driver", daemon=True)
        self._driver.start()
        self._access = CloudAccess(
            base_url=self.http.base_url,
            region=self.config.sim.region,
            credentials=self.credentials,
            metadata_url=self.outlet.metadata_url,
            nats_url=self.config.nats_url,
            clock=self.region.clock.anchor,
        )
        return self._access

    def wait(self, stop: threading.Event | None = None, poll_s: float = 0.5) -> None:
        """Until the region's days are over or `stop` is set (Ctrl-C reaches the caller); what
        stopped the region's driver, if it failed, is raised here."""
        while not self._stop.is_set() and not (stop is not None and stop.is_set()):
            self._stop.wait(poll_s)
        if self._failure is not None:
            raise self._failure

    def close(self) -> None:
        self._stop.set()
        if self._driver is not None:
            self._driver.join(10.0)
            self._driver = None
        self.http.close()
        self.outlet.close()

    def summary(self) -> dict[str, Any]:
        counts = self.outlet.counts
        return self.status.summary() | {
            "servers": len(self.nova.servers),
            "requests": self.http.requests,
            "tokens_issued": self.identity.issued,
            "tokens_refused": self.identity.refused,
            "notices_published": counts.notices,
            "advisories_published": counts.advisories,
            "relay_failures": counts.relay_failures,
        }

    def __enter__(self) -> ServedCloud:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- inside -------------------------------------------------------------------------------

    def _at_now(self, call: Callable[[], Response]) -> Response:
        """Every call acts at the sim time it arrives: the region is advanced first."""
        with self.region.lock:
            self.region.advance()
            return call()

    def _drive(self) -> None:
        config, region = self.config, self.region
        try:
            while not self._stop.is_set():
                if region.advance() >= config.sim.end_us:
                    return  # the days are over: `wait` returns
                due = region.next_due_us
                wait_s = config.max_step_s if due is None else region.clock.wall_s_until(due)
                self._stop.wait(min(config.max_step_s, max(config.min_step_s, wait_s)))
        except Exception as error:  # the region cannot go on: `wait` raises it
            self._failure = error
        finally:
            self._stop.set()

    def _identity_version(self, request: Request, match: Any) -> Response:
        return Response(200, self.identity.version(request.base_url))

    def _token(self, request: Request, match: Any) -> Response:
        body = request.json(_bad_auth)
        token, document = self.identity.issue(body, request.base_url)
        return Response(201, document, {"X-Subject-Token": token})

    def _appcred(self, request: Request, match: Any) -> Response:
        if request.principal is None:  # the route checks the token first
            raise _bad_auth("no token")
        body = request.json(_bad_auth)
        created = self.identity.create_application_credential(request.principal, match[1], body)
        return Response(201, created)


def _bad_auth(why: str) -> CloudError:
    return CloudError(400, {"error": {"code": 400, "message": why, "title": "Bad Request"}})


def serve_cloud(
    *,
    region: str,
    seed: int,
    days: float,
    workloads: int,
    speed: float,
    nats_url: str | None,
    port: int,
    password: str | None,
    catalogue: Path | None = None,
    client_dir: Path | None = None,
    ready: Callable[[str], None],
    stop: threading.Event | None = None,
) -> dict[str, Any]:
    """Serve the simulated region of these options until its days are over (or SIGTERM, or
    Ctrl-C, which reaches the caller); `ready` gets the access as one line of JSON once the
    cloud answers (and `client_dir`, when given, the files a client needs:
    `write_client_files`). The summary of the run is returned."""
    sim = SimConfig(seed=seed, days=days, workloads=workloads, region=region)
    if catalogue is not None:
        loaded = PoolCatalogue.load(catalogue)
        sim = replace(sim, region=loaded.region, catalogue=loaded)
    credentials = CloudCredentials.generate(password=password)
    config = CloudConfig(sim, speed, port=port, nats_url=nats_url, credentials=credentials)
    stop = stop or threading.Event()
    with _stopped_by_sigterm(stop), ServedCloud(config) as cloud:
        if client_dir is not None:
            write_client_files(cloud, client_dir)
        ready(json.dumps(cloud.access.to_json(), sort_keys=True))
        cloud.wait(stop)
        return cloud.summary()


def write_client_files(cloud: ServedCloud, folder: Path) -> Path:
    """Write what a service needs to act on `cloud` through the OpenStack adapter into
    `folder`: ``clouds.yaml`` (its application credential and password entries, mode 0600),
    ``catalogue.yaml``, ``pools.yaml`` (the pool mapping) and ``provider.yaml`` (the provider
    file, `provider.openstack.config`, with the cloud's clock anchor); returns the provider
    file's path."""
    access = cloud.access
    folder.mkdir(parents=True, exist_ok=True)
    clouds = folder / "clouds.yaml"
    clouds.touch(mode=0o600)
    clouds.chmod(0o600)
    clouds.write_text(yaml.safe_dump({"clouds": access.clouds()}, sort_keys=False))
    (folder / "catalogue.yaml").write_text(cloud.region.sim.catalogue.to_yaml())
    (folder / "pools.yaml").write_text(cloud.region.names.pool_mapping_yaml())
    provider = ProviderFile(
        format=PROVIDER_FORMAT,
        cloud=CLOUD_NAME,
        clouds_yaml="clouds.yaml",
        catalogue="catalogue.yaml",
        pool_mapping="pools.yaml",
        feed_endpoint=access.feed_endpoint,
        clock=ProviderClock(**access.clock.to_dict()),
    )
    path = folder / "provider.yaml"
    path.write_text(provider.to_yaml())
    return path


@contextlib.contextmanager
def _stopped_by_sigterm(stop: threading.Event) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
