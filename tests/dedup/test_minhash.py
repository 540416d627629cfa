"""MinHash signatures and band keys against datatrove's MinhashDedupSignature (the oracle)."""

from __future__ import annotations

import numpy as np
import pytest
from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupSignature
from datatrove.utils.hashing import HashConfig

from dedup.minhash import MinHasher, band_keys, permutation_params


def _datatrove(tmp_path, bits: int = 64, seed: int = 1) -> MinhashDedupSignature:
    config = MinhashConfig(seed=seed, hash_config=HashConfig(precision=bits))
    return MinhashDedupSignature(output_folder=str(tmp_path), config=config)


def _random_docs(rng: np.random.Generator, lengths: list[int]) -> tuple[np.ndarray, np.ndarray]:
    shingles = rng.integers(0, 2**64, size=sum(lengths), dtype=np.uint64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return shingles, offsets


def test_parameters_are_datatrove_parameters(tmp_path):
    a, b = permutation_params(112, seed=7)
    da, db = _datatrove(tmp_path, seed=7).parameters
    assert np.array_equal(a, da.ravel()) and np.array_equal(b, db.ravel())


@pytest.mark.parametrize("bits", [64, 32])
def test_signatures_equal_datatrove_bit_for_bit(tmp_path, bits):
    rng = np.random.default_rng(0)
    # lengths straddle the shingle chunk (64) so documents are split across chunks
    lengths = [1, 2, 5, 63, 64, 65, 200, 3, 1000, 1, 130]
    shingles, offsets = _random_docs(rng, lengths)
    ours = MinHasher(112, seed=1, bits=bits, chunk_shingles=64).signatures(shingles, offsets)
    oracle = _datatrove(tmp_path, bits=bits)
    for i in range(len(lengths)):
        doc = shingles[offsets[i] : offsets[i + 1]].reshape(-1, 1)
        expected = np.concatenate([np.asarray(band, dtype=np.uint64) for band in oracle.get_signature(doc)])
        assert np.array_equal(ours[i].astype(np.uint64), expected), f"document {i} ({lengths[i]} shingles)"


def test_signature_depends_on_the_set_only():
    rng = np.random.default_rng(1)
    doc = rng.integers(0, 2**64, size=300, dtype=np.uint64)
    shuffled = np.concatenate([rng.permutation(doc), doc[:50]])
    hasher = MinHasher(112, seed=1)
    one = hasher.signatures(doc, np.array([0, len(doc)]))
    two = hasher.signatures(shuffled, np.array([0, len(shuffled)]))
    assert np.array_equal(one, two)


def test_documents_without_shingles_are_rejected():
    hasher = MinHasher(16, seed=1)
    with pytest.raises(ValueError, match="every doc a shingle"):
        hasher.signatures(np.arange(3, dtype=np.uint64), np.array([0, 3, 3]))


def test_band_keys_equal_exactly_when_bands_equal():
    rng = np.random.default_rng(2)
    sigs = rng.integers(0, 2**61, size=(3, 112), dtype=np.uint64)
    sigs[1] = sigs[0]
    sigs[1, 8 * 5 + 3] += np.uint64(1)  # one value of band 5 differs
    sigs[2, 8 * 2 : 8 * 3] = sigs[0, 8 * 2 : 8 * 3]  # band 2 equal, all else different
    keys = band_keys(sigs, 14, 8)
    same01 = keys[0] == keys[1]
    assert same01.sum() == 13 and not same01[5]
    same02 = keys[0] == keys[2]
    assert same02.sum() == 1 and same02[2]


def test_salt_separates_groups():
    sigs = np.ones((2, 112), dtype=np.uint64)
    assert np.array_equal(*band_keys(sigs, 14, 8))
    salted = band_keys(sigs, 14, 8, salt=np.array([1, 2], dtype=np.uint64))
    assert not np.any(salted[0] == salted[1])
