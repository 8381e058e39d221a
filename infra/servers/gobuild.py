"""Build a Go command once into the project's cache: with ``go install`` (versitygw), or with
``go build`` inside a module of the project's own (kube-apiserver, whose go.mod replaces its
staging modules with local paths that ``go install`` cannot follow: ``infra/kubernetes/``).

No package registry ships these binaries; the Go module proxy does ship their sources. A build
runs under a file lock (two test processes never build the same binary at once), goes to a
temporary ``GOBIN`` first and is renamed into place only when it succeeded, so a killed or
failed build never leaves a half-written binary that a later run would trust. Go's own module
and build caches stay where Go keeps them (``~/go/pkg/mod``, ``~/.cache/go-build``), so a
second build is quick. ``go`` is ``$SPOTCAP_GO``, else ``go`` on PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from infra.servers.process import ServerError, file_lock


@dataclass(frozen=True, slots=True)
class GoCommand:
    """A Go command to build: what it is, where it goes, how to tell a person to fix a failure."""

    name: str
    module: str
    version: str
    binary: Path
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra build environment (``CGO_ENABLED``, ``GOFLAGS``)."""
    build_dir: Path | None = None
    """A module of the project's own (go.mod and go.sum) in which ``go build`` builds `module`
    (a package path, at the version that go.mod pins); None: ``go install module@version``."""
    ldflags: str = ""
    go_fix: str = "install Go (apt-get install golang) or set SPOTCAP_GO"
    build_fix: str = "check access to the Go module proxy and the free space under ~/go"
    timeout_s: float = 3600


def fetch_go_command(command: GoCommand) -> Path:
    """Return `command`'s binary, building it (``go install``, or ``go build`` in its
    `build_dir`) if it is not cached."""
    binary = command.binary
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
                command.name, f"cannot build {command.name}: go is not on PATH", fix=command.go_fix
            )
        tmp = home / f"bin.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        log_path = home / "build.log"
        built = tmp / binary.name
        if command.build_dir is None:
            flags = ["-ldflags", command.ldflags] if command.ldflags else []
            argv = [go, "install", *flags, f"{command.module}@{command.version}"]
            cwd = home
        else:  # -mod=readonly: the committed go.sum is the whole truth, nothing is resolved anew
            argv = [go, "build", "-mod=readonly", "-trimpath", "-ldflags", command.ldflags,
                    "-o", str(built), command.module]  # fmt: skip
            cwd = command.build_dir
        env = {**os.environ, **command.env, "GOBIN": str(tmp)}
        with log_path.open("wb") as log:
            try:
                code = subprocess.run(
                    argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                    timeout=command.timeout_s, check=False,
                ).returncode  # fmt: skip
            except subprocess.TimeoutExpired:
                code = -1
        if code != 0 or not built.is_file():
            shutil.rmtree(tmp, ignore_errors=True)
            raise ServerError(
                command.name,
                f"building {command.name} failed (exit {code}): {' '.join(argv)}",
                log_path=log_path,
                fix=command.build_fix,
            )
        built.rename(binary)
        shutil.rmtree(tmp, ignore_errors=True)
    return binary
