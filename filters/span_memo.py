"""spaCy's tokens of each distinct whitespace span, computed once and then gathered with numpy.

spaCy's tokenizer first cuts a text into spans at whitespace boundaries (runs of ``str.isspace``
characters and runs of others; of a whitespace run that follows a word, one leading space belongs to
the word and is no span), tokenizes each span on its own (prefixes, suffixes, infixes, exceptions),
then matches the exceptions that its affix rules split into several tokens over the whole document
(``Tokenizer._apply_special_cases``). Its cache keeps a span's tokens only until the first exception
of a call (``Tokenizer._save_cached``; a web page has one in most lines: "don't", "'s", "Mr."), and
every cached span is still looked up in C once per occurrence. A web corpus repeats its spans: 620
English pages hold 836,000 spans of which 99,000 are distinct. Here each distinct span goes through
spaCy once and a document is the concatenation of its spans' tokens.

The same tokens as spaCy on the whole text. A document-wide match that crosses a space changes
nothing itself (spaCy looks the rule up by the matched text, which then holds the space, and no key of
a pipeline using this mixes whitespace with other characters: ``usable``), but it can shadow a match
inside a word: in "known' ''word" the ``''`` exception is then not applied. Such a match needs two
consecutive tokens of some exception's affix split on the two sides of the space
(``CrossSpaceMatches``, one table lookup per boundary); a stretch of words holding such a boundary (up
to the whitespace tokens around it, which no match crosses) is tokenized by spaCy. 449 boundaries in
the 620 pages.
"""

from __future__ import annotations

from itertools import repeat

import numpy as np
from spacy.attrs import IDX, IS_PUNCT, IS_SPACE, LENGTH, ORTH

TOKEN_ATTRS = [IDX, LENGTH, IS_PUNCT, IS_SPACE, ORTH]
LAST_SPACE = 0x3000  # the largest code point with str.isspace()
IS_WHITESPACE = np.array([chr(c).isspace() for c in range(LAST_SPACE + 1)] + [False])  # last: every code point above
SPACE = 0x20


