"""Read a fastText model file (``.bin`` or quantized ``.ftz``) into numpy arrays.

The binding hides what a fast predictor needs (the pruned n-gram index, the quantized matrices), so
this module parses the format of fastText 0.9 (``FastText::saveModel``) directly: magic and version,
``Args``, ``Dictionary``, the input matrix (dense, memory-mapped; or product-quantized, decoded once)
and the output matrix. Nothing here predicts; see ``classifiers.ft_predict``.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

FASTTEXT_MAGIC = 793712314
FASTTEXT_VERSION = 12
LOSS_NAMES = {1: "hs", 2: "ns", 3: "softmax", 4: "ova"}
MODEL_NAMES = {1: "cbow", 2: "sg", 3: "supervised"}
LABEL_PREFIX = "__label__"  # not stored in the file; fastText's default
KSUB = 256  # product quantizer: 8 bits per sub-vector code


class FastTextFormatError(ValueError):
    """The file is not a fastText model this reader understands (one line, names the file)."""


@dataclass(frozen=True)
class FastTextArgs:
    dim: int
    word_ngrams: int
    loss: str
    model: str
    bucket: int
    minn: int
    maxn: int


@dataclass
class FastTextFile:
    """The parts of a model that inference needs; ``input`` and ``output`` are float32 matrices."""

    path: str
    args: FastTextArgs
    words: list[str]  # word entries, in id order (id = row of ``input``)
    labels: list[str]  # label entries without the prefix, in label-id order
    label_counts: np.ndarray  # int64, used to rebuild the hierarchical-softmax tree
    prune_size: int  # -1: not pruned (row = nwords + bucket id); >= 0: pruned via prune_keys/values
    prune_keys: np.ndarray  # bucket ids kept by quantization
    prune_values: np.ndarray  # their row offsets (row = nwords + value)
    input: np.ndarray
    output: np.ndarray
    _bucket_offsets: np.ndarray | None = field(default=None, repr=False)

    @property
    def nwords(self) -> int:
        return len(self.words)

    def bucket_offsets(self) -> np.ndarray:
        """Bucket id -> row offset after ``nwords`` in a pruned model, -1 for a dropped bucket."""
        if self._bucket_offsets is None:
            table = np.full(max(self.args.bucket, 1), -1, dtype=np.int32)
            table[self.prune_keys] = self.prune_values
            self._bucket_offsets = table
        return self._bucket_offsets


class _Cursor:
    def __init__(self, buf, path: str):
        self.buf, self.off, self.path = buf, 0, path

    def read(self, fmt: str) -> tuple:
        fmt = "<" + fmt
        try:
            values = struct.unpack_from(fmt, self.buf, self.off)
        except struct.error:
            raise FastTextFormatError(f"{self.path}: truncated fastText model") from None
        self.off += struct.calcsize(fmt)
        return values

    def array(self, dtype: str, count: int) -> np.ndarray:
        nbytes = np.dtype(dtype).itemsize * count
        if count < 0 or self.off + nbytes > len(self.buf):
            raise FastTextFormatError(f"{self.path}: truncated fastText model")
        out = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.off)
        self.off += nbytes
        return out

    def cstring(self) -> bytes:
        end = self.buf.find(b"\0", self.off)
        if end < 0:
            raise FastTextFormatError(f"{self.path}: truncated fastText model")
        out = bytes(self.buf[self.off : end])
        self.off = end + 1
        return out


def _read_pq(cur: _Cursor) -> tuple[int, int, int, int, np.ndarray]:
    dim, nsubq, dsub, lastdsub = cur.read("iiii")
    return dim, nsubq, dsub, lastdsub, cur.array("<f4", dim * KSUB)


def _decode_pq(codes: np.ndarray, rows: int, pq: tuple) -> np.ndarray:
    """Every row of a product-quantized matrix as float32 (``ProductQuantizer::addcode``)."""
    dim, nsubq, dsub, lastdsub, centroids = pq
    codes = codes.reshape(rows, nsubq)
    out = np.empty((rows, dim), dtype=np.float32)
    for m in range(nsubq):
        d = lastdsub if m == nsubq - 1 else dsub
        table = centroids[m * KSUB * dsub : m * KSUB * dsub + KSUB * d].reshape(KSUB, d)
        out[:, m * dsub : m * dsub + d] = table[codes[:, m]]
    return out


def _read_matrix(cur: _Cursor, quantized: bool) -> np.ndarray:
    if not quantized:  # a view of the memory-mapped file: lid.176.bin or GlotLID stay on disk until read
        rows, cols = cur.read("qq")
        return cur.array("<f4", rows * cols).reshape(rows, cols)
    (qnorm,) = cur.read("?")
    rows, cols = cur.read("qq")
    (codesize,) = cur.read("i")
    codes = cur.array("u1", codesize)
    pq = _read_pq(cur)
    matrix = _decode_pq(codes, rows, pq)
    if qnorm:
        norm_codes = cur.array("u1", rows)
        norms = _read_pq(cur)[4]
        matrix *= norms[norm_codes][:, None]  # float32 product, as addcode's alpha * c
    return matrix


def read_fasttext(path: str | Path) -> FastTextFile:
    """Parse ``path``; raise ``FastTextFormatError`` (one line) when it is not a fastText model."""
    path = str(path)
    try:
        with open(path, "rb") as f:
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as err:
        raise FastTextFormatError(f"{path}: cannot read fastText model ({err})") from None
    cur = _Cursor(buf, path)
    magic, version = cur.read("ii")
    if magic != FASTTEXT_MAGIC or not 11 <= version <= FASTTEXT_VERSION:
        raise FastTextFormatError(f"{path}: not a fastText model (bad magic or version)")
    dim, _ws, _epoch, _min_count, _neg, word_ngrams, loss, model, bucket, minn, maxn, _lr_update = cur.read("12i")
    cur.read("d")
    if version == 11 and model == 3:
        maxn = 0  # fastText: old supervised models have no character n-grams
    args = FastTextArgs(
        dim, word_ngrams, LOSS_NAMES.get(loss, str(loss)), MODEL_NAMES.get(model, str(model)), bucket, minn, maxn
    )
    size, nwords, nlabels = cur.read("iii")
    _ntokens, prune_size = cur.read("qq")
    words, labels, counts = [], [], []
    for _ in range(size):
        word = cur.cstring().decode("utf-8", "surrogateescape")
        count, kind = cur.read("qb")
        if kind == 0:
            words.append(word)
        else:
            labels.append(word[len(LABEL_PREFIX) :] if word.startswith(LABEL_PREFIX) else word)
            counts.append(count)
    if len(words) != nwords or len(labels) != nlabels:
        raise FastTextFormatError(f"{path}: inconsistent fastText dictionary")
    pairs = cur.array("<i4", 2 * max(prune_size, 0)).reshape(-1, 2)
    (quant_input,) = cur.read("?")
    input_matrix = _read_matrix(cur, quant_input)
    (qout,) = cur.read("?")
    output_matrix = _read_matrix(cur, quant_input and qout)
    if input_matrix.shape[1] != dim or output_matrix.shape[1] != dim:
        raise FastTextFormatError(f"{path}: matrix width does not match dim={dim}")
    return FastTextFile(
        path=path,
        args=args,
        words=words,
        labels=labels,
        label_counts=np.asarray(counts, dtype=np.int64),
        prune_size=int(prune_size),
        prune_keys=pairs[:, 0].astype(np.int64),
        prune_values=pairs[:, 1].astype(np.int64),
        input=input_matrix,
        output=output_matrix,
    )
