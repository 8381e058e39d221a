"""A known cause of failed graceful shutdowns, checked at start (ADR-14).

The kubelet's graceful node shutdown holds a systemd-logind inhibitor lock for its
``shutdownGracePeriod``, but logind lets an inhibitor delay shutdown by at most
``InhibitDelayMaxSec`` (5 s unless configured): when that is shorter, pods are killed before
their grace period ends. The agent reads both files and warns when they disagree.
"""

from __future__ import annotations

import re
from pathlib import Path

LOGIND_DEFAULT_S = 5.0
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_SYSTEMD_UNIT_S = {"": 1.0, "s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "ms": 1e-3, "h": 3600.0}


def go_duration_s(text: str) -> float | None:
    """Seconds of a Go duration such as ``30s``, ``1m30s`` or ``500ms`` (None if it is not one)."""
    text = text.strip().strip("'\"")
    if not text or _DURATION_PART.sub("", text):
        return None
    return sum(float(n) * _UNIT_S[u] for n, u in _DURATION_PART.findall(text))


def kubelet_grace_s(kubelet_config: Path) -> float | None:
    """``shutdownGracePeriod`` of a KubeletConfiguration file (None if absent or unset)."""
    try:
        text = kubelet_config.read_text()
    except OSError:
        return None
    match = re.search(r"^shutdownGracePeriod:\s*(\S+)\s*$", text, re.MULTILINE)
    return go_duration_s(match.group(1)) if match else None


def logind_inhibit_delay_s(logind_conf: Path) -> float:
    """``InhibitDelayMaxSec`` as logind reads it: the main file, then ``*.conf.d`` in order."""
    value = LOGIND_DEFAULT_S
    files = [logind_conf, *sorted(logind_conf.with_name(logind_conf.name + ".d").glob("*.conf"))]
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        for match in re.finditer(r"^\s*InhibitDelayMaxSec\s*=\s*(\S+)\s*$", text, re.MULTILINE):
            parsed = _systemd_seconds(match.group(1))
            if parsed is not None:
                value = parsed
    return value


def _systemd_seconds(text: str) -> float | None:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-z]*)", text.strip())
    if not match or match.group(2) not in _SYSTEMD_UNIT_S:
        return None
    return float(match.group(1)) * _SYSTEMD_UNIT_S[match.group(2)]


def inhibit_delay_warning(kubelet_config: Path, logind_conf: Path) -> str | None:
    """A warning when logind would cut the kubelet's graceful shutdown short, else None."""
    grace_s = kubelet_grace_s(kubelet_config)
    if grace_s is None:
        return None
    delay_s = logind_inhibit_delay_s(logind_conf)
    if delay_s >= grace_s:
        return None
    return (
        f"logind InhibitDelayMaxSec is {delay_s:g} s but the kubelet's shutdownGracePeriod is "
        f"{grace_s:g} s ({kubelet_config}): pods would be killed before their grace period "
        f"ends; set InhibitDelayMaxSec={grace_s:g} in {logind_conf}.d/"
    )
