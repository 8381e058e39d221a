"""Generate ``schemas/events.py`` and ``docs/events.md`` from the ``.avsc`` files.

    python -m schemas.generate          # write both
    python -m schemas.generate --check  # exit 1 if either is stale

The Avro schemas are the one definition of every event; the Python classes and the catalogue
for people are derived from them, so the two cannot drift (STYLE.md). The generated
``from_avro`` and ``to_avro`` are straight-line code: they run on every decode and encode.
They expect what the codec hands over: fastavro dicts and lists, with logical types stripped
(timestamps as int microseconds, uuids as str).

Events are hashable: arrays are tuples and maps `schemas.frozen.FrozenMap`s (a class with a map
field freezes a dict it is given in ``__post_init__``). A deprecated field
(``spotcap.replaced_by``) and its replacement are one attribute (`catalogue.python_fields`):
``to_avro`` writes both, ``from_avro`` prefers the replacement and falls back to the deprecated
field in records written before the replacement existed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from schemas.catalogue import (
    REPLACED_BY_ATTR,
    SCHEMA_DIR,
    Catalogue,
    full_name,
    load_catalogue,
    non_null,
    python_fields,
)
from schemas.topics import LOGICAL_TOPICS

ROOT = SCHEMA_DIR.parent
EVENTS_PY = SCHEMA_DIR / "events.py"
EVENTS_MD = ROOT / "docs" / "events.md"
COMMAND = "python -m schemas.generate"
LINE = 100

_PY_PRIMITIVES = {
    "null": "None",
    "boolean": "bool",
    "int": "int",
    "long": "int",
    "float": "float",
    "double": "float",
    "bytes": "bytes",
    "string": "str",
}

Named = Mapping[str, Mapping[str, Any]]


def _short(name: str) -> str:
    return name.rpartition(".")[2]


def _kind(type_: Any, named: Named) -> str:
    """One of: primitive, enum, record, array, map, nullable."""
    if isinstance(type_, str):
        if type_ in _PY_PRIMITIVES:
            return "primitive"
        return str(named[type_]["type"])
    if isinstance(type_, list):
        if non_null(type_) is not type_:
            return "nullable"
        raise ValueError(f'only ["null", T] unions are supported in payloads: {type_}')
    kind = type_["type"]
    return "primitive" if kind in _PY_PRIMITIVES else str(kind)


# -- Python -----------------------------------------------------------------------------------


def py_type(type_: Any, named: Named) -> str:
    """The Python annotation of an Avro type."""
    kind = _kind(type_, named)
    if kind == "primitive":
        return _PY_PRIMITIVES[type_ if isinstance(type_, str) else type_["type"]]
    if kind in ("enum", "record"):
        return _short(type_)
    if kind == "array":
        return f"tuple[{py_type(type_['items'], named)}, ...]"
    if kind == "map":
        return f"Mapping[str, {py_type(type_['values'], named)}]"
    return f"{py_type(non_null(type_), named)} | None"


def _converts(type_: Any, named: Named) -> bool:
    """Whether values of `type_` need converting between fastavro and the dataclasses."""
    kind = _kind(type_, named)
    if kind in ("record", "map"):  # maps: fastavro's dict in, a FrozenMap out
        return True
    if kind == "array":
        return _converts(type_["items"], named)
    if kind == "nullable":
        return _converts(non_null(type_), named)
    return False


def _holds_map(type_: Any, named: Named) -> bool:
    """Whether `type_` has a map outside any record (records freeze their own)."""
    kind = _kind(type_, named)
    if kind == "map":
        return True
    if kind == "array":
        return _holds_map(type_["items"], named)
    if kind == "nullable":
        return _holds_map(non_null(type_), named)
    return False


def freeze_expr(type_: Any, src: str, named: Named, depth: int = 0) -> str:
    """An expression making the value `src` that a caller passed hashable: its maps (outside
    records) `FrozenMap`s, its arrays tuples."""
    kind = _kind(type_, named)
    var = f"x{depth}"
    if kind == "map":
        values = type_["values"]
        if not _holds_map(values, named):
            return f"frozen_map({src})"
        inner = freeze_expr(values, var, named, depth + 1)
        return f"FrozenMap({{k{depth}: {inner} for k{depth}, {var} in {src}.items()}})"
    if kind == "array":
        inner = freeze_expr(type_["items"], var, named, depth + 1)
        return f"tuple([{inner} for {var} in {src}])"
    if kind == "nullable" and _holds_map(type_, named):
        return f"None if {src} is None else {freeze_expr(non_null(type_), src, named, depth)}"
    return src


def from_avro_expr(type_: Any, src: str, named: Named, depth: int = 0) -> str:
    """An expression turning the fastavro value `src` into the dataclass field value."""
    kind = _kind(type_, named)
    var = f"x{depth}"
    if kind == "record":
        return f"{_short(type_)}.from_avro({src})"
    if kind == "array":
        items = type_["items"]
        if not _converts(items, named):
            return f"tuple({src})"
        return f"tuple([{from_avro_expr(items, var, named, depth + 1)} for {var} in {src}])"
    if kind == "map":
        values = type_["values"]
        if not _converts(values, named):
            return f"FrozenMap({src})"
        inner = from_avro_expr(values, var, named, depth + 1)
        return f"FrozenMap({{k{depth}: {inner} for k{depth}, {var} in {src}.items()}})"
    if kind == "nullable" and _converts(type_, named):
        return f"None if {src} is None else {from_avro_expr(non_null(type_), src, named, depth)}"
    return src


def to_avro_expr(type_: Any, src: str, named: Named, depth: int = 0) -> str:
    """An expression turning the dataclass value `src` into what fastavro writes."""
    kind = _kind(type_, named)
    var = f"x{depth}"
    if kind == "record":
        return f"{src}.to_avro()"
    if kind == "array":
        items = type_["items"]
        if not _converts(items, named):
            return f"list({src})"
        return f"[{to_avro_expr(items, var, named, depth + 1)} for {var} in {src}]"
    if kind == "map":
        values = type_["values"]
        if not _converts(values, named):
            return f"dict({src})"
        inner = to_avro_expr(values, var, named, depth + 1)
        return f"{{k{depth}: {inner} for k{depth}, {var} in {src}.items()}}"
    if kind == "nullable" and _converts(type_, named):
        return f"None if {src} is None else {to_avro_expr(non_null(type_), src, named, depth)}"
    return src


def _docstring(text: str, indent: int) -> list[str]:
    pad = " " * indent
    text = " ".join(text.split()).replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    one = f'{pad}"""{text}"""'
    if len(one) <= LINE:
        return [one]
    lines = textwrap.wrap(text, LINE - indent - 6)
    return [f'{pad}"""{lines[0]}', *(pad + line for line in lines[1:]), f'{pad}"""']


def _py_default(fields: Sequence[Mapping[str, Any]], index: int) -> str | None:
    """A Python default for a trailing run of fields with scalar, empty-array or empty-map Avro
    defaults (an empty array is the empty tuple, an empty map the empty `FrozenMap`: the
    immutable forms arrays and maps take in the classes)."""
    for fd in fields[index:]:
        if "default" not in fd or not _python_default_ok(fd["default"]):
            return None
    default = fields[index]["default"]
    if default == []:
        return "()"
    return "FrozenMap()" if default == {} else repr(default)


def _python_default_ok(default: Any) -> bool:
    return isinstance(default, str | int | float | None) or default in ([], {})


def _record_class(
    schema: Mapping[str, Any], named: Named, event: tuple[str, str, str] | None
) -> list[str]:
    name = str(schema["name"])
    out = ["", "", "@dataclass(frozen=True, slots=True)", f"class {name}:"]
    out += _docstring(str(schema["doc"]), 4)
    out.append("")
    if event is not None:
        event_type, topic, key = event
        out += [
            f'    EVENT_TYPE: ClassVar[str] = "{event_type}"',
            f'    RECORD_NAME: ClassVar[str] = "{full_name(schema)}"',
            f'    TOPIC: ClassVar[str] = "{topic}"',
            f'    KEY: ClassVar[str] = "{key}"',
            "",
        ]
    fields = python_fields(schema)
    for i, fd in enumerate(fields):
        default = _py_default(fields, i)
        suffix = "" if default is None else f" = {default}"
        out.append(f"    {fd['name']}: {py_type(fd['type'], named)}{suffix}")
        out += _docstring(str(fd["doc"]), 4)
    frozen = [fd for fd in fields if _holds_map(fd["type"], named)]
    if frozen:
        out += ["", "    def __post_init__(self) -> None:"]
        for fd in frozen:
            value = freeze_expr(fd["type"], f"self.{fd['name']}", named)
            out.append(f'        object.__setattr__(self, "{fd["name"]}", {value})')
    out += ["", "    def to_avro(self) -> dict[str, Any]:", "        return {"]
    for fd in schema["fields"]:
        attribute = fd.get(REPLACED_BY_ATTR, fd["name"])
        expr = to_avro_expr(fd["type"], f"self.{attribute}", named)
        out.append(f'            "{fd["name"]}": {expr},')
    out += [
        "        }",
        "",
        "    @classmethod",
        "    def from_avro(cls, d: Mapping[str, Any]) -> Self:",
        "        return cls(",
    ]
    deprecated = {
        fd[REPLACED_BY_ATTR]: fd["name"] for fd in schema["fields"] if REPLACED_BY_ATTR in fd
    }
    for fd in fields:
        name = fd["name"]
        src = f'd["{name}"]'
        if name in deprecated:  # records written before the replacement carry only the old field
            src = f'(d["{deprecated[name]}"] if d.get("{name}") is None else d["{name}"])'
        out.append(f"            {name}={from_avro_expr(fd['type'], src, named)},")
    out.append("        )")
    return out


def _envelope_class(envelope: Mapping[str, Any], named: Named) -> list[str]:
    out = ["", "", "@dataclass(frozen=True, slots=True)", f"class {envelope['name']}:"]
    out += _docstring(str(envelope["doc"]), 4)
    out.append("")
    for fd in envelope["fields"]:
        annotation = "Payload" if fd["name"] == "payload" else py_type(fd["type"], named)
        out.append(f"    {fd['name']}: {annotation}")
        out += _docstring(str(fd["doc"]), 4)
    names = [str(fd["name"]) for fd in envelope["fields"]]
    heads = [n for n in names if n != "payload"]
    out += [
        "",
        f"    FIELDS: ClassVar[tuple[str, ...]] = ({', '.join(json.dumps(n) for n in names)},)",
        '    """The envelope\'s fields, in the schema\'s order."""',
        f"    HEAD: ClassVar[tuple[str, ...]] = ({', '.join(json.dumps(n) for n in heads)},)",
        '    """Every field but the payload: who, when, where and why."""',
        "",
        "    def __post_init__(self) -> None:",
        "        if self.event_type != self.payload.EVENT_TYPE:",
        "            raise ValueError(",
        '                f"event_type {self.event_type!r} does not match the payload, a "',
        '                f"{type(self.payload).__name__} (event type {self.payload.EVENT_TYPE!r})"',
        "            )",
        "",
        "    def to_avro(self) -> dict[str, Any]:",
        '        """The envelope as fastavro writes it, its payload union branch named."""',
        "        payload = self.payload",
        "        return {",
        *(f'            "{n}": self.{n},' for n in heads),
        '            "payload": (payload.RECORD_NAME, payload.to_avro()),',
        "        }",
        "",
        "    @classmethod",
        "    def from_avro(cls, d: Mapping[str, Any]) -> Self:",
        '        """The envelope from what fastavro read (its payload as ``(name, record)``)."""',
        '        name, body = d["payload"]',
        "        return cls(",
        *(f'            {n}=d["{n}"],' for n in heads),
        "            payload=PAYLOAD_TYPES[name].from_avro(body),",
        "        )",
    ]
    return out


