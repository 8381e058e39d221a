"""This node's signed bundle (ADR-15): verified on load, the last good one kept for ever.

The bundle file is written at launch (and replaced when the contract changes); the public key
beside it. A file that does not verify (unsigned, altered, signed by another key, malformed) is
refused with one log line saying why, and the last good bundle stays in use: bundles never
expire, so a node that loses its control plane keeps acting on what it last verified. The last
good bundle is copied (atomically, fsync'd) into the state folder, so a restart without a valid
file still has it; it is verified again on every load, with the same key.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from agent.config import BundleConfig
from agent.metrics import AgentMetrics
from contracts.bundles import Bundle, BundleError, verify_bundle
from contracts.signing import SigningError, load_public_key

log = logging.getLogger(__name__)

LAST_GOOD = "last-good.bundle.json"


class BundleStore:
    def __init__(
        self, config: BundleConfig, state_dir: Path, metrics: AgentMetrics | None = None
    ) -> None:
        self._config = config
        self._last_good = state_dir / LAST_GOOD
        self._metrics = metrics
        self.current: Bundle | None = None
        self.origin: str = "none"
        """Where the bundle in use came from: ``file``, ``last-good`` or ``none``."""
        self._stamp: tuple[float, int] | None = None

    def load(self) -> Bundle | None:
        """Read and verify the bundle file; keep the last good bundle if it does not verify."""
        self._stamp = _stamp(self._config.path)
        try:
            public_key = load_public_key(self._config.public_key.read_bytes())
        except (OSError, SigningError) as error:
            log.error("cannot read the bundle public key %s: %s", self._config.public_key, error)
            return self.current
        try:
            data = self._config.path.read_bytes()
            bundle = verify_bundle(data, public_key)
        except OSError as error:
            log.error("cannot read the bundle %s: %s", self._config.path, error)
        except BundleError as error:
            reason = type(error).__name__.removesuffix("Error").lower()
            if self._metrics is not None:
                self._metrics.bundle_refused.labels(reason).inc()
            log.error(
                "refusing the bundle %s (%s): %s; keeping %s",
                self._config.path,
                reason,
                error,
                self._describe_fallback(),
            )
        else:
            self._use(bundle, "file")
            self._save_last_good(data)
            return bundle
        if self.current is None:
            self._load_last_good(public_key)
        return self.current

    def refresh(self) -> Bundle | None:
        """Reload when the file changed since the last load (cheap: one stat)."""
        if _stamp(self._config.path) != self._stamp:
            return self.load()
        return self.current

    def _describe_fallback(self) -> str:
        bundle = self.current
        if bundle is not None:
            return f"the last good bundle ({bundle.workload_id} v{bundle.contract_version})"
        return "the last good bundle from the state folder, if any"

    def _use(self, bundle: Bundle, origin: str) -> None:
        if self.current != bundle:
            log.info(
                "bundle in use: workload %s contract v%d (%s, drain budget %d s, checkpoint %s)",
                bundle.workload_id,
                bundle.contract_version,
                origin,
                bundle.drain_budget_s,
                bundle.checkpoint_method,
            )
        self.current, self.origin = bundle, origin
        if self._metrics is not None:
            self._metrics.bundle_version.labels(bundle.workload_id).set(bundle.contract_version)

    def _save_last_good(self, data: bytes) -> None:
        try:
            if self._last_good.exists() and self._last_good.read_bytes() == data:
                return
            self._last_good.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._last_good.with_name(f".{LAST_GOOD}.tmp")
            with tmp.open("wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            tmp.replace(self._last_good)
        except OSError as error:  # a full disk must not cost the bundle in memory
            log.error("cannot keep the last good bundle in %s: %s", self._last_good, error)

    def _load_last_good(self, public_key: object) -> None:
        try:
            bundle = verify_bundle(self._last_good.read_bytes(), public_key)  # type: ignore[arg-type]
        except FileNotFoundError:
            log.error(
                "no valid bundle and no last good bundle in %s: this node drains locally, "
                "with the notice's deadline as its only budget",
                self._last_good.parent,
            )
            return
        except (OSError, BundleError) as error:
            log.error("the last good bundle %s is not usable: %s", self._last_good, error)
            return
        self._use(bundle, "last-good")


def _stamp(path: Path) -> tuple[float, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime, st.st_size
