"""Reading YAML a person wrote: errors at a line in words, never a Python exception.

PyYAML's safe loader turns ``2026-13-45`` into a `ValueError` from `datetime.date` with no line,
and recurses once per level of nesting until Python's stack runs out. `CheckedLoader` reports
both as YAML errors at their mark (line and column), like any syntax error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError

# Far more than any catalogue or contract needs, far less than Python's recursion limit.
MAX_NESTING = 64
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


class NestingError(ComposerError):
    """A document nested deeper than `MAX_NESTING`."""


class DateError(ConstructorError):
    """A date or time that does not exist (``2026-13-45``)."""


class CheckedLoader(yaml.SafeLoader):
    """The safe loader, refusing impossible dates and nesting deeper than `MAX_NESTING`."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._nesting = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self._nesting += 1
        try:
            if self._nesting > MAX_NESTING:
                event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]
                mark = event.start_mark if isinstance(event.start_mark, yaml.Mark) else None
                raise NestingError(None, None, f"nested more than {MAX_NESTING} levels deep", mark)
            return super().compose_node(parent, index)
        finally:
            self._nesting -= 1


def _checked_timestamp(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    try:
        return loader.construct_yaml_timestamp(node)
    except ValueError as error:
        raise DateError(
            None, None, f"{node.value} is not a real date or time ({error})", node.start_mark
        ) from error


CheckedLoader.add_constructor(_TIMESTAMP_TAG, _checked_timestamp)


class NotUtf8Error(ValueError):
    """A text file with bytes that are not UTF-8; the message names the line."""


def read_utf8(path: Path) -> str:
    """The text of `path`; a byte that is not UTF-8 is named with its line."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise NotUtf8Error(
            f"line {line}: byte 0x{data[error.start]:02x} is not UTF-8 (save the file as UTF-8)"
        ) from error


def load_checked(text: str) -> Any:
    """One YAML document through `CheckedLoader`; errors are `yaml.YAMLError` with a mark."""
    loader = CheckedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


__all__ = [
    "MAX_NESTING",
    "CheckedLoader",
    "DateError",
    "NestingError",
    "NotUtf8Error",
    "load_checked",
    "read_utf8",
]
