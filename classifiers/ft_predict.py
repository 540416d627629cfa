"""fastText ``predict`` in numpy for supervised unigram models, with each word's input rows summed once.

fastText spends its time per token: it rebuilds and hashes the character n-grams of every word
occurrence and adds their rows. The hidden vector is only the mean of those rows, so a word's row
sum and row count can be cached and a document costs one dictionary lookup per token. The output
layer (hierarchical softmax or softmax) is then a few matrix products for the whole batch.

Same tokenization (split on ASCII space, ``\\n \\r \\t \\v \\f \\0``; a ``</s>`` token ends the
line; ``__label__`` tokens are ignored), same n-gram ids, same scores up to float rounding (fastText
adds rows in float32; here a word's rows are summed in float32 and word sums added in float64), so the same labels.
Models with word n-grams (``wordNgrams > 1``) or the one-vs-all loss are not handled: ``supports``
says so and callers fall back to fastText.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from scipy.sparse import csr_matrix
from threadpoolctl import ThreadpoolController

from classifiers.ft_format import LABEL_PREFIX, FastTextFile, read_fasttext
from classifiers.ft_subwords import EOS, subword_rows

FASTTEXT_SEPARATORS = "\n\r\t\v\f\x00"  # with the space, where fastText splits a line into tokens
# characters where ``str.split()`` and fastText disagree: NUL splits only in fastText, these only in Python
SPLIT_DIFFERS = re.compile("[\x00\x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")
LOG_EPS = 1e-5  # fastText's std_log(x) = log(x + 1e-5)
MAX_BATCH_CELLS = 1 << 20  # tokens x dim gathered at once (into buffers kept for the next chunk: 4 + 8 MB)
PREDICT_CHUNK = 256  # texts per output-layer pass (bounds the batch x labels x depth gather)


def supports(model: FastTextFile) -> str | None:
    """None when ``UnigramPredictor`` reproduces fastText for this model, else why not."""
    a = model.args
    if a.model != "supervised":
        return f"not a supervised model ({a.model})"
    if a.word_ngrams > 1:
        return f"word n-grams (wordNgrams={a.word_ngrams})"
    if a.loss not in ("hs", "softmax"):
        return f"loss {a.loss}"
    return None


def hs_paths(counts: np.ndarray) -> np.ndarray:
    """Per leaf, the branches of its root-to-leaf path (``HierarchicalSoftmaxLoss::buildTree``).

    Row ``label`` holds column indices into ``[log(1 - f) | log(f) | 0]`` (f: each internal node's
    sigmoid; left child takes 1 - f, right child f), padded with the zero column, so that
    log p(label) = that matrix gathered at the row and summed. A gather, not a 0/1 matrix product:
    multi-threaded BLAS on a loaded machine made the product 100x slower.
    """
    osz = len(counts)
    n_nodes = 2 * osz - 1
    parent = np.full(n_nodes, -1, dtype=np.int64)
    binary = np.zeros(n_nodes, dtype=bool)
    count = np.full(n_nodes, 10**15, dtype=np.int64)
    count[:osz] = counts
    leaf, node = osz - 1, osz
    for i in range(osz, n_nodes):
        mini = [0, 0]
        for j in range(2):
            if leaf >= 0 and count[leaf] < count[node]:
                mini[j], leaf = leaf, leaf - 1
            else:
                mini[j], node = node, node + 1
        count[i] = count[mini[0]] + count[mini[1]]
        parent[mini[0]] = parent[mini[1]] = i
        binary[mini[1]] = True
    inner = osz - 1
    paths = []
    for label in range(osz):
        path, j = [], label
        while parent[j] != -1:
            path.append(parent[j] - osz + (inner if binary[j] else 0))
            j = parent[j]
        paths.append(path[::-1])
    depth = max(map(len, paths), default=0)
    out = np.full((osz, max(depth, 1)), 2 * inner, dtype=np.int64)
    for label, path in enumerate(paths):
        out[label, : len(path)] = path
    return out


class WordIndex(dict):
    """word -> row in the predictor's cache; a missing word gets the next row and waits in ``pending``
    for its row sum (a Python call per new word only: known words stay a C dictionary lookup)."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[str] = []

    def __missing__(self, word: str) -> int:
        row = self[word] = len(self)
        self.pending.append(word)
        return row