def render_events_py(cat: Catalogue) -> str:
    """The source of ``schemas/events.py`` (before formatting)."""
    named = {**cat.named_types, **cat.records}
    shorts = [_short(n) for n in named]
    if len(set(shorts)) != len(shorts):
        raise ValueError(f"named types must have distinct short names: {sorted(shorts)}")
    has_enums = any(t["type"] == "enum" for t in cat.named_types.values())
    uses_maps = any(
        _holds_map(fd["type"], named) for r in named.values() for fd in r.get("fields", ())
    )
    typing_names = ["Any", "ClassVar", *(["Literal"] if has_enums else []), "Self", "TypeAlias"]
    out = [
        f'"""Event payload classes, generated from ``schemas/*.avsc`` by ``{COMMAND}``.',
        "",
        "DO NOT EDIT: change the .avsc files and regenerate. One frozen dataclass per event",
        "record and per shared record; enums are ``Literal`` aliases. ``to_avro``/``from_avro``",
        "convert to and from what fastavro writes and reads (logical types stripped: timestamps",
        "are int microseconds since the epoch, UTC; uuids are str).",
        '"""',
        "",
        "from collections.abc import Mapping",
        "from dataclasses import dataclass",
        "from types import MappingProxyType",
        f"from typing import {', '.join(typing_names)}",
        *(["", "from schemas.frozen import FrozenMap, frozen_map"] if uses_maps else []),
    ]
    for type_name, schema in cat.named_types.items():
        if schema["type"] == "enum":
            symbols = ", ".join(json.dumps(s) for s in schema["symbols"])
            out += ["", f"{_short(type_name)}: TypeAlias = Literal[{symbols}]"]
            out += _docstring(str(schema["doc"]), 0)
        elif schema["type"] == "record":
            out += _record_class(schema, named, None)
        else:
            raise ValueError(f"{type_name}: {schema['type']} types are not supported")
    for et in cat.event_types:
        out += _record_class(cat.records[et.record_name], named, (et.name, et.topic, et.key))
    classes = [_short(et.record_name) for et in cat.event_types]
    out += ["", "", f"Payload: TypeAlias = {' | '.join(classes)}"]
    out += _docstring("Any event payload: one of the event record classes.", 0)
    out += ["", "PAYLOAD_TYPES: Mapping[str, type[Payload]] = MappingProxyType({"]
    out += [f'    "{et.record_name}": {_short(et.record_name)},' for et in cat.event_types]
    out += ["})", '"""Event classes by record full name (``spotcap.events.NoticeReceived``)."""']
    out += ["", "EVENT_CLASSES: Mapping[str, type[Payload]] = MappingProxyType({"]
    out += [f'    "{et.name}": {_short(et.record_name)},' for et in cat.event_types]
    out += ["})", '"""Event classes by event type (``notice_received``)."""']
    out += _envelope_class(cat.raw_envelope, named)
    return "\n".join(out) + "\n"


