"""Reading a YAML file while remembering the line of every key, for error messages.

Validation reports a field by its path (``("checkpoint", "size_bytes")``); the compiler turns
that path back into the line the author wrote it on. The file is composed once (PyYAML keeps a
start mark on every node), the marks are recorded per key path, then the same node tree is
constructed into plain Python data with the safe constructor. A key written twice in one
mapping, which PyYAML would silently resolve to the last value, is refused; so are anchors,
aliases and merge keys (``&name``, ``*name``, ``<<``): they put one value on several lines, so no
error could name the line it came from, and a contract is short enough to write out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from schemas.contracts.errors import KeyPath, dotted
from schemas.yaml_input import CheckedLoader, DateError, NestingError

_KEY_AT_LINE_START = re.compile(r"^\s*-?\s*([A-Za-z_][\w.-]*)\s*:")
_MERGE_TAG = "tag:yaml.org,2002:merge"
_INT_TAG = "tag:yaml.org,2002:int"
_MAX_INT_CHARS = 40  # Python refuses to convert ints of > 4300 digits; no contract needs 40


class YamlSourceError(ValueError):
    """The file is not the YAML a contract needs; carries the line and the offending key."""

    def __init__(self, line: int, field: str, message: str, fix: str) -> None:
        super().__init__(message)
        self.line = line
        self.field = field
        self.message = message
        self.fix = fix


@dataclass(frozen=True, slots=True)
class LoadedYaml:
    """The data of one YAML document and the 1-based line of every key path in it."""

    data: Any
    lines: Mapping[KeyPath, int]

    def line_of(self, path: KeyPath) -> int:
        """The line of `path`, else of its nearest written ancestor, else 1."""
        for end in range(len(path), 0, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return line
        return 1

    def has(self, path: KeyPath) -> bool:
        return path in self.lines


def _record(node: yaml.Node, path: KeyPath, lines: dict[KeyPath, int]) -> None:
    if isinstance(node, yaml.ScalarNode):
        if node.tag == _INT_TAG and len(str(node.value)) > _MAX_INT_CHARS:
            raise YamlSourceError(
                node.start_mark.line + 1,
                dotted(path),
                f"a number of {len(str(node.value))} characters is far too large",
                "write a realistic value (see docs/contracts.md for each field's limit)",
            )
    elif isinstance(node, yaml.MappingNode):
        first_seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            line = key_node.start_mark.line + 1
            child = (*path, key)
            if key_node.tag == _MERGE_TAG:
                raise YamlSourceError(
                    line,
                    dotted(child),
                    "merge keys ('<<') are not allowed in a contract",
                    "write each field out under its own key",
                )
            if key in first_seen:
                raise YamlSourceError(
                    line,
                    dotted(child),
                    f"written twice in the same mapping (first on line {first_seen[key]})",
                    "keep one of the two lines",
                )
            first_seen[key] = line
            lines[child] = line
            _record(value_node, child, lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = (*path, index)
            lines[child] = item.start_mark.line + 1
            _record(item, child, lines)


def _field_on_line(text: str, line: int) -> str:
    """The key written on `line`, or on the nearest line above it that has one."""
    lines = text.splitlines()
    for index in range(min(line, len(lines)) - 1, -1, -1):
        match = _KEY_AT_LINE_START.match(lines[index])
        if match:
            return match.group(1)
    return "(document)"


def decode_utf8(data: bytes, kind: str = "contract") -> str:
    """The UTF-8 text of a `kind` file's bytes; `YamlSourceError` at the line of the first byte
    that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise YamlSourceError(
            data[: error.start].count(b"\n") + 1,
            "(encoding)",
            f"byte 0x{data[error.start]:02x} at offset {error.start} is not UTF-8",
            f"save the file as UTF-8 (a {kind} file is UTF-8 text)",
        ) from error


class _ContractLoader(CheckedLoader):
    """The checked loader (real dates, bounded nesting), refusing anchors and aliases where
    they are written."""

    def __init__(self, text: str, kind: str) -> None:
        super().__init__(text)
        self.text = text
        self.kind = kind

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]
        alias = isinstance(event, yaml.AliasEvent)
        anchor = getattr(event, "anchor", None)
        if alias or anchor is not None:
            mark = event.start_mark
            line = mark.line + 1 if mark is not None else 1
            what = f"alias '*{anchor}'" if alias else f"anchor '&{anchor}'"
            raise YamlSourceError(
                line,
                _field_on_line(self.text, line),
                f"{what}: anchors and aliases are not allowed in a {self.kind} file",
                "write the value out in full where it applies, and remove the '&' anchor",
            )
        return super().compose_node(parent, index)


def _single_document(loader: yaml.SafeLoader, kind: str) -> yaml.Node | None:
    """`get_single_node`, but a second document is refused at its own line, not a key's."""
    if not loader.check_node():  # drops the stream start; False when the stream is empty
        return None
    node = loader.compose_document()
    if loader.check_node():
        second: yaml.Event = loader.current_event  # the next document's start, peeked
        mark = second.start_mark
        raise YamlSourceError(
            mark.line + 1 if mark is not None else 1,
            "(document)",
            f"a second YAML document starts here; a {kind} file holds one document",
            f"keep one {kind} per file: move this document to a file of its own, or delete "
            "the '---' line",
        )
    return node


def load_yaml_with_lines(text: str, kind: str = "contract") -> LoadedYaml:
    """Parse one YAML document of a `kind` file (a contract, an accounting rule); raise
    `YamlSourceError` naming the line of a syntax error."""
    try:
        loader = _ContractLoader(text, kind)
    except yaml.reader.ReaderError as error:
        line = text[: error.position].count("\n") + 1
        raise YamlSourceError(
            line,
            _field_on_line(text, line),
            f"character {error.character!r} is not allowed in YAML",
            "remove the control character from this line",
        ) from error
    try:
        node = _single_document(loader, kind)
        lines: dict[KeyPath, int] = {}
        if node is None:
            return LoadedYaml(data=None, lines=lines)
        _record(node, (), lines)
        data = loader.construct_document(node)
    except (DateError, NestingError) as error:
        mark = error.problem_mark
        line = mark.line + 1 if mark is not None else 1
        fix = (
            "write a date that exists, e.g. 2026-12-01T06:00:00Z"
            if isinstance(error, DateError)
            else f"write the value flat: a {kind} nests a few levels at most"
        )
        raise YamlSourceError(line, _field_on_line(text, line), str(error.problem), fix) from error
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark is not None else 1
        problem = error.problem or "not valid YAML"
        context = f" ({error.context})" if error.context else ""
        raise YamlSourceError(
            line,
            _field_on_line(text, line),
            f"YAML syntax error: {problem}{context}",
            "fix the YAML on this line (indentation, a missing ':' or an unclosed quote), "
            f"and keep one {kind} per file",
        ) from error
    except yaml.YAMLError as error:
        raise YamlSourceError(
            1, "(document)", f"YAML error: {error}", "fix the YAML syntax of the file"
        ) from error
    finally:
        loader.dispose()
    return LoadedYaml(data=data, lines=lines)
