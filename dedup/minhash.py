"""MinHash signatures over hashed shingles, vectorised with numpy.

The hash family is datatrove's (and datasketch's "legacy" scheme): ``h_i(x) = ((a_i*x + b_i) mod 2^64)
mod (2^61 - 1)`` with (a, b) drawn by ``np.random.RandomState(seed)`` exactly as datatrove does,
so a signature here equals ``MinhashDedupSignature.get_signature`` bit for bit. Speed comes from
(1) the Mersenne reduction done with shifts and masks instead of a 64-bit division, (2) a
(hashes x shingles) layout processed in cache-sized chunks of shingles from many documents at
once, and (3) a segmented ``np.minimum.reduceat`` instead of one reduction per document.
"""

from __future__ import annotations

import numpy as np

MERSENNE_61 = np.uint64((1 << 61) - 1)
_U32_MASK = np.uint64(0xFFFFFFFF)
_SHIFT_61 = np.uint64(61)


def permutation_params(num_hashes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) of the universal hashes, drawn like datatrove's MinhashDedupSignature.parameters."""
    gen = np.random.RandomState(seed)
    a = gen.randint(1, MERSENNE_61, dtype=np.uint64, size=(1, num_hashes))
    b = gen.randint(0, MERSENNE_61, dtype=np.uint64, size=(1, num_hashes))
    return a.ravel(), b.ravel()


class MinHasher:
    """Signatures for many documents at once: shingles are concatenated, ``offsets`` delimit docs."""

    def __init__(self, num_hashes: int, seed: int, bits: int = 64, chunk_shingles: int = 2048) -> None:
        if bits not in (32, 64):
            raise ValueError(f"bits must be 32 or 64, got {bits}")
        self.num_hashes = num_hashes
        self.bits = bits
        self.chunk = chunk_shingles
        a, b = permutation_params(num_hashes, seed)
        self.a = a[:, None]
        self.b = b[:, None]
        shape = (num_hashes, chunk_shingles)
        self._t = np.empty(shape, dtype=np.uint64)
        self._y = np.empty(shape, dtype=np.uint64)
        self._ge = np.empty(shape, dtype=bool)

    def _permute(self, x: np.ndarray) -> np.ndarray:
        """h_i(x) for a chunk of shingles, as a (num_hashes, len(x)) view into reused buffers."""
        n = len(x)
        t, y, ge = self._t[:, :n], self._y[:, :n], self._ge[:, :n]
        np.multiply(self.a, x[None, :], out=t)  # wraps mod 2^64, as in datatrove
        t += self.b
        np.bitwise_and(t, MERSENNE_61, out=y)  # t mod (2^61-1) = (t & p) + (t >> 61), then one p off
        t >>= _SHIFT_61
        y += t
        np.greater_equal(y, MERSENNE_61, out=ge)
        np.subtract(y, MERSENNE_61, out=y, where=ge)
        if self.bits == 32:
            y &= _U32_MASK
        return y

    def signatures(self, shingles: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """(n_docs, num_hashes) minima; ``offsets`` (n_docs + 1) must be strictly increasing."""
        shingles = np.ascontiguousarray(shingles, dtype=np.uint64)
        offsets = np.asarray(offsets, dtype=np.int64)
        n_docs = len(offsets) - 1
        if n_docs < 1:
            return np.empty((0, self.num_hashes), dtype=np.uint64)
        if np.any(np.diff(offsets) <= 0) or offsets[0] != 0 or offsets[-1] != len(shingles):
            raise ValueError("offsets must start at 0, end at len(shingles) and give every doc a shingle")
        out = np.full((n_docs, self.num_hashes), np.iinfo(np.uint64).max, dtype=np.uint64)
        total = len(shingles)
        for c0 in range(0, total, self.chunk):
            c1 = min(c0 + self.chunk, total)
            d0 = int(np.searchsorted(offsets, c0, side="right")) - 1
            d1 = int(np.searchsorted(offsets, c1, side="left"))
            starts = np.maximum(offsets[d0:d1], c0) - c0
            mins = np.minimum.reduceat(self._permute(shingles[c0:c1]), starts, axis=1)
            np.minimum(out[d0:d1], mins.T, out=out[d0:d1])
        dtype = np.uint32 if self.bits == 32 else np.uint64
        return out.astype(dtype, copy=False)


def fmix64(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser: a bijection that spreads every input bit over the output."""
    h = h ^ (h >> np.uint64(33))
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


_FMIX_INV_1 = np.uint64(pow(0xFF51AFD7ED558CCD, -1, 1 << 64))
_FMIX_INV_2 = np.uint64(pow(0xC4CEB9FE1A85EC53, -1, 1 << 64))


def fmix64_inverse(h: np.ndarray) -> np.ndarray:
    """``fmix64``'s inverse (an xor-shift by 33 undoes itself on 64 bits; the products by modular inverses)."""
    h = h ^ (h >> np.uint64(33))
    h *= _FMIX_INV_2
    h ^= h >> np.uint64(33)
    h *= _FMIX_INV_1
    h ^= h >> np.uint64(33)
    return h


def band_keys(
    signatures: np.ndarray,
    num_buckets: int,
    rows: int,
    salt: np.ndarray | None = None,
) -> np.ndarray:
    """One 64-bit key per (document, band): equal bands give equal keys.

    Keys digest the band's ``rows`` hash values; two different bands collide with probability
    2^-64, i.e. about 3e-8 false candidate pairs per band in a dump of a million documents.
    ``salt`` (one value per document) separates dedup groups such as dumps.
    """
    n = len(signatures)
    v = np.ascontiguousarray(signatures, dtype=np.uint64).reshape(n, num_buckets, rows)
    k = fmix64(v[:, :, 0] + np.uint64(0x9E3779B97F4A7C15))
    for r in range(1, rows):
        k = fmix64(k ^ v[:, :, r])
    if salt is not None:
        k = fmix64(k ^ np.asarray(salt, dtype=np.uint64)[:, None])
    return k