def _ruff() -> str:
    beside = Path(sys.executable).parent / "ruff"
    found = str(beside) if beside.exists() else shutil.which("ruff")
    if found is None:
        raise SystemExit("ruff is needed to format the generated code: pip install ruff")
    return found


def format_python(source: str, filename: Path) -> str:
    """`source` as ``ruff format`` (with the project's configuration) would leave it."""
    done = subprocess.run(
        [_ruff(), "format", "--stdin-filename", str(filename), "-"],
        input=source,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"ruff format failed on the generated {filename.name}:\n{done.stderr}")
    return done.stdout


# -- Markdown ---------------------------------------------------------------------------------

_UNITS = (  # suffix -> unit, first match wins
    ("_per_vcpu_h_eur_micros", "µ€ per vCPU-hour"),
    ("_per_h_eur_micros", "µ€ per hour"),
    ("_eur_micros", "µ€ (micro-euros)"),
    ("_vcpu_s", "vCPU-seconds"),
    ("_vcpu_h", "vCPU-hours"),
    ("_vcpu", "vCPU"),
    ("_per_h", "per hour"),
    ("_per_s", "per second"),
    ("_ratio", "ratio (0 to 1)"),
    ("_at", "µs since the epoch, UTC"),
    ("_ms", "milliseconds"),
    ("_us", "microseconds"),
    ("_s", "seconds"),
    ("_bytes", "bytes"),
)

