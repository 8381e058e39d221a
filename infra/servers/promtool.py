"""promtool, Prometheus's own linter, built from the Go module proxy and cached.

``promtool check metrics`` reads a metrics exposition on stdin and says what breaks the naming
conventions (a gauge named ``..._total``, a counter without it, units that are not base units);
the tests run it over ``spotcap serve``'s ``/metrics``. No package registry ships the binary, so
it is built once with ``go install`` (about 12 minutes of CPU on 2 cores) into
``<cache>/promtool-<version>/promtool``, the cache being ``$SPOTCAP_CACHE`` (default
``~/.cache/spotcap``), like the Kafka jars. ``go`` is ``$SPOTCAP_GO``, else ``go`` on PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from infra.servers.process import ServerError, cache_dir, file_lock

PROMTOOL_VERSION = "v0.316.0"  # the Prometheus 3.x module, as the Go module proxy names it
PROMTOOL_MODULE = "github.com/prometheus/prometheus/cmd/promtool"
BUILD_TIMEOUT_S = 3600  # ~12 min of CPU on an idle 2-core machine; a shared one is slower


def promtool_path() -> Path:
    return cache_dir() / f"promtool-{PROMTOOL_VERSION}" / "promtool"


def fetch_promtool() -> Path:
    """Return the path of promtool, building it with ``go install`` if it is not cached."""
    binary = promtool_path()
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    home = binary.parent
    home.mkdir(parents=True, exist_ok=True)
    with file_lock(home / ".fetch.lock"):
        if binary.is_file():
            return binary
        go = os.environ.get("SPOTCAP_GO") or shutil.which("go")
        if go is None:
            raise ServerError(
                "promtool",
                "cannot build promtool: go is not on PATH",
                fix="install Go 1.23+ (apt-get install golang) or set SPOTCAP_GO",
            )
        tmp = home / f"bin.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        log_path = home / "build.log"
        argv = [go, "install", f"{PROMTOOL_MODULE}@{PROMTOOL_VERSION}"]
        # GOBIN puts the binary in our cache; Go's own module and build caches stay where Go
        # keeps them (~/go/pkg/mod, ~/.cache/go-build), so a second build is quick.
        env = {**os.environ, "GOBIN": str(tmp), "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
        with log_path.open("wb") as log:
            try:
                code = subprocess.run(
                    argv,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    timeout=BUILD_TIMEOUT_S,
                    check=False,
                ).returncode
            except subprocess.TimeoutExpired:
                code = -1
        built = tmp / "promtool"
        if code != 0 or not built.is_file():
            shutil.rmtree(tmp, ignore_errors=True)
            raise ServerError(
                "promtool",
                f"building promtool failed (exit {code}): {' '.join(argv)}",
                log_path=log_path,
                fix="check access to the Go module proxy and the free space under ~/go",
            )
        built.rename(binary)
        shutil.rmtree(tmp, ignore_errors=True)
    return binary
