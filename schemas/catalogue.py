"""The Avro event catalogue: the envelope, one record per event type, shared named types.

The ``.avsc`` files in this folder are the single source of truth (DESIGN.md §3):

* ``envelope.avsc``: the envelope record; its ``payload`` union lists the event records' full
  names in a fixed order (new event types are only ever appended);
* ``<event_type>.avsc``: one record per event type in namespace ``spotcap.events``, named in
  CamelCase after its file, carrying ``spotcap.topic`` and ``spotcap.key``;
* ``_types.avsc``: a JSON array of the named types (enums, records) in ``spotcap.types`` that
  event records refer to by full name.

Assembly inlines every named type at its first use (Avro's parse order: depth first, fields in
order), so the envelope schema stands alone. Loading refuses, naming the file, anything that
would let the catalogue drift from its conventions: missing docs, money that is not a long of
micro-euros, a record name that does not match its file.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from schemas.topics import EVENT_TOPICS

SCHEMA_DIR = Path(__file__).resolve().parent
ENVELOPE_FILE = "envelope.avsc"
TYPES_FILE = "_types.avsc"
EVENTS_NAMESPACE = "spotcap.events"
TYPES_NAMESPACE = "spotcap.types"
TOPICS = frozenset(EVENT_TOPICS)  # the topics events may name (schemas.topics)
TOPIC_ATTR = "spotcap.topic"
KEY_ATTR = "spotcap.key"
# On a deprecated field: the field that replaces it (expand/contract, docs/architecture.md).
REPLACED_BY_ATTR = "spotcap.replaced_by"

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
MONEY_SUFFIX = "_eur_micros"
# Words that make a field money; money is always a long of micro-euros (never float/double).
_MONEY_WORDS = frozenset({"eur", "price", "cost", "spend", "premium", "saving", "charge"})


class CatalogueError(ValueError):
    """A schema file breaks the catalogue's rules; the message names the file and the problem."""


CATALOGUE_COLUMNS = ("event type", "topic", "key", "fields", "what it records")
"""The columns of `spotcap events`: `EventType.row`'s cells."""


@dataclass(frozen=True, slots=True)
class EventType:
    """One event type of the catalogue."""

    name: str  # snake_case, == the envelope's event_type, == the file stem
    record_name: str  # full Avro name, e.g. "spotcap.events.NoticeReceived"
    topic: str  # logical topic (without the region prefix)
    key: str  # what the envelope key holds, e.g. "instance_id"
    doc: str
    # The payload record with its named types inlined, so it stands alone.
    schema: Mapping[str, Any] = field(compare=False, hash=False, repr=False)

    @property
    def summary(self) -> str:
        """The doc's first sentence, on one line: what the event records."""
        text = " ".join(self.doc.split())
        end = text.find(". ")
        return text if end < 0 else text[: end + 1]

    def row(self) -> tuple[str, str, str, str, str]:
        """What `spotcap events` lists of it, one cell per `CATALOGUE_COLUMNS`."""
        fields = str(len(self.schema["fields"]))
        return (self.name, self.topic, self.key, fields, self.summary)

    def as_json(self) -> dict[str, Any]:
        """What `spotcap events --json` lists of it: names, topic, key, doc, field names."""
        fields = [f["name"] for f in self.schema["fields"]]
        return {"event_type": self.name, "record": self.record_name, "topic": self.topic,
                "key": self.key, "doc": self.doc, "fields": fields}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Catalogue:
    """Everything loaded from one schema folder (the generator reads the raw parts)."""

    envelope: dict[str, Any]  # assembled: named types inlined at first use
    raw_envelope: dict[str, Any]  # as written: payload union of record names
    named_types: dict[str, dict[str, Any]]  # full name -> definition, file order (_types.avsc)
    records: dict[str, dict[str, Any]]  # event record full name -> definition, union order
    event_types: tuple[EventType, ...]