def token_texts(text: str, table: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The start offset of each ``TOKEN_ATTRS`` row of ``text`` and its slice of it, stripped
    (a whitespace token gives "")."""
    starts = table[:, 0].astype(np.int64)
    ends = starts + table[:, 1].astype(np.int64)
    return starts, list(map(str.strip, map(text.__getitem__, map(slice, starts.tolist(), ends.tolist()))))


def usable(rules: dict) -> bool:
    """Whether spans tokenize independently under these exceptions: none mixes whitespace with other
    characters (Spanish has "EE. UU.", which spaCy matches over the space)."""
    return all(key.isspace() or not any(c.isspace() for c in key) for key in rules)


def spacy_spans(text: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """spaCy's spans of ``text`` in order: the words (``text.split()``, the same whitespace) and the
    whitespace spans as strings, their start offsets, and which are whitespace."""
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    space = IS_WHITESPACE[np.minimum(codes, LAST_SPACE + 1)]
    bounds = np.flatnonzero(space[1:] != space[:-1]) + 1
    starts = np.concatenate(([0], bounds))
    ends = np.append(bounds, len(codes))
    run_is_space = np.zeros(len(starts), dtype=bool)
    run_is_space[0 if space[0] else 1 :: 2] = True
    # a whitespace run after a word gives up one leading space (the word's trailing space)
    starts[1:] += run_is_space[1:] & (codes[starts[1:]] == SPACE)
    kept = starts < ends
    starts, ends, run_is_space = starts[kept], ends[kept], run_is_space[kept]
    strings: list[str] = text.split()
    if run_is_space.any():
        spaces = [text[a:b] for a, b in zip(starts[run_is_space].tolist(), ends[run_is_space].tolist(), strict=True)]
        merged = np.empty(len(starts), dtype=object)
        merged[~run_is_space] = strings
        merged[run_is_space] = spaces
        strings = merged.tolist()
    return strings, starts, run_is_space


class SpanMemo:
    """The tokens of every span seen so far, as rows of flat arrays: ``rel_start`` (offset in the
    span), ``text`` (stripped), ``kind`` (a ``filters.words`` kind byte). Span ``i`` owns rows
    ``first[i] : first[i] + count[i]``; ``end_class[i]`` / ``start_class[i]`` are its last / first
    token's class in ``CrossSpaceMatches``."""

    def __init__(self, nlp, kind_of, word_kind: int | None):
        """``kind_of(table)`` gives the kind bytes of ``TOKEN_ATTRS`` rows; ``word_kind`` is that of a
        word of ASCII letters (None: such words are not known without spaCy)."""
        self.nlp = nlp
        self.kind_of = kind_of
        self.word_kind = word_kind
        self.boundaries = CrossSpaceMatches(nlp.tokenizer)
        self.ids: dict[str, int] = {}
        self.first = _Growing(np.int64)
        self.count = _Growing(np.int64)
        self.end_class = _Growing(np.int64)
        self.start_class = _Growing(np.int64)
        self.rel_start = _Growing(np.int64)
        self.text = _Growing(object)
        self.kind = _Growing(np.uint8)

    def __len__(self) -> int:
        return len(self.ids)

    def gather(self, text: str) -> tuple[list[int], list[str], bytes]:
        """(token starts, stripped token texts, kind bytes) of ``text``: spaCy's tokens."""
        if not text:
            return [], [], b""
        strings, span_starts, is_space = spacy_spans(text)
        ids = self._ids(strings)
        counts = self.count.view[ids]
        ends = np.cumsum(counts)
        rows = np.arange(ends[-1]) + np.repeat(self.first.view[ids] - (ends - counts), counts)
        columns = (
            np.repeat(span_starts, counts) + self.rel_start.view[rows],
            self.text.view[rows],
            self.kind.view[rows],
        )
        risky = self.boundaries.risky(self.end_class.view[ids[:-1]], self.start_class.view[ids[1:]])
        if len(risky):
            columns = self._respliced(text, span_starts, is_space, ends, risky, columns)
        starts, texts, kinds = columns
        return starts.tolist(), texts.tolist(), kinds.tobytes()

    def _respliced(self, text, span_starts, is_space, end_rows, risky, columns):
        """``columns`` with the tokens of each stretch of words that holds a risky boundary (a stretch
        lies between two whitespace tokens, which no match crosses) replaced by spaCy's tokens of it."""
        space_at = np.flatnonzero(is_space)
        pieces = []
        row = 0
        for k in sorted(set(np.searchsorted(space_at, risky, side="right").tolist())):
            first_span = int(space_at[k - 1]) + 1 if k > 0 else 0
            end_span = int(space_at[k]) if k < len(space_at) else len(span_starts)
            first_row = int(end_rows[first_span - 1]) if first_span else 0
            pieces.append(tuple(column[row:first_row] for column in columns))
            start = int(span_starts[first_span])
            end = int(span_starts[end_span]) if end_span < len(span_starts) else len(text)
            pieces.append(self._spacy_tokens(text[start:end].rstrip(" "), start))
            row = int(end_rows[end_span - 1])
        pieces.append(tuple(column[row:] for column in columns))
        return tuple(np.concatenate([piece[i] for piece in pieces]) for i in range(3))

    def _spacy_tokens(self, text: str, offset: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """spaCy's tokens of ``text`` (not empty) as columns, offsets shifted by ``offset``."""
        self.nlp.max_length = max(self.nlp.max_length, len(text) + 10)
        table = self.nlp.make_doc(text).to_array(TOKEN_ATTRS)
        starts, texts = token_texts(text, table)
        return starts + offset, _objects(texts), self.kind_of(table)

    def _ids(self, strings: list[str]) -> np.ndarray:
        ids = np.fromiter(map(self.ids.get, strings, repeat(-1)), dtype=np.int64, count=len(strings))
        unknown = np.flatnonzero(ids < 0)
        if len(unknown):
            new = dict.fromkeys(strings[i] for i in unknown.tolist())
            words = [s for s in new if not s.isspace()]
            if words:
                self._learn_words(words)
            for span in new:
                if span.isspace():  # alone: it then starts its text, so spaCy keeps it whole
                    self._learn_with_spacy([span])
            ids[unknown] = [self.ids[strings[i]] for i in unknown.tolist()]
        return ids

    def _learn_words(self, words: list[str]) -> None:
        """A word of ASCII letters that no exception, prefix, suffix or infix rule matches is one token
        (spaCy's affix loop and its matcher find nothing in it), known here by three regex calls
        instead of a pass through the tokenizer; the other words go through spaCy."""
        if self.word_kind is not None:
            whole = [s for s in words if s.isascii() and s.isalpha() and self._is_one_token(s)]
            if whole:
                n = len(whole)
                zeros = np.zeros(n, dtype=np.int64)
                self._store(whole, zeros + 1, zeros, whole, np.full(n, self.word_kind, np.uint8))
                words = [s for s in words if s not in self.ids]
        if words:
            self._learn_with_spacy(words)

    def _learn_with_spacy(self, spans: list[str]) -> None:
        """Tokenize spans in one spaCy call, separated by line breaks (a line break is a token of its
        own, so nothing matches across it)."""
        joined = "\n".join(spans)
        starts, texts, kinds = self._spacy_tokens(joined, 0)
        lengths = np.fromiter(map(len, spans), dtype=np.int64, count=len(spans))
        span_starts = np.cumsum(lengths + 1) - lengths - 1
        owner = np.searchsorted(span_starts, starts, side="right") - 1
        inside = starts < span_starts[owner] + lengths[owner]  # not a separating line break
        owner = owner[inside]
        counts = np.bincount(owner, minlength=len(spans))
        if not counts.all():
            raise AssertionError("spaCy gave a span no token")
        self._store(spans, counts, starts[inside] - span_starts[owner], texts[inside], kinds[inside])

    def _is_one_token(self, span: str) -> bool:
        tokenizer = self.nlp.tokenizer
        return (
            span not in tokenizer.rules
            and (tokenizer.prefix_search is None or tokenizer.prefix_search(span) is None)
            and (tokenizer.suffix_search is None or tokenizer.suffix_search(span) is None)
            and (tokenizer.infix_finditer is None or next(tokenizer.infix_finditer(span), None) is None)
        )

    def _store(self, spans: list[str], counts: np.ndarray, rel_starts: np.ndarray, texts, kinds: np.ndarray) -> None:
        """Spans' tokens: ``counts[i]`` rows each, in span order."""
        last = np.cumsum(counts) - 1  # in texts
        base = len(self.rel_start)
        self.first.extend(base + last + 1 - counts)
        self.count.extend(counts)
        self.rel_start.extend(rel_starts)
        self.text.extend(texts)
        self.kind.extend(kinds)
        self.end_class.extend([self.boundaries.end_class(texts[i]) for i in last.tolist()])
        self.start_class.extend([self.boundaries.start_class(texts[i]) for i in (last + 1 - counts).tolist()])
        first_id = len(self.ids)
        self.ids.update(zip(spans, range(first_id, first_id + len(spans)), strict=True))


class CrossSpaceMatches:
    """Which (last token of a span, first token of the next one) pairs could lie inside a
    document-wide exception match across the space between them.

    spaCy matches each exception's affix split (``_tokenize_affixes(key, False)``) against its
    first-pass tokens, so such a match needs two consecutive tokens of a split on the two sides. A
    span's first-pass edge token is its final one unless a match inside the span replaced it: the final
    token is then an edge token of that exception and the first pass had the edge token of its split,
    which is counted too."""

    def __init__(self, tokenizer):
        from spacy.tokenizer import Tokenizer

        twin = Tokenizer(
            tokenizer.vocab,
            rules={},
            prefix_search=tokenizer.prefix_search,
            suffix_search=tokenizer.suffix_search,
            infix_finditer=tokenizer.infix_finditer,
            token_match=tokenizer.token_match,
            url_match=tokenizer.url_match,
        )
        pairs: set[tuple[str, str]] = set()
        was_last: dict[str, set[str]] = {}  # a final last token -> the first-pass last tokens it may replace
        was_first: dict[str, set[str]] = {}
        for key, substrings in tokenizer.rules.items():
            split = [token.text.strip() for token in twin(key)]
            if len(split) < 2:
                continue
            pairs.update(zip(split, split[1:], strict=False))
            special = [(sub.get(ORTH) or sub["ORTH"]).strip() for sub in substrings]  # keys: attribute ids
            was_last.setdefault(special[-1], set()).add(split[-1])
            was_first.setdefault(special[0], set()).add(split[0])
        lasts = {t: {t} | was_last.get(t, set()) for t in {a for a, _ in pairs} | set(was_last)}
        firsts = {t: {t} | was_first.get(t, set()) for t in {b for _, b in pairs} | set(was_first)}
        self.end_ids = {t: i for i, t in enumerate(sorted(lasts))}
        self.start_ids = {t: i for i, t in enumerate(sorted(firsts))}
        self.table = np.zeros((len(lasts) + 1, len(firsts) + 1), dtype=bool)  # last row / column: any other token
        for a, i in self.end_ids.items():
            for b, j in self.start_ids.items():
                self.table[i, j] = any((x, y) in pairs for x in lasts[a] for y in firsts[b])

    def end_class(self, last_token: str) -> int:
        return self.end_ids.get(last_token, len(self.end_ids))

    def start_class(self, first_token: str) -> int:
        return self.start_ids.get(first_token, len(self.start_ids))

    def risky(self, end_classes: np.ndarray, start_classes: np.ndarray) -> np.ndarray:
        """Indices k where the boundary between spans k and k + 1 could hold a match across a space."""
        return np.flatnonzero(self.table[end_classes, start_classes])


class _Growing:
    """A 1-d numpy array appended to in batches, its capacity doubled as needed (``view``: the filled part)."""

    def __init__(self, dtype):
        self._data = np.empty(1024, dtype=dtype)
        self._size = 0
        self.view = self._data[:0]

    def __len__(self) -> int:
        return self._size

    def extend(self, values) -> None:
        values = np.asarray(values, dtype=self._data.dtype) if self._data.dtype != object else _objects(values)
        need = self._size + len(values)
        if need > len(self._data):
            grown = np.empty(max(need, 2 * len(self._data)), dtype=self._data.dtype)
            grown[: self._size] = self._data[: self._size]
            self._data = grown
        self._data[self._size : need] = values
        self._size = need
        self.view = self._data[:need]


def _objects(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out
