"""promtool, Prometheus's own linter, built from the Go module proxy and cached.

``promtool check metrics`` reads a metrics exposition on stdin and says what breaks the naming
conventions (a gauge named ``..._total``, a counter without it, units that are not base units);
the tests run it over ``spotcap serve``'s ``/metrics``. No package registry ships the binary, so
it is built once with ``go install`` (about 12 minutes of CPU on 2 cores) into
``<cache>/promtool-<version>/promtool``, the cache being ``$SPOTCAP_CACHE`` (default
``~/.cache/spotcap``), like the Kafka jars. ``go`` is ``$SPOTCAP_GO``, else ``go`` on PATH.
"""

from __future__ import annotations

from pathlib import Path

from infra.servers.gobuild import GoCommand, fetch_go_command
from infra.servers.process import cache_dir

PROMTOOL_VERSION = "v0.316.0"  # the Prometheus 3.x module, as the Go module proxy names it
PROMTOOL_MODULE = "github.com/prometheus/prometheus/cmd/promtool"
BUILD_TIMEOUT_S = 3600  # ~12 min of CPU on an idle 2-core machine; a shared one is slower


def promtool_path() -> Path:
    return cache_dir() / f"promtool-{PROMTOOL_VERSION}" / "promtool"


def fetch_promtool() -> Path:
    """Return the path of promtool, building it with ``go install`` if it is not cached."""
    return fetch_go_command(
        GoCommand(
            "promtool",
            PROMTOOL_MODULE,
            PROMTOOL_VERSION,
            promtool_path(),
            env={"CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"},
            go_fix="install Go 1.23+ (apt-get install golang) or set SPOTCAP_GO",
            timeout_s=BUILD_TIMEOUT_S,
        )
    )
