"""Sealing a part: AES-256-GCM in chunks under the generation's data key (ADR-19).

A sealed part is ``SPCK`` + a version byte + an 8-byte random nonce prefix, then chunks of at
most `CHUNK_BYTES` of plaintext, each stored as its 4-byte big-endian length and its ciphertext
with the GCM tag. Chunk ``i`` is sealed with the nonce ``prefix || i`` and authenticated with
the part's context (workload, unit, generation, part name), its index and whether it is the
last: so a chunk moved, dropped, repeated, cut short or taken from another part, generation or
workload is refused, and so is a part that ends before its last chunk. Parts stream through in
chunks, so a checkpoint of gigabytes is never held in memory whole.
"""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass
from typing import BinaryIO

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

MAGIC = b"SPCK\x01"
CHUNK_BYTES = 1 << 20
_PREFIX_BYTES = 8
_TAG_BYTES = 16
_LENGTH = struct.Struct(">I")


class SealError(ValueError):
    """A sealed part that does not open: altered, cut short, or under another key."""


@dataclass(frozen=True, slots=True)
class Sealed:
    plain_bytes: int
    stored_bytes: int
    sha256: str
    """Of the stored (sealed) bytes, as the manifest names them."""


def _aad(context: bytes, index: int, last: bool) -> bytes:
    return context + struct.pack(">QB", index, 1 if last else 0)


def seal(key: bytes, context: bytes, source: BinaryIO, sink: BinaryIO) -> Sealed:
    """Seal everything `source` holds into `sink`."""
    aead = AESGCM(key)
    prefix = os.urandom(_PREFIX_BYTES)
    digest = hashlib.sha256()
    stored = plain = 0

    def out(data: bytes) -> None:
        nonlocal stored
        sink.write(data)
        digest.update(data)
        stored += len(data)

    out(MAGIC + prefix)
    index = 0
    chunk = source.read(CHUNK_BYTES)
    while True:
        following = source.read(CHUNK_BYTES) if len(chunk) == CHUNK_BYTES else b""
        last = not following
        nonce = prefix + struct.pack(">I", index)
        sealed = aead.encrypt(nonce, chunk, _aad(context, index, last))
        out(_LENGTH.pack(len(sealed)) + sealed)
        plain += len(chunk)
        if last:
            break
        chunk, index = following, index + 1
    return Sealed(plain, stored, digest.hexdigest())


def unseal(key: bytes, context: bytes, source: BinaryIO, sink: BinaryIO) -> int:
    """Open a sealed part from `source` (seekable) into `sink`; the plaintext's size. Raises
    `SealError` (and `sink` must then be thrown away: chunks before the bad one were written)."""
    aead = AESGCM(key)
    head = source.read(len(MAGIC) + _PREFIX_BYTES)
    if len(head) != len(MAGIC) + _PREFIX_BYTES or not head.startswith(MAGIC):
        raise SealError("not a sealed part (no SPCK header)")
    prefix = head[len(MAGIC) :]
    index = plain = 0
    while True:
        length_bytes = source.read(_LENGTH.size)
        if len(length_bytes) != _LENGTH.size:
            raise SealError(f"cut short before chunk {index} (its last chunk is missing)")
        (length,) = _LENGTH.unpack(length_bytes)
        if length < _TAG_BYTES or length > CHUNK_BYTES + _TAG_BYTES:
            raise SealError(f"chunk {index}: a length of {length} bytes is not possible")
        sealed = source.read(length)
        if len(sealed) != length:
            raise SealError(f"chunk {index}: cut short")
        nonce = prefix + struct.pack(">I", index)
        last = _at_end(source)
        try:
            chunk = aead.decrypt(nonce, sealed, _aad(context, index, last))
        except InvalidTag:
            raise SealError(
                f"chunk {index} does not authenticate: altered, out of place, or under another key"
            ) from None
        sink.write(chunk)
        plain += len(chunk)
        if last:
            return plain
        index += 1


def _at_end(source: BinaryIO) -> bool:
    here = source.tell()
    end = source.seek(0, os.SEEK_END)
    source.seek(here)
    return here == end
