"""Merkle trees in the manner of Certificate Transparency (RFC 9162, section 2.1), pure.

- leaf hash: ``SHA-256(0x00 || leaf)``; interior node: ``SHA-256(0x01 || left || right)``;
  the tree over n leaves splits at the largest power of two below n (left-balanced).
- inclusion proofs (the audit path of 2.1.3) and their verification (2.1.3.2);
- consistency proofs between the tree of the first m leaves and of n leaves (2.1.4) and their
  verification (2.1.4.2). A consistency proof needs, of the first m leaves, only the roots of
  the perfect subtrees that make up the tree of size m (its *frontier*, a few dozen hashes):
  the archive keeps them in each month's manifest, so next month's export can prove that it
  extends this one without reading this month again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

Hash = bytes


def leaf_hash(leaf: bytes) -> Hash:
    return hashlib.sha256(b"\x00" + leaf).digest()


def node_hash(left: Hash, right: Hash) -> Hash:
    return hashlib.sha256(b"\x01" + left + right).digest()


EMPTY_ROOT = hashlib.sha256(b"").digest()


def _split(n: int) -> int:
    """The largest power of two smaller than n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def root_of(leaves: Sequence[Hash]) -> Hash:
    """The tree head over leaf hashes (iterative, level by level, as the recursion gives)."""
    if not leaves:
        return EMPTY_ROOT
    level = list(leaves)
    # A left-balanced tree is the same as pairing level by level, carrying an odd last node up.
    while len(level) > 1:
        paired = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


def inclusion_proof(index: int, leaves: Sequence[Hash]) -> list[Hash]:
    """The audit path of leaf `index` in the tree over `leaves` (RFC 9162 PATH)."""
    if not 0 <= index < len(leaves):
        raise ValueError(f"leaf {index} is not in a tree of {len(leaves)}")
    path: list[Hash] = []
    lo, hi = 0, len(leaves)
    spans: list[tuple[int, int]] = []
    while hi - lo > 1:
        k = _split(hi - lo)
        if index < lo + k:
            spans.append((lo + k, hi))
            hi = lo + k
        else:
            spans.append((lo, lo + k))
            lo = lo + k
    for a, b in reversed(spans):
        path.append(root_of(leaves[a:b]))
    return path


def verify_inclusion(leaf: Hash, index: int, size: int, path: Sequence[Hash], root: Hash) -> bool:
    """RFC 9162 2.1.3.2: does `path` lead from leaf `index` of a tree of `size` to `root`?"""
    if not 0 <= index < size:
        return False
    fn, sn = index, size - 1
    r = leaf
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


# -- the frontier: a tree of m leaves as the roots of its perfect subtrees -----------------


def frontier_spans(size: int) -> list[tuple[int, int]]:
    """The perfect subtrees a tree of `size` leaves is made of, largest first: (start, end)."""
    spans, start = [], 0
    for bit in reversed(range(size.bit_length())):
        width = 1 << bit
        if size & width:
            spans.append((start, start + width))
            start += width
    return spans


def frontier_of(leaves: Sequence[Hash]) -> list[Hash]:
    return [root_of(leaves[a:b]) for a, b in frontier_spans(len(leaves))]


def root_of_frontier(frontier: Sequence[Hash]) -> Hash:
    if not frontier:
        return EMPTY_ROOT
    r = frontier[-1]
    for h in reversed(frontier[:-1]):
        r = node_hash(h, r)
    return r


class Extension:
    """A tree of `old_size` leaves (known by its frontier) extended by `new_leaves`."""

    def __init__(self, old_size: int, old_frontier: Sequence[Hash], new_leaves: Sequence[Hash]):
        spans = frontier_spans(old_size)
        if len(spans) != len(old_frontier):
            raise ValueError(
                f"a tree of {old_size} leaves has {len(spans)} frontier hashes, not "
                f"{len(old_frontier)}"
            )
        self.old_size = old_size
        self.size = old_size + len(new_leaves)
        # The spans' roots as they are computed: the root, the frontier and the proof share
        # them (each new leaf is hashed into the tree once, not once per question).
        self._old = dict(zip(spans, old_frontier, strict=True))
        self._new = new_leaves

    def _mth(self, a: int, b: int) -> Hash:
        found = self._old.get((a, b))
        if found is not None:
            return found
        if a >= self.old_size:
            found = self._old[(a, b)] = root_of(self._new[a - self.old_size : b - self.old_size])
            return found
        if b - a < 2:  # pragma: no cover - a leaf of the old tree is always in a frontier span
            raise ValueError(f"leaf {a} of the earlier tree is not known")
        k = _split(b - a)
        return node_hash(self._mth(a, a + k), self._mth(a + k, b))

    def root(self) -> Hash:
        # The same as MTH(0, size) (a left-balanced tree is its frontier folded from the right),
        # from spans the frontier computes anyway.
        return root_of_frontier(self.frontier())

    def frontier(self) -> list[Hash]:
        return [self._mth(a, b) for a, b in frontier_spans(self.size)]

    def consistency_proof(self) -> list[Hash]:
        """RFC 9162 PROOF(m, D[n]) for m = old size (empty when m is 0 or m = n)."""
        m = self.old_size
        if m in (0, self.size):
            return []
        return self._subproof(m, 0, self.size, True)

    def _subproof(self, m: int, a: int, b: int, complete: bool) -> list[Hash]:
        n = b - a
        if m == n:
            return [] if complete else [self._mth(a, b)]
        k = _split(n)
        if m <= k:
            return [*self._subproof(m, a, a + k, complete), self._mth(a + k, b)]
        return [*self._subproof(m - k, a + k, b, False), self._mth(a, a + k)]


def verify_consistency(
    first_size: int, first_root: Hash, second_size: int, second_root: Hash, proof: Sequence[Hash]
) -> bool:
    """RFC 9162 2.1.4.2: does `proof` show the second tree extends the first?"""
    if first_size == 0:
        return not proof  # an empty tree is a prefix of every tree
    if first_size == second_size:
        return not proof and first_root == second_root
    if first_size > second_size or not proof:
        return False
    path = list(proof)
    if first_size & (first_size - 1) == 0:  # a power of two: the first tree is a subtree
        path.insert(0, first_root)
    fn, sn = first_size - 1, second_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == first_root and sr == second_root and sn == 0


Chained = tuple[int, Hash, list[Hash], list[Hash]]
"""A tree extended (`Extension`): its size, root, consistency proof and frontier."""


def chained(old_size: int, old_frontier: Sequence[Hash], new_leaves: Sequence[Hash]) -> Chained:
    """What a manifest says of the tree of `old_size` leaves extended by `new_leaves`."""
    extension = Extension(old_size, old_frontier, new_leaves)
    return extension.size, extension.root(), extension.consistency_proof(), extension.frontier()