def snake_to_camel(name: str) -> str:
    """``notice_received`` -> ``NoticeReceived``."""
    return "".join(part.capitalize() for part in name.split("_"))


def camel_to_snake(name: str) -> str:
    """``NoticeReceived`` -> ``notice_received``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def full_name(schema: Mapping[str, Any], enclosing: str | None = None) -> str:
    """The full name of a named schema definition."""
    name = str(schema["name"])
    if "." in name:
        return name
    namespace = schema.get("namespace", enclosing)
    return f"{namespace}.{name}" if namespace else name


def is_money(field_name: str) -> bool:
    """Whether a field holds money, judged by its name (see the module docstring)."""
    return field_name.endswith(MONEY_SUFFIX) or bool(_MONEY_WORDS & set(field_name.split("_")))


def non_null(type_: Any) -> Any:
    """The T of a ``["null", T]`` union; any other type unchanged."""
    if isinstance(type_, list):
        rest = [t for t in type_ if t != "null"]
        if len(rest) == 1 and len(type_) == 2:
            return rest[0]
    return type_


# -- loading ----------------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise CatalogueError(f"{path.name}: cannot be read: {error}") from error
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise CatalogueError(
            f"{path.name}: invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}"
        ) from error


def _check_fields(file: str, record: Mapping[str, Any], named: Mapping[str, Any]) -> None:
    where = full_name(record)
    if not str(record.get("doc", "")).strip():
        raise CatalogueError(f"{file}: record {where} has no doc")
    fields = record.get("fields")
    if not isinstance(fields, list) or not fields:
        raise CatalogueError(f"{file}: record {where} has no fields")
    seen: set[str] = set()
    for fd in fields:
        name = fd.get("name") if isinstance(fd, dict) else None
        if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", name):
            raise CatalogueError(f"{file}: record {where} has a field with a bad name: {fd!r}")
        if name in seen:
            raise CatalogueError(f"{file}: field {name} appears twice in {where}")
        seen.add(name)
        if not str(fd.get("doc", "")).strip():
            raise CatalogueError(f"{file}: field {name} of {where} has no doc")
        if "type" not in fd:
            raise CatalogueError(f"{file}: field {name} of {where} has no type")
        _check_type(file, f"{where}.{name}", fd["type"], named)
        inner = non_null(fd["type"])
        optional = isinstance(fd["type"], list) and "null" in fd["type"]
        if optional and (fd["type"][0] != "null" or fd.get("default", ...) is not None):
            raise CatalogueError(
                f'{file}: optional field {name} of {where} must be ["null", T] with '
                "default null, so it can be added and removed under full compatibility"
            )
        if is_money(name):
            base = inner.get("type") if isinstance(inner, dict) else inner
            if base in ("float", "double") or not name.endswith(MONEY_SUFFIX) or base != "long":
                raise CatalogueError(
                    f"{file}: field {name} of {where} is money and must be a long named "
                    f"*{MONEY_SUFFIX} (micro-euros), not {json.dumps(fd['type'])}; "
                    "float and double are never used for money"
                )
    _check_replacements(file, record)


def _check_replacements(file: str, record: Mapping[str, Any]) -> None:
    """A deprecated field names its replacement, an optional field of the same type, so that
    every record carries the value in one of the two (see `python_fields`)."""
    where = full_name(record)
    by_name = {fd["name"]: fd for fd in record["fields"]}
    targets: set[str] = set()
    for fd in record["fields"]:
        new = fd.get(REPLACED_BY_ATTR)
        if new is None:
            continue
        name = fd["name"]
        target = by_name.get(new) if isinstance(new, str) else None
        if target is None or new == name or REPLACED_BY_ATTR in target or new in targets:
            raise CatalogueError(
                f'{file}: field {name} of {where} has "{REPLACED_BY_ATTR}": {new!r}, which must '
                "name another field of the record that replaces no field and is named once"
            )
        targets.add(new)
        if target["type"] != ["null", fd["type"]] or "default" not in fd:
            raise CatalogueError(
                f"{file}: field {new} of {where} replaces {name}, so it must be "
                f'["null", {json.dumps(fd["type"])}] with default null, and {name} must keep a '
                "default (a later release may then drop it)"
            )


def _check_type(file: str, where: str, type_: Any, named: Mapping[str, Any]) -> None:
    """Every named reference resolves; nested definitions are refused (they go in _types)."""
    if isinstance(type_, str):
        if type_ not in PRIMITIVES and type_ not in named:
            raise CatalogueError(
                f"{file}: {where} refers to {type_!r}, which is neither a primitive nor a named "
                f"type defined in {TYPES_FILE} (refer to named types by full name)"
            )
    elif isinstance(type_, list):
        for branch in type_:
            _check_type(file, where, branch, named)
    elif isinstance(type_, dict):
        kind = type_.get("type")
        if kind == "array":
            _check_type(file, where, type_.get("items"), named)
        elif kind == "map":
            _check_type(file, where, type_.get("values"), named)
        elif kind in ("record", "enum", "fixed", "error"):
            raise CatalogueError(
                f"{file}: {where} defines the named type {type_.get('name')!r} inline; "
                f"define it in {TYPES_FILE} and refer to it by full name"
            )
        elif kind in PRIMITIVES:
            pass
        else:
            raise CatalogueError(f"{file}: {where} has an unknown type {json.dumps(type_)}")
    else:
        raise CatalogueError(f"{file}: {where} has an unknown type {json.dumps(type_)}")


def _load_named_types(path: Path) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {}
    data = _read_json(path)
    if not isinstance(data, list):
        raise CatalogueError(f"{path.name}: must be a JSON array of named schemas")
    named: dict[str, dict[str, Any]] = {}
    for schema in data:
        if not isinstance(schema, dict) or schema.get("type") not in ("record", "enum", "fixed"):
            raise CatalogueError(f"{path.name}: {schema!r} is not a named schema")
        name = full_name(schema)
        if not name.startswith(TYPES_NAMESPACE + "."):
            raise CatalogueError(f"{path.name}: {name} is not in namespace {TYPES_NAMESPACE}")
        if name in named:
            raise CatalogueError(f"{path.name}: {name} is defined twice")
        if not str(schema.get("doc", "")).strip():
            raise CatalogueError(f"{path.name}: {name} has no doc")
        definition = {**schema, "name": name.rsplit(".", 1)[1], "namespace": TYPES_NAMESPACE}
        if schema["type"] == "record":
            # A record may only use the named types defined before it (Avro's parse order).
            _check_fields(path.name, definition, named)
        named[name] = definition
    return named


def _load_record(path: Path, record_name: str, named: Mapping[str, Any]) -> dict[str, Any]:
    schema = _read_json(path)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise CatalogueError(f"{path.name}: must hold one Avro record")
    found = full_name(schema)
    if found != record_name:
        raise CatalogueError(
            f"{path.name}: record name {found} does not match the file name "
            f"(expected {record_name})"
        )
    topic = schema.get(TOPIC_ATTR)
    if topic not in TOPICS:
        raise CatalogueError(
            f'{path.name}: "{TOPIC_ATTR}" is {topic!r}; it must be one of {sorted(TOPICS)}'
        )
    key = schema.get(KEY_ATTR)
    if not isinstance(key, str) or not key:
        raise CatalogueError(f'{path.name}: "{KEY_ATTR}" must name what the envelope key holds')
    _check_fields(path.name, schema, named)
    fields = {f["name"]: f["type"] for f in schema["fields"]}
    if key != "region" and fields.get(key) != "string":
        found_type = json.dumps(fields[key]) if key in fields else "missing"
        raise CatalogueError(
            f'{path.name}: "{KEY_ATTR}" names {key}, so {key} must be a required field of type '
            f'"string" (found: {found_type}); or use "region"'
        )
    return {**schema, "name": found.rsplit(".", 1)[1], "namespace": EVENTS_NAMESPACE}


def _inline(type_: Any, named: Mapping[str, dict[str, Any]], defined: set[str]) -> Any:
    """`type_` with each named type defined at its first use and referenced by name after."""
    if isinstance(type_, str):
        if type_ in PRIMITIVES:
            return type_
        if type_ in defined:
            return type_
        defined.add(type_)
        return _inline_definition(named[type_], named, defined)
    if isinstance(type_, list):
        return [_inline(branch, named, defined) for branch in type_]
    if isinstance(type_, dict):
        kind = type_.get("type")
        if kind == "record":
            defined.add(full_name(type_))
            return _inline_definition(type_, named, defined)
        if kind == "array":
            return {**type_, "items": _inline(type_["items"], named, defined)}
        if kind == "map":
            return {**type_, "values": _inline(type_["values"], named, defined)}
        return copy.deepcopy(type_)
    raise TypeError(f"not an Avro type: {type_!r}")


def _inline_definition(
    schema: Mapping[str, Any], named: Mapping[str, dict[str, Any]], defined: set[str]
) -> dict[str, Any]:
    out = copy.deepcopy(dict(schema))
    if "fields" in out:
        out["fields"] = [
            {**fd, "type": _inline(fd["type"], named, defined)} for fd in schema["fields"]
        ]
    return out


def load_catalogue(path: Path) -> Catalogue:
    """Load and check every schema of the folder `path` (see the module docstring)."""
    path = Path(path)
    named = _load_named_types(path / TYPES_FILE)
    envelope = _read_json(path / ENVELOPE_FILE)
    if not isinstance(envelope, dict) or envelope.get("type") != "record":
        raise CatalogueError(f"{ENVELOPE_FILE}: must hold the envelope record")
    _check_envelope_fields(envelope)
    payload = next(f for f in envelope["fields"] if f["name"] == "payload")
    union = payload["type"]
    if not isinstance(union, list) or not union or not all(isinstance(n, str) for n in union):
        raise CatalogueError(
            f"{ENVELOPE_FILE}: the payload type must be a union of event record full names"
        )
    if len(set(union)) != len(union):
        raise CatalogueError(f"{ENVELOPE_FILE}: the payload union names an event type twice")

    records: dict[str, dict[str, Any]] = {}
    for record_name in union:
        namespace, _, short = record_name.rpartition(".")
        if namespace != EVENTS_NAMESPACE or not re.fullmatch(r"[A-Z][A-Za-z0-9]*", short):
            raise CatalogueError(
                f"{ENVELOPE_FILE}: payload union name {record_name!r} is not "
                f"{EVENTS_NAMESPACE}.<CamelCase>"
            )
        file = path / f"{camel_to_snake(short)}.avsc"
        if not file.exists():
            raise CatalogueError(
                f"{ENVELOPE_FILE}: payload union names {record_name} but {file.name} does not "
                "exist in the schema folder"
            )
        records[record_name] = _load_record(file, record_name, named)

    listed = {f"{camel_to_snake(n.rpartition('.')[2])}.avsc" for n in union}
    for file in sorted(path.glob("*.avsc")):
        if file.name not in listed and file.name not in (ENVELOPE_FILE, TYPES_FILE):
            raise CatalogueError(
                f"{file.name}: not listed in the payload union of {ENVELOPE_FILE}; append "
                f"{EVENTS_NAMESPACE}.{snake_to_camel(file.stem)} to it"
            )

    defined: set[str] = set()
    assembled = copy.deepcopy(envelope)
    for fd in assembled["fields"]:
        if fd["name"] == "payload":
            fd["type"] = [_inline_definition(records[n], named, defined) for n in union]
            defined.update(union)
        else:
            fd["type"] = _inline(fd["type"], named, defined)

    types = tuple(
        EventType(
            name=camel_to_snake(name.rpartition(".")[2]),
            record_name=name,
            topic=record[TOPIC_ATTR],
            key=record[KEY_ATTR],
            doc=record["doc"],
            schema=_inline_definition(record, named, set()),
        )
        for name, record in records.items()
    )
    return Catalogue(assembled, envelope, named, records, types)


_ENVELOPE_FIELDS = (
    "event_id",
    "event_type",
    "occurred_at",
    "recorded_at",
    "region",
    "key",
    "causation_id",
    "correlation_id",
    "producer",
    "payload",
)


def _check_envelope_fields(envelope: Mapping[str, Any]) -> None:
    names = tuple(f.get("name") for f in envelope.get("fields", ()))
    if names != _ENVELOPE_FIELDS:
        raise CatalogueError(
            f"{ENVELOPE_FILE}: fields must be {', '.join(_ENVELOPE_FIELDS)} in that order; "
            f"found {', '.join(map(str, names))}"
        )
    for fd in envelope["fields"]:
        if not str(fd.get("doc", "")).strip():
            raise CatalogueError(f"{ENVELOPE_FILE}: field {fd['name']} has no doc")
    if not str(envelope.get("doc", "")).strip():
        raise CatalogueError(f"{ENVELOPE_FILE}: the envelope record has no doc")


def load_schema_dir(path: Path) -> dict[str, Any]:
    """The assembled envelope schema of the folder `path`; `CatalogueError` if it is broken."""
    return load_catalogue(path).envelope


# -- the installed catalogue ------------------------------------------------------------------


@cache
def catalogue() -> Catalogue:
    """The catalogue of this package's schema folder, loaded once."""
    return load_catalogue(SCHEMA_DIR)


