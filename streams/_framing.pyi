from streams.log import Record

def bind(cls: type[Record], /) -> None: ...
def encode_block(records: list[Record], sync: bytes) -> bytes: ...
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
