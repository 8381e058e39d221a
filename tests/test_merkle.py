"""The archive's Merkle trees against RFC 9162's definitions: tree heads, inclusion proofs and
consistency proofs (made from a frontier of the earlier tree), and that a changed leaf or a
changed proof fails."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from replay.archive.merkle import (
    EMPTY_ROOT,
    Extension,
    frontier_of,
    inclusion_proof,
    leaf_hash,
    root_of,
    root_of_frontier,
    verify_consistency,
    verify_inclusion,
)


def mth(leaves: list[bytes]) -> bytes:
    """RFC 9162 2.1.1, literally (recursive, over leaf hashes)."""
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return leaves[0]
    k = 1 << ((n - 1).bit_length() - 1)
    return hashlib.sha256(b"\x01" + mth(leaves[:k]) + mth(leaves[k:])).digest()


def leaves_of(n: int) -> list[bytes]:
    return [leaf_hash(i.to_bytes(4, "big")) for i in range(n)]


def test_the_tree_head_of_known_sizes_matches_the_rfc_recursion() -> None:
    assert root_of([]) == EMPTY_ROOT
    for n in range(1, 70):
        leaves = leaves_of(n)
        assert root_of(leaves) == mth(leaves)
        assert root_of_frontier(frontier_of(leaves)) == mth(leaves)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=300), st.data())
def test_every_inclusion_proof_verifies_and_a_changed_leaf_does_not(
    n: int, data: st.DataObject
) -> None:
    leaves = leaves_of(n)
    root = root_of(leaves)
    index = data.draw(st.integers(min_value=0, max_value=n - 1))
    path = inclusion_proof(index, leaves)
    assert verify_inclusion(leaves[index], index, n, path, root)
    assert not verify_inclusion(leaf_hash(b"changed"), index, n, path, root)
    if n > 1:
        assert not verify_inclusion(leaves[index], (index + 1) % n, n, path, root)
    if path:
        bent = [*path[:-1], hashlib.sha256(path[-1]).digest()]
        assert not verify_inclusion(leaves[index], index, n, bent, root)


@settings(max_examples=80, deadline=None)
@given(st.integers(min_value=0, max_value=200), st.integers(min_value=0, max_value=200))
def test_a_tree_extended_from_its_frontier_proves_it_extends_the_earlier_one(
    m: int, added: int
) -> None:
    leaves = leaves_of(m + added)
    old, new = leaves[:m], leaves[m:]
    ext = Extension(m, frontier_of(old), new)
    assert ext.size == m + added
    assert ext.root() == mth(leaves)
    assert ext.frontier() == frontier_of(leaves)
    proof = ext.consistency_proof()
    assert verify_consistency(m, mth(old), m + added, ext.root(), proof)
    if m and added:
        assert not verify_consistency(m, leaf_hash(b"another past"), m + added, ext.root(), proof)
        assert not verify_consistency(m, mth(old), m + added, leaf_hash(b"forged"), proof)
        rewritten = [leaf_hash(b"rewritten"), *leaves[1:]]
        assert not verify_consistency(m, mth(old), m + added, mth(rewritten), proof)