_TOPIC_DOCS = {t.name: t.doc for t in LOGICAL_TOPICS if t.events}


def unit_of(field_name: str) -> str:
    """The unit a field's name declares by its suffix ("" if none)."""
    if field_name == "vcpu":
        return "vCPU"
    for suffix, unit in _UNITS:
        if field_name.endswith(suffix):
            return unit
    return ""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def md_type(type_: Any, named: Named) -> str:
    """A readable rendering of an Avro type for the field tables."""
    if isinstance(type_, list):
        inner = non_null(type_)
        if inner is not type_:
            return f"{md_type(inner, named)}, optional"
        return " or ".join(md_type(t, named) for t in type_)
    if isinstance(type_, str):
        if type_ in _PY_PRIMITIVES:
            return type_
        short = _short(type_)
        return f"[{short}](#{short.lower()}) ({named[type_]['type']})"
    kind = type_["type"]
    if kind == "array":
        return f"array of {md_type(type_['items'], named)}"
    if kind == "map":
        return f"map of string to {md_type(type_['values'], named)}"
    logical = type_.get("logicalType")
    if logical == "uuid":
        return "uuid string"
    if logical == "timestamp-micros":
        return "timestamp (long)"
    return str(kind)


def _field_table(fields: Sequence[Mapping[str, Any]], named: Named) -> list[str]:
    out = ["| field | type | unit | meaning |", "|---|---|---|---|"]
    for fd in fields:
        unit = unit_of(str(fd["name"])) or "·"
        out.append(
            f"| `{fd['name']}` | {md_type(fd['type'], named)} | {unit} | {_cell(str(fd['doc']))} |"
        )
    return out


