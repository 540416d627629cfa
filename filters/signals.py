"""Quality signals, computed once per document and stored beside the text (RedPajama-V2 style).

Every number the Gopher, C4 and FineWeb rules compare with a threshold is computed here, from one
tokenization (``filters.words``), with datatrove's exact definitions so decisions match its filters.
Rules (``filters.rules``) are then predicates over these columns, and a threshold can change later
(``python -m pipelines.refilter``) without extracting again.

Parameters that change *how* a signal is computed, not the threshold it is compared with (stop words,
C4's line-level edits, the short-line length), live in ``SignalConfig`` and are fixed for a run.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from datatrove.utils.text import PUNCTUATION_SET, TERMINAL_PUNCTUATION

from filters.words import Tokenized, WordTokenizer, count_sentences

PARAGRAPH_SPLIT = re.compile(r"\n{2,}")
LINE_SPLIT = re.compile("\n+")
CITATION_REGEX = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
POLICY_SUBSTRINGS = (
    "terms of use",
    "privacy policy",
    "cookie policy",
    "uses cookies",
    "use of cookies",
    "use cookies",
)
GOPHER_STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")
TOP_N_GRAMS = (2, 3, 4)
DUP_N_GRAMS = (5, 6, 7, 8, 9, 10)


@dataclass(frozen=True)
class SignalConfig:
    """How signals are computed (not thresholds). Defaults are datatrove's / FineWeb's."""

    stop_words: tuple[str, ...] = GOPHER_STOP_WORDS
    top_n_grams: tuple[int, ...] = TOP_N_GRAMS
    dup_n_grams: tuple[int, ...] = DUP_N_GRAMS
    c4_remove_citations: bool = True
    c4_max_word_length: int = 1000
    c4_min_words_per_line: int = 3
    c4_filter_javascript: bool = True
    c4_filter_policy: bool = True
    fineweb_short_line_length: int = 30
    fineweb_stop_chars: tuple[str, ...] = tuple(sorted(TERMINAL_PUNCTUATION))  # sorted: stable across runs


def signal_names(config: SignalConfig | None = None) -> list[str]:
    """Column names of every signal, in a stable order (the parquet schema uses it)."""
    config = config or SignalConfig()
    names = ["dup_para_frac", "dup_para_char_frac", "dup_line_frac", "dup_line_char_frac"]
    names += [f"top_{n}_gram_char_frac" for n in config.top_n_grams]
    names += [f"dup_{n}_gram_char_frac" for n in config.dup_n_grams]
    names += [
        "word_count",
        "mean_word_length",
        "hash_word_ratio",
        "ellipsis_word_ratio",
        "bullet_lines_ratio",
        "end_ellipsis_lines_ratio",
        "alpha_words_ratio",
        "stop_word_count",
        "c4_lorem_ipsum_line",
        "c4_curly_bracket_line",
        "c4_sentences",
        "c4_lines_removed",
        "fw_lines",
        "fw_line_punct_ratio",
        "fw_short_line_ratio",
        "fw_char_dup_ratio",
        "fw_list_ratio",
    ]
    return names


def _ratio(a: float, b: float) -> float:
    return a / b if b else (math.inf if a else 0.0)


def find_duplicates(items: list[str]) -> tuple[int, int]:
    """Number of repeated items and their total characters (datatrove's definition)."""
    seen: set[str] = set()
    dup_items = dup_chars = 0
    for item in items:
        if item in seen:
            dup_items += 1
            dup_chars += len(item)
        else:
            seen.add(item)
    return dup_items, dup_chars


def top_ngram_chars(words: list[str], n: int) -> int:
    """Characters covered by the most frequent word n-gram (first seen wins ties, as in datatrove)."""
    if len(words) < n:
        return 0
    counts = Counter(zip(*(words[i:] for i in range(n)), strict=False))
    gram, count = counts.most_common(1)[0]
    return (sum(map(len, gram)) + n - 1) * count


def duplicated_ngram_chars(words: list[str], n: int) -> int:
    """Characters in non-overlapping repeated n-grams (datatrove's ``find_all_duplicate``)."""
    n_words = len(words)
    unique: set[str] = set()
    repeated, idx = 0, 0
    while idx < n_words - n + 1:
        gram = "".join(words[idx : idx + n])
        if gram in unique:
            repeated += len(gram)
            idx += n
        else:
            unique.add(gram)
            idx += 1
    return repeated


def gopher_repetition(text: str, words: list[str], config: SignalConfig) -> dict[str, float]:
    paragraphs = PARAGRAPH_SPLIT.split(text.strip())
    para_dups, para_chars = find_duplicates(paragraphs)
    lines = LINE_SPLIT.split(text)
    line_dups, line_chars = find_duplicates(lines)
    length = len(text)
    out = {
        "dup_para_frac": _ratio(para_dups, len(paragraphs)),
        "dup_para_char_frac": _ratio(para_chars, length),
        "dup_line_frac": _ratio(line_dups, len(lines)),
        "dup_line_char_frac": _ratio(line_chars, length),
    }
    for n in config.top_n_grams:
        out[f"top_{n}_gram_char_frac"] = _ratio(top_ngram_chars(words, n), length)
    for n in config.dup_n_grams:
        out[f"dup_{n}_gram_char_frac"] = _ratio(duplicated_ngram_chars(words, n), length)
    return out


def gopher_quality(text: str, words: list[str], config: SignalConfig) -> dict[str, float]:
    n_words = len(words)
    non_symbol = [w for w in words if any(ch not in PUNCTUATION_SET for ch in w)]
    lines = text.splitlines()
    n_lines = len(lines)
    return {
        "word_count": float(len(non_symbol)),
        "mean_word_length": (sum(map(len, non_symbol)) / len(non_symbol)) if non_symbol else math.nan,
        "hash_word_ratio": _ratio(text.count("#"), n_words),
        "ellipsis_word_ratio": _ratio(text.count("...") + text.count("…"), n_words),
        "bullet_lines_ratio": _ratio(sum(s.lstrip().startswith(("•", "-")) for s in lines), n_lines),
        "end_ellipsis_lines_ratio": _ratio(sum(s.rstrip().endswith(("...", "…")) for s in lines), n_lines),
        "alpha_words_ratio": _ratio(sum(any(c.isalpha() for c in w) for w in words), n_words),
        "stop_word_count": float(len(set(config.stop_words).intersection(words))),
    }


@dataclass
class C4Result:
    """C4's line-level edit of a document and the document-level facts its rule needs."""

    kept_lines: list[str]
    kept_words: int
    sentences: int
    lorem_ipsum_line: int
    curly_bracket_line: int
    lines_removed: int

    @property
    def text(self) -> str:
        return "\n".join(self.kept_lines).strip()


def _line_spans(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, stripped line)`` for each of ``text.splitlines()``, with offsets into text."""
    spans = []
    pos = 0
    for raw in text.splitlines(keepends=True):
        body = raw.rstrip("\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
        stripped = body.strip()
        lead = len(body) - len(body.lstrip())
        spans.append((pos + lead, pos + lead + len(stripped), stripped))
        pos += len(raw)
    return spans


def c4_lines(tok: Tokenized, tokenizer: WordTokenizer, config: SignalConfig) -> C4Result:
    """C4QualityFilter(filter_no_terminal_punct=False) line loop, without early exit.

    Document-level drops are recorded as the index of the first kept-candidate line where they occur
    (-1 when absent), so the rule can still tell which one datatrove would have reported first.
    """
    tokens = tok.tokens
    kept: list[str] = []
    kept_words = sentences = removed = 0
    lorem_line = curly_line = -1
    t = 0
    for index, (start, end, line) in enumerate(_line_spans(tok.text)):
        while t < len(tokens) and tokens[t][0] < start:
            t += 1
        first = t
        while t < len(tokens) and tokens[t][0] < end:
            t += 1
        line_tokens = tokens[first:t]
        words = line.split()
        if config.c4_max_word_length != -1 and any(len(w) > config.c4_max_word_length for w in words):
            removed += 1
            continue
        if config.c4_remove_citations and "[" in line:
            cleaned = CITATION_REGEX.sub("", line)
            if cleaned != line:
                line = cleaned
                line_tokens = tokenizer.tokenize(line).tokens
        if len(words) < config.c4_min_words_per_line:
            removed += 1
            continue
        lowered = line.lower()
        if lorem_line < 0 and "lorem ipsum" in lowered:
            lorem_line = index
        if config.c4_filter_javascript and "javascript" in lowered:
            removed += 1
            continue
        if curly_line < 0 and "{" in line:
            curly_line = index
        if config.c4_filter_policy and any(p in lowered for p in POLICY_SUBSTRINGS):
            removed += 1
            continue
        sentences += count_sentences(line_tokens) if tokenizer.is_spacy else tokenizer.sentences(line)
        kept_words += sum(1 for tk in line_tokens if tk[1])
        kept.append(line)
    return C4Result(kept, kept_words, sentences, lorem_line, curly_line, removed)


def fineweb_quality(cleaned: str, n_words: int, config: SignalConfig) -> dict[str, float]:
    """FineWebQualityFilter's ratios over C4's output text."""
    lines = [line for line in cleaned.split("\n") if line.strip() != ""]
    n = len(lines)
    return {
        "fw_lines": float(n),
        "fw_line_punct_ratio": _ratio(sum(1 for x in lines if x.endswith(config.fineweb_stop_chars)), n),
        "fw_short_line_ratio": _ratio(sum(1 for x in lines if len(x) <= config.fineweb_short_line_length), n),
        "fw_char_dup_ratio": _ratio(find_duplicates(lines)[1], len(cleaned.replace("\n", ""))),
        "fw_list_ratio": _ratio(cleaned.count("\n"), n_words),
    }


def compute_signals(
    text: str, tokenizer: WordTokenizer, config: SignalConfig | None = None
) -> tuple[dict[str, float], C4Result]:
    """All signals of one document (call inside ``tokenizer.batch()``, which bounds the tokenizer memory)."""
    config = config or SignalConfig()
    tok = tokenizer.tokenize(text)
    words = tok.words
    signals = gopher_repetition(text, words, config) if text else {}
    signals.update(gopher_quality(text, words, config))
    c4 = c4_lines(tok, tokenizer, config)
    signals.update(
        {
            "c4_lorem_ipsum_line": float(c4.lorem_ipsum_line),
            "c4_curly_bracket_line": float(c4.curly_bracket_line),
            "c4_sentences": float(c4.sentences),
            "c4_lines_removed": float(c4.lines_removed),
        }
    )
    if not tokenizer.is_spacy:  # FineWeb tokenizes the edited text again; only spaCy needs no re-run
        kept_words = len(tokenizer.tokenize(c4.text).words)
    else:
        kept_words = c4.kept_words
    signals.update(fineweb_quality(c4.text, kept_words, config))
    return signals, c4
