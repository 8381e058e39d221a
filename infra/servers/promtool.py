"""promtool, Prometheus's own linter, from Debian's ``prometheus`` package.

``promtool check metrics`` reads a metrics exposition on stdin and says what breaks the naming
conventions (a gauge named ``..._total``, a counter without it, units that are not base units);
``promtool check rules`` checks alerting and recording rules. The tests run both. Debian 12
ships promtool 2.42 with the ``prometheus`` package (``make system-packages`` installs it, in
about 15 s); building it from the Go module proxy took about 12 minutes of CPU on a fresh
machine, which ``make test`` no longer pays. ``$SPOTCAP_PROMTOOL`` names another binary.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from infra.servers.process import ServerError

DEBIAN_PACKAGE = "prometheus"


def fetch_promtool() -> Path:
    """The path of promtool: $SPOTCAP_PROMTOOL, else promtool on PATH (Debian's)."""
    chosen = os.environ.get("SPOTCAP_PROMTOOL") or shutil.which("promtool")
    if not chosen or not Path(chosen).is_file():
        raise ServerError(
            "promtool",
            "is not installed",
            fix=f"run `make system-packages` (it installs Debian's `{DEBIAN_PACKAGE}` package, "
            "which ships promtool), or set SPOTCAP_PROMTOOL",
        )
    return Path(chosen)
