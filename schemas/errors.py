"""Typed errors for records that cannot be decoded, each naming where the record came from."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a record was read: the log position a consumer can commit past."""

    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


UNKNOWN_ORIGIN = Origin(topic="?", partition=-1, offset=-1)


class CodecError(ValueError):
    """A record that cannot be decoded (or an event that cannot be encoded).

    `reason` is a short machine-stable kind (``truncated``, ``bad_magic``, ...);
    the message says what was wrong, where, and what to do about it.
    """

    reason = "codec_error"

    def __init__(self, detail: str, origin: Origin = UNKNOWN_ORIGIN) -> None:
        self.detail = detail
        self.origin = origin
        super().__init__(f"{self.reason} at {origin}: {detail}")

    def at(self, origin: Origin) -> CodecError:
        """The same error, placed at a log position (codecs do not know where bytes came from)."""
        error = type(self)(self.detail, origin)
        error.__cause__ = self.__cause__
        return error


class TruncatedRecordError(CodecError):
    reason = "truncated"


class BadMagicError(CodecError):
    reason = "bad_magic"


class UnknownSchemaError(CodecError):
    reason = "unknown_schema"


class CorruptRecordError(CodecError):
    reason = "corrupt"


class EncodeError(CodecError):
    reason = "unencodable"