def render_events_md(cat: Catalogue) -> str:
    """The text of ``docs/events.md``."""
    named = {**cat.named_types, **cat.records}
    env = cat.raw_envelope
    by_topic: dict[str, list[Any]] = {t: [] for t in _TOPIC_DOCS}
    for et in cat.event_types:
        by_topic[et.topic].append(et)
    out = [
        "# The spotcap event catalogue",
        "",
        f"<!-- Generated from schemas/*.avsc by `{COMMAND}`. Do not edit by hand. -->",
        "",
        "Everything spotcap knows is an event: every notice, placement, drain, loss, fallback and "
        "cost is recorded as an Avro record on a topic, with the event that caused it. Fleet "
        "state, the ledger and the monthly archive are projections of these events, and a "
        "replay of them reproduces every decision. This page describes every event: for "
        "workload owners reading why something happened to their work, for SREs querying the "
        "fleet, and for finance replaying history under a new accounting rule.",
        "",
        "## The envelope",
        "",
        " ".join(str(env["doc"]).split()),
        "Follow `causation_id` from any event back to the fact from outside that started its "
        "chain; `correlation_id` groups everything that belongs to one incident or wave.",
        "",
    ]
    envelope_fields = [
        {**fd, "type": "payload"} if fd["name"] == "payload" else fd for fd in env["fields"]
    ]
    table = _field_table(envelope_fields, {**named, "payload": {"type": "union"}})
    out += [row.replace("[payload](#payload) (union)", "one event record") for row in table]
    out += [
        "",
        "## Topics",
        "",
        "Topic names are prefixed by the region (`eu-west.lifecycle`). Events are kept 400 days "
        "on the topics; the ledger and the archive keep costs for 7 years.",
        "",
        "| topic | events | what it holds |",
        "|---|---|---|",
    ]
    for topic, types in by_topic.items():
        out.append(f"| `{topic}` | {len(types)} | {_cell(_TOPIC_DOCS[topic])} |")
    out += [
        "",
        "## Conventions",
        "",
        "- **Units are in the names.** A field's suffix says its unit; the tables below spell it "
        "out. `_s`, `_ms`, `_us`: durations; `_at`: a point in time, microseconds since the "
        "epoch, UTC; `_vcpu`, `_vcpu_s`, `_vcpu_h`: vCPU, vCPU-seconds, vCPU-hours; `_bytes`: a "
        "size; `_per_h`, `_per_s`, `_ratio`: rates and shares.",
        "- **Money is a whole number of micro-euros** (`_eur_micros`, a long: 1 € = 1,000,000). "
        "It is never a floating-point number, so sums over years of events are exact.",
        "- **Ids are strings.** Instance, pool and workload ids are the provider's and the "
        "contracts' own; event ids are UUIDs. Judgements name their evidence as lists of "
        "event ids (`evidence_event_ids`).",
        "- **Optional fields** are `null` or a value, and default to `null`.",
        "- **Time is event time.** `occurred_at` is when the thing happened, and every window "
        "and decision runs on it; `recorded_at` is only when it was written down.",
        "",
        "## Evolution",
        "",
        "Schemas evolve under full compatibility: a reader of version N reads N-1 and N+1, and "
        "`spotcap schemas check` refuses any other change. In practice: add a field only as "
        'optional (`["null", T]`, default `null`); remove only a field that has a default; never '
        "change a field's type; add a new event type only by appending it to the envelope's "
        "payload union (`schemas/envelope.avsc`) and never remove one. A field is renamed in "
        "two steps (expand, then contract): a release adds the new name as an optional field "
        "and keeps writing the old one, marked `spotcap.replaced_by` (readers take the new "
        "field and fall back to the old one in older records); a release after every reader "
        "has the new name drops the old field. `tolerated_interruption_per_h` of "
        "`contract_published` is in the first step (release 2). Then run "
        f"`{COMMAND}` to refresh the Python classes and this page, and `spotcap schemas "
        "release` to record the release (docs/architecture.md, schema evolution).",
        "",
        "## Contents",
        "",
    ]
    for topic, types in by_topic.items():
        links = ", ".join(f"[`{et.name}`](#{et.name})" for et in types)
        out.append(f"- **{topic}**: {links}")
    out.append(
        "- **shared types**: "
        + ", ".join(f"[`{_short(n)}`](#{_short(n).lower()})" for n in cat.named_types)
    )
    for topic, types in by_topic.items():
        out += ["", f"## Topic `{topic}`", "", _TOPIC_DOCS[topic]]
        for et in types:
            record = cat.records[et.record_name]
            out += [
                "",
                f"### {et.name}",
                "",
                f"Record `{et.record_name}` · topic `{et.topic}` · key `{et.key}`",
                "",
                " ".join(et.doc.split()),
                "",
                *_field_table(record["fields"], named),
            ]
    out += ["", "## Shared types", "", "Named types the event records share."]
    for type_name, schema in cat.named_types.items():
        out += ["", f"### {_short(type_name)}", "", f"`{type_name}` ({schema['type']})", ""]
        out.append(" ".join(str(schema["doc"]).split()))
        if schema["type"] == "enum":
            out += ["", "Values: " + ", ".join(f"`{s}`" for s in schema["symbols"]) + "."]
        elif schema["type"] == "record":
            out += ["", *_field_table(schema["fields"], named)]
    return "\n".join(out) + "\n"


# -- command ----------------------------------------------------------------------------------


def render(schema_dir: Path = SCHEMA_DIR) -> dict[Path, str]:
    """What each generated file should contain."""
    cat = load_catalogue(schema_dir)
    return {
        EVENTS_PY: format_python(render_events_py(cat), EVENTS_PY),
        EVENTS_MD: render_events_md(cat),
    }


def stale(schema_dir: Path = SCHEMA_DIR) -> list[Path]:
    """The generated files that differ from what `render` would write."""
    return [
        path
        for path, text in render(schema_dir).items()
        if not path.exists() or path.read_text(encoding="utf-8") != text
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a file is stale")
    args = parser.parse_args(argv)
    if args.check:
        outdated = stale()
        for path in outdated:
            print(f"{path.relative_to(ROOT)} is stale: run `{COMMAND}`", file=sys.stderr)
        return 1 if outdated else 0
    for path, text in render().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
