from array import array
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
def frame_rows(
    topic: str,
    partition: int,
    first: int,
    rows: tuple[
        list[bytes | None], list[bytes | None], list[tuple[tuple[str, bytes], ...]], list[int]
    ],
    sync: bytes,
) -> tuple[bytes, list[Record]]: ...
def partition_for(key: bytes, partitions: int, /) -> int: ...
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

class RecordQueue:
    def __init__(self) -> None: ...
    def _route(self, topic: str) -> tuple[int, list[Any]]: ...
    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: tuple[tuple[str, bytes], ...] = (),
        timestamp_ms: int | None = None,
    ) -> None: ...
    def take(self) -> tuple[list[int], array[int]]: ...
    def queued(self) -> int: ...
