"""The agent's Prometheus metrics, served on a local port (scraped by the node's Prometheus agent).

One registry per agent, so that many agents can live in one process (the benchmark) and a test
reads exactly its own agent's figures.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import get_args
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from schemas.events import DrainPath, NoticeSource

DRAIN_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 90.0, 120.0)


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._server: WSGIServer | None = None
        r = self.registry
        self.notices = Counter(
            "spotcap_agent_notices",
            "Notices and advisories received, first copy only, by the channel that was first.",
            ["source", "kind"],
            registry=r,
        )
        self.duplicates = Counter(
            "spotcap_agent_notice_duplicates",
            "Later copies of a notice or advisory ignored, by the channel that brought them.",
            ["source"],
            registry=r,
        )
        self.drain_duration = Histogram(
            "spotcap_agent_drain_duration_seconds",
            "Seconds from drain start to verified (or given-up) completion, by drain path.",
            ["path"],
            buckets=DRAIN_BUCKETS_S,
            registry=r,
        )
        self.notice_to_signal = Histogram(
            "spotcap_agent_notice_to_drain_signal_seconds",
            "Seconds from receiving a notice to the first drain signal (taint, signal, drain).",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0),
            registry=r,
        )
        self.overruns = Counter(
            "spotcap_agent_drain_overruns",
            "Drains that took longer than the contract's drain budget.",
            registry=r,
        )
        self.unverified = Counter(
            "spotcap_agent_drains_unverified",
            "Drains whose result could not be verified before the deadline.",
            registry=r,
        )
        self.evictions = Counter(
            "spotcap_agent_eviction_attempts",
            "Eviction API calls, by outcome (accepted, gone, throttled, timed_out, failed).",
            ["outcome"],
            registry=r,
        )
        self.spool_bytes = Gauge(
            "spotcap_agent_spool_bytes", "Bytes in the spool's segments.", registry=r
        )
        self.spool_dropped = Counter(
            "spotcap_agent_spool_dropped_samples",
            "Usage samples dropped to keep the spool within its bound (oldest first).",
            registry=r,
        )
        self.spool_errors = Counter(
            "spotcap_agent_spool_write_errors",
            "Spool appends the disk refused (full, read-only); the lines wait in memory.",
            registry=r,
        )
        self.bundle_version = Gauge(
            "spotcap_agent_bundle_contract_version",
            "Contract version of the bundle in use (0: none), by workload.",
            ["workload"],
            registry=r,
        )
        self.bundle_refused = Counter(
            "spotcap_agent_bundles_refused",
            "Bundle files refused (unsigned, altered, wrong key, malformed), by reason.",
            ["reason"],
            registry=r,
        )

        self.notice_count = {
            (source, kind): self.notices.labels(source, kind)
            for source in get_args(NoticeSource)
            for kind in ("notice", "advisory")
        }
        """The notice counter's series made ahead: a first ``labels`` call checks the label
        names, 0.05 ms on the event loop at a notice (a wave's notices are each a first)."""
        self.drain_duration_of: dict[str, Histogram] = {}
        """The drain histogram's series by path, made by `prepare` (a ``labels`` call, even on
        a series made already, takes a lock and checks the values: 2-5 µs a drain)."""

    def prepare(self, paths: Iterable[DrainPath]) -> None:
        """Make the drain histogram's series for `paths` now, at start: a histogram's first
        ``labels`` call builds its buckets, 0.2-0.4 ms of the interpreter at the first drain, in
        a wave while other notices wait."""
        for path in paths:
            self.drain_duration_of[path] = self.drain_duration.labels(path)

    def serve(self, listen: str) -> int:
        """Serve ``/metrics`` on ``host:port`` (port 0: a free one); returns the port."""
        host, _, port = listen.rpartition(":")
        self._server, _ = start_http_server(
            int(port), addr=host or "127.0.0.1", registry=self.registry
        )
        return int(self._server.server_port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
