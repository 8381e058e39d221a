from collections.abc import Callable
from typing import Any

from streams.log import Record

def bind(cls: type[Record], /) -> None: ...
def encode_block(records: list[Record], sync: bytes) -> bytes: ...
def constructor(
    cls: type[Any], names: tuple[str, ...], frozen: bool = False, /
) -> Callable[..., Any]: ...
def immutable(cls: type[Any], /) -> None: ...
def settle(value: object, /) -> bool: ...
def make_records(
    topic: str,
    partition: int,
    first: int,
    rows: list[tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...], int]],
) -> list[Record]: ...
def kafka_records(messages: list[Any], /) -> list[Record] | None: ...
def whole_records(
    data: bytes,
    at: int,
    end: int,
    first: int,
    limit: int | None,
    count: int,
    topic: str,
    partition: int,
) -> list[Record] | None: ...
