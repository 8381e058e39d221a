"""The agent's configuration: one TOML file written at launch (ADR-13), read once at start.

Every key is optional except ``instance_id`` and ``region``; ``infra/agent/agent.example.toml``
lists them all with their defaults. An unknown key or a value of the wrong type stops the agent
with one line naming the file, the table and the key, so a typo never silently disables a drain
path. Nothing here reaches the control plane: the agent acts from this file, the signed bundle
and what the node itself can see (DESIGN.md §6).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from schemas.events import PurchaseModel

T = TypeVar("T")


class AgentConfigError(ValueError):
    """The configuration cannot be used; the message says where and how to fix it."""


@dataclass(frozen=True, slots=True)
class BundleConfig:
    path: Path = Path("/etc/spotcap/bundle.json")
    public_key: Path = Path("/etc/spotcap/bundle.pub")
    service_url: str | None = None
    """The bundle service (``https://HOST:PORT``, ADR-31); None: the bundle file is all."""
    ca: Path = Path("/etc/spotcap/nodes-ca.pem")
    """The nodes' CA: the bundle service's certificate must chain to it."""
    certificate: Path = Path("/var/lib/spotcap-agent/node.pem")
    key: Path = Path("/var/lib/spotcap-agent/node.key")
    token: Path = Path("/var/lib/spotcap-agent/node.token")
    """The single-use enrolment token delivered at launch: with no certificate yet, the node
    makes its first key and has it signed against this token (then deletes it)."""
    renew_after: float = 0.5
    """Renew the node certificate once this fraction of its life has passed."""
    fetch_every_s: float = 300.0


@dataclass(frozen=True, slots=True)
class NoticeConfig:
    nats: tuple[str, ...] = ()
    metadata_url: str | None = None
    poll_interval_s: float = 5.0
    http_timeout_s: float = 0.5


@dataclass(frozen=True, slots=True)
class SpoolConfig:
    dir: Path | None = None  # default: <state_dir>/spool
    segment_bytes: int = 4 * 1024 * 1024
    max_bytes: int = 64 * 1024 * 1024
    usage_sample_s: float = 300.0


@dataclass(frozen=True, slots=True)
class DrainConfig:
    safety_margin_s: float = 5.0
    """Every drain step stops this long before the notice deadline."""
    scheduler_call_timeout_s: float = 0.8
    """The cap on each scheduler API call before the local path takes over (ADR-06)."""


@dataclass(frozen=True, slots=True)
class KubernetesConfig:
    node_name: str | None = None
    api_url: str | None = None
    token_file: Path | None = None
    ca_file: Path | None = None
    kubeconfig: Path | None = None
    eviction_rate_per_s: float = 20.0
    eviction_burst: int = 10
    eviction_parallelism: int = 16
    kubelet_config: Path = Path("/var/lib/kubelet/config.yaml")
    logind_conf: Path = Path("/etc/systemd/logind.conf")


@dataclass(frozen=True, slots=True)
class SlurmConfig:
    node_name: str | None = None
    rest_socket: Path | None = None
    api_version: str = "v0.0.38"
    conf: Path | None = None
    bin_dir: Path = Path("/usr/bin")
    signal_grace_s: float = 30.0
    """USR1 first; jobs still running this long after are requeued or sent TERM."""


@dataclass(frozen=True, slots=True)
class LocalConfig:
    match_cmdline: tuple[str, ...] = ()
    match_cgroup: tuple[str, ...] = ()
    term_grace_s: float = 30.0


@dataclass(frozen=True, slots=True)
class CheckpointConfig:
    commands: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Trigger command per checkpoint method (application, spark, pytorch, slurm-requeue)."""
    timeout_s: float = 60.0
    socket: Path | None = None
    """The checkpoint channel's Unix socket (`agent.workloads`); None: no channel."""


@dataclass(frozen=True, slots=True)
class AgentConfig:
    instance_id: str
    region: str
    state_dir: Path = Path("/var/lib/spotcap-agent")
    pool_id: str = "unknown"
    vcpu: int = 0
    purchase_model: PurchaseModel = "reclaimable"
    metrics_listen: str | None = "127.0.0.1:9464"
    bundle: BundleConfig = field(default_factory=BundleConfig)
    notices: NoticeConfig = field(default_factory=NoticeConfig)
    spool: SpoolConfig = field(default_factory=SpoolConfig)
    drain: DrainConfig = field(default_factory=DrainConfig)
    kubernetes: KubernetesConfig = field(default_factory=KubernetesConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    local: LocalConfig = field(default_factory=LocalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    @property
    def spool_dir(self) -> Path:
        return self.spool.dir or self.state_dir / "spool"

    @property
    def producer(self) -> str:
        return f"agent/{self.instance_id}"


class _Table:
    """One TOML table, read key by key; `done` refuses the keys nobody asked for."""

    def __init__(self, source: str, name: str, data: Any) -> None:
        if not isinstance(data, dict):
            raise AgentConfigError(f"{source}: [{name}] must be a table")
        self.source, self.name, self.data = source, name, dict(data)
        self.seen: set[str] = set()

    def where(self, key: str) -> str:
        return f"{self.source}: {key}" if not self.name else f"{self.source}: [{self.name}] {key}"

    def get(self, key: str, kind: type[T] | tuple[type, ...], default: T) -> T:
        self.seen.add(key)
        if key not in self.data:
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise AgentConfigError(f"{self.where(key)} must be {names}, got {value!r}")
        return value  # type: ignore[return-value]

    def path(self, key: str, default: Path | None) -> Path | None:
        value = self.get(key, (str, type(None)), None)
        return Path(value) if value else default

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.get(key, list, [])
        if not all(isinstance(v, str) for v in value):
            raise AgentConfigError(f"{self.where(key)} must be a list of strings")
        return tuple(value)

    def positive(self, key: str, default: float) -> float:
        value = self.get(key, float, default)
        if value <= 0:
            raise AgentConfigError(f"{self.where(key)} must be above 0, got {value}")
        return value

    def table(self, key: str) -> _Table:
        self.seen.add(key)
        return _Table(self.source, key, self.data.get(key, {}))

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            raise AgentConfigError(
                f"{self.where(unknown[0])}: unknown key (see infra/agent/agent.example.toml)"
            )


def _required_path(table: _Table, key: str, default: Path) -> Path:
    found = table.path(key, default)
    assert found is not None
    return found


def parse_config(data: dict[str, Any], source: str = "agent config") -> AgentConfig:
    """The configuration in an already-parsed TOML document."""
    top = _Table(source, "", data)
    instance_id = top.get("instance_id", str, "")
    region = top.get("region", str, "")
    if not instance_id or not region:
        raise AgentConfigError(f"{source}: instance_id and region are required")
    purchase_model = top.get("purchase_model", str, "reclaimable")
    if purchase_model not in ("reclaimable", "guaranteed", "committed"):
        raise AgentConfigError(f"{source}: purchase_model {purchase_model!r} is not known")
    metrics = top.get("metrics_listen", str, "127.0.0.1:9464")

    b = top.table("bundle")
    bundle = BundleConfig(
        path=_required_path(b, "path", BundleConfig().path),
        public_key=_required_path(b, "public_key", BundleConfig().public_key),
        service_url=b.get("service_url", (str, type(None)), None) or None,
        ca=_required_path(b, "ca", BundleConfig().ca),
        certificate=_required_path(b, "certificate", BundleConfig().certificate),
        key=_required_path(b, "key", BundleConfig().key),
        token=_required_path(b, "token", BundleConfig().token),
        renew_after=b.positive("renew_after", 0.5),
        fetch_every_s=b.positive("fetch_every_s", 300.0),
    )
    if bundle.service_url is not None and not bundle.service_url.startswith("https://"):
        raise AgentConfigError(f"{source}: [bundle] service_url is https://HOST:PORT (mutual TLS)")
    if bundle.renew_after >= 1:
        raise AgentConfigError(f"{source}: [bundle] renew_after is a fraction below 1")
    n = top.table("notices")
    notices = NoticeConfig(
        nats=n.strings("nats"),
        metadata_url=n.get("metadata_url", (str, type(None)), None) or None,
        poll_interval_s=n.positive("poll_interval_s", 5.0),
        http_timeout_s=n.positive("http_timeout_s", 0.5),
    )
    s = top.table("spool")
    spool = SpoolConfig(
        dir=s.path("dir", None),
        segment_bytes=s.get("segment_bytes", int, SpoolConfig().segment_bytes),
        max_bytes=s.get("max_bytes", int, SpoolConfig().max_bytes),
        usage_sample_s=s.positive("usage_sample_s", 300.0),
    )
    if spool.segment_bytes < 4096 or spool.max_bytes < 2 * spool.segment_bytes:
        raise AgentConfigError(
            f"{source}: [spool] segment_bytes must be >= 4096 and max_bytes >= 2 segments"
        )
    d = top.table("drain")
    drain = DrainConfig(
        safety_margin_s=d.get("safety_margin_s", float, 5.0),
        scheduler_call_timeout_s=d.positive("scheduler_call_timeout_s", 0.8),
    )
    k = top.table("kubernetes")
    kubernetes = KubernetesConfig(
        node_name=k.get("node_name", (str, type(None)), None),
        api_url=k.get("api_url", (str, type(None)), None),
        token_file=k.path("token_file", None),
        ca_file=k.path("ca_file", None),
        kubeconfig=k.path("kubeconfig", None),
        eviction_rate_per_s=k.positive("eviction_rate_per_s", 20.0),
        eviction_burst=k.get("eviction_burst", int, 10),
        eviction_parallelism=k.get("eviction_parallelism", int, 16),
        kubelet_config=_required_path(k, "kubelet_config", KubernetesConfig().kubelet_config),
        logind_conf=_required_path(k, "logind_conf", KubernetesConfig().logind_conf),
    )
    sl = top.table("slurm")
    slurm = SlurmConfig(
        node_name=sl.get("node_name", (str, type(None)), None),
        rest_socket=sl.path("rest_socket", None),
        api_version=sl.get("api_version", str, "v0.0.38"),
        conf=sl.path("conf", None),
        bin_dir=_required_path(sl, "bin_dir", SlurmConfig().bin_dir),
        signal_grace_s=sl.positive("signal_grace_s", 30.0),
    )
    lo = top.table("local")
    local = LocalConfig(
        match_cmdline=lo.strings("match_cmdline"),
        match_cgroup=lo.strings("match_cgroup"),
        term_grace_s=lo.positive("term_grace_s", 30.0),
    )
    c = top.table("checkpoint")
    timeout_s = c.positive("timeout_s", 60.0)
    channel_socket = c.path("socket", None)
    commands = {
        method: c.strings(method)
        for method in ("application", "spark", "pytorch", "slurm-requeue")
        if method in c.data
    }
    for table in (b, n, s, d, k, sl, lo, c):
        table.done()
    config = AgentConfig(
        instance_id=instance_id,
        region=region,
        state_dir=_required_path(top, "state_dir", Path("/var/lib/spotcap-agent")),
        pool_id=top.get("pool_id", str, "unknown"),
        vcpu=top.get("vcpu", int, 0),
        purchase_model=purchase_model,  # type: ignore[arg-type]
        metrics_listen=metrics or None,
        bundle=bundle,
        notices=notices,
        spool=spool,
        drain=drain,
        kubernetes=kubernetes,
        slurm=slurm,
        local=local,
        checkpoint=CheckpointConfig(commands=commands, timeout_s=timeout_s, socket=channel_socket),
    )
    top.done()
    return config


def load_config(path: Path) -> AgentConfig:
    """The configuration in the TOML file at `path`."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as error:
        raise AgentConfigError(f"cannot read {path}: {error.strerror or error}") from error
    except tomllib.TOMLDecodeError as error:
        raise AgentConfigError(f"{path}: not valid TOML: {error}") from error
    return parse_config(data, str(path))