class UnigramPredictor:
    """Batch predictions of a supervised unigram fastText model; caches up to ``max_words`` words."""

    def __init__(self, model: FastTextFile, max_cache_bytes: int = 64 << 20):
        reason = supports(model)
        if reason:
            raise ValueError(f"{model.path}: fast prediction does not support {reason}")
        self.model = model
        self.labels = tuple(model.labels)
        self.vocab = {w: i for i, w in enumerate(model.words)}
        # a cached word costs its row sum plus roughly 100 bytes of dictionary entry and string
        self.max_words = max(1024, max_cache_bytes // (4 * model.args.dim + 100))
        self.output = np.asarray(model.output, dtype=np.float64)
        # the tokens' rows of one chunk, gathered here and widened, transposed, into _gathered64 (see _hidden_chunk)
        self._gathered = np.empty((0, model.args.dim), dtype=np.float32)
        self._gathered64 = np.empty(0, dtype=np.float64)
        if model.args.loss == "hs":
            self.paths = hs_paths(model.label_counts)
            self.output = self.output[: len(self.labels) - 1]
        self.clear_cache()

    def clear_cache(self) -> None:
        """Forget every cached word (the memory bound; also a cold start for benchmarks)."""
        self._index = WordIndex()  # its length is the number of rows in use
        self._sums = np.zeros((1024, self.model.args.dim), dtype=np.float32)
        self._counts = np.zeros(1024, dtype=np.int64)

    def _add_words(self, words: list[str]) -> None:
        """Row sums and row counts of new words, appended to the cache in one vectorized pass.

        Called with the words ``WordIndex`` just queued, which hold the last rows of the index. The
        sums are one sparse (words x input rows) product, with no gathered copy of the rows; float32
        accumulation, as fastText's own ``addRow``.
        """
        word_idx, rows = subword_rows(self.model, words, self.vocab)
        incidence = csr_matrix(
            (np.ones(len(rows), dtype=np.float32), (word_idx, rows)), shape=(len(words), len(self.model.input))
        )
        end = len(self._index)
        start = end - len(words)
        if end > len(self._counts):  # grow by doubling: appends stay amortized O(1) per word
            capacity = max(end, 2 * len(self._counts))
            self._sums = np.resize(self._sums, (capacity, self._sums.shape[1]))
            self._counts = np.resize(self._counts, capacity)
        self._sums[start:end] = incidence @ self.model.input
        self._counts[start:end] = np.bincount(word_idx, minlength=len(words))

    def _word_ids(self, tokens: list[str]) -> np.ndarray:
        """Cache row of every token: one C-level lookup per token; the words not cached yet get
        their rows on the way (``WordIndex.__missing__``) and are computed together afterwards."""
        if len(self._index) > self.max_words:  # bound the memory (to max_words + one chunk): start over
            self.clear_cache()
        ids = np.fromiter(map(self._index.__getitem__, tokens), dtype=np.int64, count=len(tokens))
        if self._index.pending:
            words, self._index.pending = self._index.pending, []
            self._add_words(words)
        return ids

    @staticmethod
    def tokens(text: str) -> list[str]:
        """fastText's tokens of one line: ``</s>`` ends it (and is a token), labels are skipped."""
        if SPLIT_DIFFERS.search(text):  # fastText's separators made spaces, then one split: no regex scan
            for separator in FASTTEXT_SEPARATORS:
                if separator in text:
                    text = text.replace(separator, " ")
            tokens = list(filter(None, text.split(" ")))
        else:
            tokens = text.split()
        if EOS in text and EOS in tokens:
            tokens = tokens[: tokens.index(EOS)]
        if LABEL_PREFIX in text:
            tokens = [t for t in tokens if not t.startswith(LABEL_PREFIX)]
        tokens.append(EOS)
        return tokens

    def hidden(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Mean input row of each text (fastText's hidden layer) and how many rows it averaged."""
        dim = self.model.args.dim
        hidden = np.zeros((len(texts), dim), dtype=np.float64)
        counts = np.zeros(len(texts), dtype=np.float64)
        tokens: list[str] = []
        offsets: list[int] = []
        first = 0
        for i, text in enumerate(texts):
            toks = self.tokens(text)
            if offsets and (len(tokens) + len(toks)) * dim > MAX_BATCH_CELLS:
                self._hidden_chunk(tokens, offsets, hidden[first:i], counts[first:i])
                tokens, offsets, first = [], [], i
            offsets.append(len(tokens))
            tokens.extend(toks)
        if offsets:
            self._hidden_chunk(tokens, offsets, hidden[first:], counts[first:])
        nonzero = counts > 0
        hidden[nonzero] /= counts[nonzero, None]
        return hidden, counts

    def _hidden_chunk(
        self, tokens: list[str], offsets: list[int], sums_out: np.ndarray, counts_out: np.ndarray
    ) -> None:
        """Each text's rows added in float64 (the same bits as ``reduceat`` of the float32 rows with
        ``dtype=float64``). The rows are gathered, then widened, into two buffers kept for the next chunk: the
        fresh gathered array and reduceat's float64 copy of it were page-faulted in anew for every chunk.

        Widened transposed (one row per dimension): ``reduceat`` then sums each text's run of one dimension in
        contiguous memory, not at a stride of one token row, with the same additions in the same order (numpy's
        pairwise sum of the run either way: the same bits, tested in ``tests/classifiers/test_ft_predict.py``):
        0.17 -> 0.07 CPU s for the 1.37M tokens of ``bench.curate``'s DCLM row as one chunk; in its chunks of 65k
        tokens the whole cold prediction 1.03 -> 1.00 s (medians of 5)."""
        ids = self._word_ids(tokens)
        dim = self._sums.shape[1]
        if len(ids) > len(self._gathered):  # one chunk's size (larger only for one huge text)
            self._gathered = np.empty((max(len(ids), MAX_BATCH_CELLS // dim), dim), dtype=np.float32)
            self._gathered64 = np.empty(self._gathered.size, dtype=np.float64)
        rows = self._gathered[: len(ids)]
        np.take(self._sums, ids, axis=0, out=rows, mode="clip")  # ids are rows in use; "raise" buffers the out
        wide = self._gathered64[: rows.size].reshape(dim, len(ids))  # contiguous: dimension by dimension
        wide[...] = rows.T
        sums_out[:] = np.add.reduceat(wide, offsets, axis=1).T
        counts_out[:] = np.add.reduceat(self._counts[ids], offsets)

    def log_probs(self, hidden: np.ndarray) -> np.ndarray:
        """fastText's per-label scores (log of probability + 1e-5 per factor), shape (batch, labels)."""
        logits = hidden @ self.output.T
        if self.model.args.loss == "softmax":
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            return np.log(p + LOG_EPS)
        f = 1.0 / (1.0 + np.exp(-logits))
        zero = np.zeros((len(f), 1))
        branches = np.concatenate([np.log(1.0 - f + LOG_EPS), np.log(f + LOG_EPS), zero], axis=1)
        return branches[:, self.paths].sum(axis=2)

    def predict(
        self, texts: Sequence[str], k: int = 1, threshold: float = 0.0
    ) -> list[tuple[tuple[str, ...], tuple[float, ...]]]:
        """Top-k (labels, probabilities) per text, as ``fasttext.predict`` (labels without prefix).

        BLAS runs on one thread here: the output layer's products are small (at most ``PREDICT_CHUNK`` x dim x
        labels), and after each multi-threaded one OpenBLAS's idle workers spin ~0.1 s before they sleep, CPU
        time of the task (0.4 of its ~10 CPU s in ``bench.curate``'s DCLM row, a third of the language ID). Each
        product is split across threads by rows and columns, so every score is the same bits either way."""
        out: list[tuple[tuple[str, ...], tuple[float, ...]]] = []
        with _blas_threads().limit(limits=1, user_api="blas"):
            for start in range(0, len(texts), PREDICT_CHUNK):
                out.extend(self._predict_chunk(texts[start : start + PREDICT_CHUNK], k, threshold))
        return out

    def _predict_chunk(
        self, texts: Sequence[str], k: int, threshold: float
    ) -> list[tuple[tuple[str, ...], tuple[float, ...]]]:
        hidden, counts = self.hidden(texts)
        scores = self.log_probs(hidden)
        k = len(self.labels) if k < 0 else min(k, len(self.labels))
        if k < scores.shape[1]:  # partial sort: only the k best of each row are ordered
            # in label order first, so that equal scores keep the full stable sort's order
            top = np.sort(np.argpartition(-scores, k - 1, axis=1)[:, :k], axis=1)
            order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1, kind="stable")
            top = np.take_along_axis(top, order, axis=1)
        else:
            top = np.argsort(-scores, axis=1, kind="stable")
        top_scores = np.take_along_axis(scores, top, axis=1)
        if self.model.args.loss == "softmax":
            keep = np.exp(top_scores) - LOG_EPS >= threshold
        else:
            keep = top_scores >= np.log(threshold + LOG_EPS)
        # scores are sorted, so the kept ones are a prefix; fastText returns nothing for an empty input
        n_kept = np.where(counts > 0, keep.sum(axis=1), 0).tolist()
        label_of = self.labels.__getitem__
        return [
            (tuple(map(label_of, labels[:n])), tuple(probs[:n]))
            for labels, probs, n in zip(top.tolist(), np.exp(top_scores).tolist(), n_kept, strict=True)
        ]


@lru_cache(maxsize=1)
def _blas_threads() -> ThreadpoolController:
    """The process's thread pools (found once: the BLAS numpy loaded at import)."""
    return ThreadpoolController()


def load_predictor(path: str) -> UnigramPredictor | None:
    """The fast predictor for ``path`` (once per process, again if the file changed), or None when
    the model needs fastText."""
    st = os.stat(path)
    return _load_predictor(path, st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=4)
def _load_predictor(path: str, _mtime_ns: int, _size: int) -> UnigramPredictor | None:
    model = read_fasttext(path)
    return None if supports(model) else UnigramPredictor(model)
