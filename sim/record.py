"""What a demo run was made of, recorded beside its log so that it can be simulated again.

A closed-loop run's history depends on its decisions (what the deciders place is what the region
reclaims and bills), so "the same inputs with other settings" means the same simulation (seed,
region, catalogue, every knob of `SimConfig`) driven by other settings: `spotcap replay
decisions` reads this record and runs the region again. `spotcap demo` forgets the record when it
starts and writes it when its run has finished, so a record is there only for a log that one
finished demo run wrote; with it go the end offsets the run left (`sim.fresh`), which tell
whether the log still holds exactly that run.

The record lives with the run markers (`streams.runs`): ``<region>.demo-config.json`` in their
folder.
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import asdict, dataclass, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

from schemas.pools import PoolCatalogue, PoolCatalogueError
from sim.region import SimConfig
from streams.deciders.authority import ChangeTrust
from streams.deciders.settings import DeciderSettings
from streams.deciders.settings_keys import SettingError, as_data, from_data

FORMAT = 1


@dataclass(frozen=True, slots=True)
class RecordedRun:
    """A finished demo run: its simulation, what drove it, and the deciders' settings (None for
    the baseline stand-in)."""

    config: SimConfig
    orchestrator: str
    deciders: DeciderSettings | None


class RunRecordError(RuntimeError):
    """No usable record: the message says why, `hint` what to do."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def record_path(runs_dir: Path, region: str) -> Path:
    return runs_dir / f"{region}.demo-config.json"


def forget_run(runs_dir: Path, region: str) -> None:
    """Remove the record of `region` (a run starts: the log no longer holds the old one)."""
    record_path(runs_dir, region).unlink(missing_ok=True)


def record_run(runs_dir: Path, run: RecordedRun) -> None:
    config = {f.name: getattr(run.config, f.name) for f in fields(SimConfig)}
    catalogue: PoolCatalogue | None = config.pop("catalogue")
    data = {
        "format": FORMAT,
        "orchestrator": run.orchestrator,
        "sim_config": {
            k: asdict(v) if is_dataclass(v) and not isinstance(v, type) else v
            for k, v in config.items()
        },
        "catalogue_yaml": None if catalogue is None else catalogue.to_yaml(),
        "decider_settings": None if run.deciders is None else as_data(run.deciders),
        # The keys the deciders trusted for changes of authority (public keys only): a
        # re-run decides with them, with no keyring given (`--set` cannot change them).
        "keyring": _keyring(run.deciders),
    }
    path = record_path(runs_dir, run.config.region)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def load_run(runs_dir: Path, region: str, rerun_command: str) -> RecordedRun:
    """The record of the last finished demo run of `region`; RunRecordError when there is none
    or it cannot be used (its hint: run `rerun_command`, a demo that writes such a record)."""
    path = record_path(runs_dir, region)
    hint = f"run `{rerun_command}` to write a history that records its configuration"
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunRecordError(
            f"the log of region {region} has no recorded simulation to run again ({path} is "
            "missing): it was not written by a finished `spotcap demo`, or by one older than "
            "this record; a closed-loop history cannot be re-decided without re-simulating it",
            hint,
        ) from None
    except (OSError, ValueError) as error:
        raise RunRecordError(f"{path} cannot be read: {error}", hint) from None
    try:
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}, not {FORMAT}")
        catalogue_yaml = data["catalogue_yaml"]
        catalogue = (
            None
            if catalogue_yaml is None
            else PoolCatalogue.from_yaml(catalogue_yaml, f"{path}: catalogue_yaml")
        )
        config = _build(SimConfig, {**data["sim_config"], "catalogue": catalogue})
        deciders = data["decider_settings"]
        settings = None if deciders is None else from_data(deciders)
        keyring = data.get("keyring")  # absent from records written before it was kept
        if settings is not None and keyring is not None:
            trust = ChangeTrust(dict(keyring["owners"]), dict(keyring["authorities"]))
            settings = replace(settings, trust=trust)
        return RecordedRun(config=config, orchestrator=str(data["orchestrator"]), deciders=settings)
    except (KeyError, TypeError, ValueError, PoolCatalogueError, SettingError) as error:
        raise RunRecordError(f"{path} is not a usable run record: {error}", hint) from None


def _keyring(deciders: DeciderSettings | None) -> dict[str, dict[str, str]] | None:
    trust = None if deciders is None else deciders.trust
    if trust is None:
        return None
    return {"owners": dict(trust.owners), "authorities": dict(trust.authorities)}


def _build(cls: type, data: dict[str, Any]) -> Any:
    """`cls` (a dataclass) from JSON data: nested dataclasses rebuilt, lists back to tuples."""
    hints = typing.get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{cls.__name__} has no field {', '.join(unknown)}")
    values: dict[str, Any] = {}
    for name, value in data.items():
        hint = hints[name]
        if is_dataclass(hint) and isinstance(hint, type) and isinstance(value, dict):
            values[name] = _build(hint, value)
        elif _is_tuple(hint) and isinstance(value, list):
            values[name] = tuple(value)
        else:
            values[name] = value
    return cls(**values)


def _is_tuple(hint: Any) -> bool:
    origin = typing.get_origin(hint)
    return origin is tuple or (
        origin in (typing.Union, types.UnionType)
        and any(typing.get_origin(a) is tuple for a in typing.get_args(hint))
    )