def event_types() -> tuple[EventType, ...]:
    """Every event type, in envelope union order."""
    return catalogue().event_types


@cache
def _by_name() -> dict[str, EventType]:
    found: dict[str, EventType] = {}
    for t in event_types():
        found[t.name] = t
        found[t.record_name] = t
    return found


def event_type(name: str) -> EventType:
    """An event type by snake_case name or record full name."""
    try:
        return _by_name()[name]
    except KeyError:
        known = ", ".join(t.name for t in event_types())
        raise KeyError(
            f"no event type {name!r}: give a snake_case name or a record full name "
            f"(spotcap.events.CamelCase); known: {known}"
        ) from None


def envelope_schema() -> dict[str, Any]:
    """The full envelope schema, every named type defined inline once (a fresh copy)."""
    return copy.deepcopy(catalogue().envelope)


def python_fields(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The fields of `record` as its generated class has them.

    A deprecated field (``spotcap.replaced_by``) and its replacement are one attribute, named
    after the replacement, at the deprecated field's place and of its (required) type: every
    record carries the value, older ones in the deprecated field only.
    """
    fields = record["fields"]
    by_name = {fd["name"]: fd for fd in fields}
    replacing = {fd[REPLACED_BY_ATTR] for fd in fields if REPLACED_BY_ATTR in fd}
    out: list[dict[str, Any]] = []
    for fd in fields:
        new = fd.get(REPLACED_BY_ATTR)
        if new is not None:
            out.append({"name": new, "type": fd["type"], "doc": by_name[new]["doc"]})
        elif fd["name"] not in replacing:
            out.append(dict(fd))
    return out


def iter_fields(schema: Any) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(record full name, field) for every field of every record defined in `schema`."""
    if isinstance(schema, list):
        for branch in schema:
            yield from iter_fields(branch)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind == "record":
            for fd in schema["fields"]:
                yield full_name(schema), fd
                yield from iter_fields(fd["type"])
        elif kind == "array":
            yield from iter_fields(schema["items"])
        elif kind == "map":
            yield from iter_fields(schema["values"])


__all__ = [
    "SCHEMA_DIR",
    "Catalogue",
    "CatalogueError",
    "EventType",
    "envelope_schema",
    "event_type",
    "event_types",
    "iter_fields",
    "load_catalogue",
    "load_schema_dir",
    "python_fields",
]
