"""DCLM-Baseline's heuristics (Li et al. 2024): its RefinedWeb reproduction, as one rule family.

DCLM (``baselines/baselines_configs/dclm_baseline_refinedweb.yaml`` in mlfoundations/dclm) runs, after
the URL filters and before the language filter, two text edits (URL removal, newlines collapsed to at
most two), then page-level filters, then line edits (upper-case lines, counter lines such as "12 likes",
one-word lines, "items in cart" / "Read more..." / "Sign-in" stubs) and drops a page that lost more than
5 % of its words to them. Its tokenisation is cheap: whitespace (``str.split``) for most rules,
fastText's tokenizer (ASCII whitespace, a word counted when its first character is alphanumeric) for
the word counts, and Unicode word boundaries for the repeated n-grams (``regex``'s word mode with one
fix, standing in for ``uniseg``). No spaCy.

Signals (columns ``dclm_<signal>``) are computed on the edited text (``edit_page``) so every threshold
can change later without recomputing; the decision equals DCLM's filter chain, whose order does not
matter since every page filter reads the same text. Reasons name the signal (``dclm_word_count``).
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from itertools import compress, count, product

import numpy as np
import regex

from filters.gopher_quality import has_letter
from filters.rule import AMOUNT, FRACTION, Bound, Rule, ratio

FAMILY = "dclm"
STOP_WORDS = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})
# the words whose lower() is a stop word: their ASCII case variants only (the non-ASCII characters whose lower() holds
# an ASCII letter are U+0130, lowered with a combining dot, and U+212A, "k"), so a set lookup, not a lower() per word
_STOP_WORD_CASES = frozenset(
    "".join(chars) for word in STOP_WORDS for chars in product(*({c, c.upper()} for c in word))
)
BULLETS = ("●", "•", "*", "-")
ELLIPSES = ("...", ". . .", "\u2026")
SYMBOLS = ("#", "...", ". . .", "\u2026")
# Gopher's repetition bounds as DCLM's massive_web_repetition_filters sets them
TOP_NGRAMS = {2: 0.20, 3: 0.18, 4: 0.16}  # characters in the most common n-gram
DUP_NGRAMS = {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10}  # characters in repeated n-grams
SIGNALS = (
    "word_count",
    "mean_word_length",
    "symbol_word_ratio",
    "bullet_lines_ratio",
    "end_ellipsis_lines_ratio",
    "non_alpha_words_ratio",
    "stop_word_count",
    "dup_line_ratio",
    "dup_para_ratio",
    "dup_line_char_ratio",
    "dup_para_char_ratio",
    *(f"top_{n}gram_char_ratio" for n in TOP_NGRAMS),
    *(f"dup_{n}gram_char_ratio" for n in DUP_NGRAMS),
    "words_removed_ratio",
)

# a token start: an alphanumeric character ([^\W_] is str.isalnum in re) after ASCII whitespace or NUL, or at the start
_WORD_CHAR = re.compile(r"[^\W_]")
_FASTTEXT_SEPARATORS = " \n\r\t\v\f\x00"
_COUNTED_WORD = re.compile(f"[{_FASTTEXT_SEPARATORS}][^\\W_]")
# every URL match holds one of these (a domain character, a dot, a TLD's first character): pages without them
# skip the costly patterns (and pages without four dotted groups of digits the IPv4 one)
_MAY_HOLD_URL = re.compile(r"[-a-zA-Z0-9@:%._+~#=]\.[a-z0-9]")
# a segment of a page: the token (a run of non-whitespace) around a position, and the whitespace before it;
# the part before the position is matched on the reversed page
_TOKEN_REST = re.compile(r"\S*")
_TOKEN_AND_SPACE_BEFORE = re.compile(r"\S*\s*")
# every IPv4 match holds four dotted groups of digits; searched from the first dot (a digit before it), as a pattern
# that opens with a literal is searched for it first: 0.036 -> 0.003 CPU s on the 621 pages
_MAY_HOLD_IP = re.compile(r"\.(?<=\d\.)\d{1,3}\.\d{1,3}\.\d")
_ASCII_UPPER = bytes(range(ord("A"), ord("Z") + 1))
_ASCII_DIGITS = b"0123456789"
_WORD_BOUNDARY = regex.compile(r"(?w)\b")
_LEADING_QUOTES = "'\u2018\u2019"
_WORD_SEGMENT = regex.compile(rf"(?ws)(?:\A|\b)[{_LEADING_QUOTES}]*+([\p{{L}}\p{{N}}].*?(?:\b|\Z))")
_NEWLINES = re.compile(r"\n{3,}")
_BLANK_LINE = re.compile(r"^[^\S\n]+$", re.M)  # a line of whitespace only (``str.isspace``'s, as ``\s`` in re)
_IPV4 = re.compile(
    r"\s{0,10}\b((https?|ftp)://)?(?:[0-2]?[0-9]{1,2}\.){3}[0-2]?[0-9]{1,2}[-a-zA-Z0-9()@:%_\+.~#?&//=]*"
)
_COUNTER_LINE = re.compile(
    r"^\W*\d(?:,|\.|\d)*(?:K|k|M|m|B|b)?\s+(?:likes|shares|comments|retweets|reposts|quotes|bookmarks|upvotes"
    r"|downvotes|downloads|views|followers)\W*$"
)
# a counter line's word after a space: what a line matching _COUNTER_LINE once lower-cased must hold, so what the
# lower-cased page holds (lower() maps each character alone but for sigma, and whitespace to itself); searched on the
# page's lower(), which the stub shortcut below needs anyway, case-sensitively: 0.067 -> 0.027 CPU s on the 621 pages
_MAY_HOLD_COUNTER = re.compile(r"\s(?:" + _COUNTER_LINE.pattern.split(r"\s+(?:", 1)[1].split(")", 1)[0] + ")")
# DCLM's three stub edits on lines of at most 10 words; its "Read more..." is a regex, so its dots match any
# character, as here
_STUBS = (
    re.compile(r"\s?(?:items in cart)", re.I),
    re.compile(r"\s?(?:read more...)$", re.I),
    re.compile(r"^(?:sign-in)\s?", re.I),
)
# the same patterns over a whole page, ``^`` and ``$`` at every line: no match there, no line of it matches (no
# pattern spans a newline but its optional leading space); most pages hold none, and one search replaces a
# substitution per line. Searched without their optional space: a page holds a match of ``\s?X`` (``X\s?``) exactly
# when it holds one of ``X``, and without it the search takes half the CPU time (its optional first item is tried at
# every position): 0.24 -> 0.12 s for the 621 pages that reach the signals in bench.curate
_STUBS_IN_PAGE = tuple(
    re.compile(stub.pattern.removeprefix(r"\s?").removesuffix(r"\s?"), re.I | re.M) for stub in _STUBS
)
# a part of each stub that every match holds, lower-cased, made of characters that re.I matches with their ASCII case
# variants only (not "i", "s" or "k": U+0130, U+0131, U+017F and U+212A match those): a page whose lower() lacks it
# holds no match, so one lower() and three substring tests rule out most pages, not three case-insensitive scans
_STUB_LITERALS = ("n cart", "read more", "gn-")


@lru_cache(maxsize=1)
def _top_level_domains() -> tuple[str, ...]:
    """Every top-level domain of the Public Suffix List snapshot bundled with tldextract (offline), ASCII form;
    DCLM reads IANA's list, a few retired or new names apart the same set."""
    from tldextract.tldextract import TLDExtract

    names = {s for s in TLDExtract(suffix_list_urls=(), cache_dir=None)._get_tld_extractor().tlds() if "." not in s}
    ascii_names = set()
    for name in names:
        try:
            ascii_names.add(name.encode("idna").decode("ascii").lower())
        except UnicodeError:
            continue
    return tuple(sorted(ascii_names, key=lambda s: (-len(s), s)))


@lru_cache(maxsize=1)
def _url_patterns() -> tuple[re.Pattern, re.Pattern]:
    """(a page "starts with a TLD", case-insensitive: DCLM removes URLs only then; URLs with a known TLD)."""
    alternation = "|".join(map(re.escape, _top_level_domains()))
    starts = re.compile(f"(?:{alternation})", re.I)
    urls = re.compile(
        rf"\s{{0,10}}(?:((https?|ftp)://))?[-a-zA-Z0-9@:%._\+~#=]{{1,256}}\.({alternation})\b([-a-zA-Z0-9()@:%_\+.~#?&//=]*)"
    )
    return starts, urls


@lru_cache(maxsize=1)
def _code_unit_tables() -> tuple[np.ndarray, np.ndarray]:
    """(alphanumeric, a fastText separator) for each UTF-16 code unit: every BMP character and lone surrogate."""
    units = [chr(i) for i in range(0x10000)]
    alphanumeric = np.fromiter(map(str.isalnum, units), dtype=bool, count=len(units))
    separator = np.zeros(len(units), dtype=bool)
    separator[[ord(c) for c in _FASTTEXT_SEPARATORS]] = True
    return alphanumeric, separator


@lru_cache(maxsize=1)
def _letter_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(``str.isalpha``, ``str.isspace``, ``str.isupper``) of each UTF-16 code unit as one character."""
    units = [chr(i) for i in range(0x10000)]
    return tuple(
        np.fromiter(map(test, units), dtype=bool, count=len(units)) for test in (str.isalpha, str.isspace, str.isupper)
    )  # type: ignore[return-value]


def _bmp_units(text: str) -> np.ndarray | None:
    """The page's UTF-16 code units when each character is one unit (no character beyond the BMP), else None."""
    units = np.frombuffer(text.encode("utf-16-le", "surrogatepass"), dtype=np.uint16)
    return units if len(units) == len(text) else None


def load() -> None:
    """Read the TLD list, compile the URL patterns and build the code unit tables (~0.3 CPU s, once per process).
    A step calls it before its sandbox forks: otherwise every child (one per task, and one more after each killed
    document) pays it on its first page."""
    _url_patterns()
    _code_unit_tables()
    _letter_tables()


def remove_urls(text: str) -> str:
    """DCLM's ``url_removal_modifier``: URLs when the page starts with a TLD's letters, IPv4 addresses always."""
    starts, urls = _url_patterns()
    if starts.match(text) and _MAY_HOLD_URL.search(text):
        text = sub_in_segments(urls, text)
    return _IPV4.sub("", text) if _MAY_HOLD_IP.search(text) else text


def sub_in_segments(urls: re.Pattern, text: str) -> str:
    """``urls.sub("", text)``, the pattern run only on the segments that hold a ``_MAY_HOLD_URL`` match.

    Why: the URL pattern tries every position of the page (a run of up to 256 domain characters, backtracked,
    before each dot it needs), ~0.2 us per character: 0.45 of the 3.3 CPU s of DCLM's signals on bench.curate's pages.
    Same result: a match is at most 10 whitespace characters, then characters of its ASCII classes, none of them
    whitespace; so it lies inside one segment (a run of whitespace and the token after it), and every attempt
    that starts in a segment reads the same characters there as in the whole page (the ``\b`` after the TLD reads
    the character after it: in the token, or whitespace or the end, both not a word character). Every match holds
    a domain character, a dot and a TLD's first character (``_MAY_HOLD_URL``): a segment without one is left
    as it is, as the pattern leaves it."""
    parts: list[str] = []
    done = 0  # text[:done] is in parts
    reverse = ""
    for candidate in _MAY_HOLD_URL.finditer(text):
        at = candidate.start()
        if at < done:  # in the token just substituted
            continue
        reverse = reverse or text[::-1]
        before = len(text) - at  # text[:at] reversed starts there
        start = at - (_TOKEN_AND_SPACE_BEFORE.match(reverse, before).end() - before)
        end = _TOKEN_REST.match(text, at).end()
        parts += (text[done:start], urls.sub("", text[start:end]))
        done = end
    parts.append(text[done:])
    return "".join(parts)


def counted_words(text: str) -> int:
    """DCLM's word count: fastText's tokens (split at ASCII whitespace) whose first character is alphanumeric.

    That is the first character when alphanumeric, plus each separator followed by an alphanumeric character. On
    the page's UTF-16 code units, when each character is one unit (no character beyond the BMP), both are table
    lookups over the whole page: no match object or string per word, as ``findall`` made (0.17 -> 0.05 CPU s for
    the two counts of each of the 621 pages in bench.curate); otherwise by the pattern."""
    units = _bmp_units(text)
    if units is None:
        # a separator and the character after it (no two such matches overlap: the second is no separator)
        return len(_COUNTED_WORD.findall(text)) + (_WORD_CHAR.match(text) is not None)
    return _counted_words_of_units(units)


def _counted_words_of_units(units: np.ndarray) -> int:
    """``counted_words`` of a page given as its code units (each a character)."""
    if not len(units):
        return 0
    alphanumeric, separator = _code_unit_tables()
    starts = alphanumeric[units]
    return int(np.count_nonzero(separator[units[:-1]] & starts[1:])) + bool(starts[0])


def words_without_letter(words: list[str], units: np.ndarray | None) -> int:
    """How many of the page's whitespace words (``str.split``) hold no letter (``has_letter``); ``units``: the page's
    code units (``_bmp_units``) or None.

    By tables over the code units when given: no Counter of the words and no test per distinct word (with the stop
    words by ``_STOP_WORD_CASES``: 0.107 -> 0.069 CPU s on the 621 pages of bench.curate). A word starts at a
    non-space unit after a space or the start, each letter unit names the word it is in, and the words with a
    letter are the distinct names."""
    if units is None:
        return sum(c for w, c in Counter(words).items() if not has_letter(w))
    alpha, space_of, _ = _letter_tables()
    space = space_of[units]
    starts = ~space
    starts[1:] &= space[:-1]
    word_at_letter = np.cumsum(starts)[alpha[units]]  # non-decreasing: a letter is never a space
    lettered = int(np.count_nonzero(word_at_letter[1:] != word_at_letter[:-1])) + 1 if len(word_at_letter) else 0
    return len(words) - lettered


def segment_words(text: str) -> list[str]:
    """Unicode word-boundary segments whose first character is alphanumeric (DCLM: ``uniseg`` words): the pieces of
    ``_WORD_BOUNDARY.split(text)``, each without its leading quotes (regex keeps a quote before a word in one
    segment; UAX #29 breaks there), that start with a ``str.isalnum`` character.

    Found by ``_WORD_SEGMENT`` in one pass, not as the ~2.3 pieces per word the split makes, each stripped and
    tested in Python (0.48 -> 0.41 CPU s on the 621 pages of bench.curate). Same words: a match starts at a boundary
    (or the start), skips the quotes, takes a letter or number and runs to the next boundary (or the end), so it is
    a piece whose first character after its quotes is one (a boundary among the quotes only moves the piece's
    start within them); its class holds every ``str.isalnum`` character (regex's Unicode is newer than Python's: a
    few more, which the test drops)."""
    return [w for w in _WORD_SEGMENT.findall(text) if w[:1].isalnum()]


def _count_in_line(line: str, ascii_chars: bytes, test: str) -> int:
    """Characters of ``line`` passing ``str.<test>``: by ``bytes.translate`` when ASCII (one C call)."""
    if line.isascii():
        return len(line) - len(line.encode().translate(None, ascii_chars))
    return sum(map(getattr(str, test), line))


def _all_digits(line: str) -> bool:
    """DCLM's numeric-line test, digits / length > 0.999999: below a million characters that is every character
    a digit, which ``str.isdigit`` answers in one C call (one character short gives at most 1 - 1e-6 - 1e-12)."""
    if len(line) < 1_000_000:
        return line.isdigit()
    return _count_in_line(line, _ASCII_DIGITS, "isdigit") / len(line) > 0.999999


def _mostly_not_upper(text: str, lines: list[str]) -> Iterable[bool]:
    """Per line of ``text`` (``lines``: its split at newlines): empty, or at most half its characters upper-case
    (DCLM's ``uppercase_ratio_line_modifier`` keeps those). Per page by the code unit tables when each character is
    one unit: the upper-case units counted per line at once, not a count per line (0.056 -> 0.039 CPU s on the 621
    pages); ``2 * upper <= length`` is ``upper / length <= 0.5`` for any line shorter than 2**52."""
    units = _bmp_units(text)
    if units is None:
        return map(_not_mostly_upper, lines)
    upper = _letter_tables()[2][units]
    line_of_unit = np.cumsum(units == 10)
    uppers = np.bincount(line_of_unit[upper], minlength=len(lines))
    lengths = np.fromiter(map(len, lines), dtype=np.int64, count=len(lines))
    return (2 * uppers <= lengths).tolist()


def _not_mostly_upper(line: str) -> bool:
    return not line or _count_in_line(line, _ASCII_UPPER, "isupper") / len(line) <= 0.5


def edit_lines(text: str) -> str:
    """DCLM's line edits in its order; "" when nothing is left (the page is then dropped)."""
    lines = text.split("\n")
    text = "\n".join(compress(lines, _mostly_not_upper(text, lines))).strip()
    lines = text.split("\n")
    lines = [ln for ln in lines if not ln or not _all_digits(ln)]
    text = "\n".join(lines).strip()
    # holds every literal (and counter word) the text holds while only whole lines go (the kept ones are joined by
    # newlines, which no literal holds) and its ends are stripped; None once a stub edited lines
    lowered: str | None = text.lower()
    if _MAY_HOLD_COUNTER.search(lowered):
        text = "\n".join(ln for ln in text.split("\n") if not _COUNTER_LINE.search(ln.lower()))
    text = text.strip()
    if not text:
        return ""
    # a line of one word or none: split at most once (the count only matters up to two)
    text = "\n".join(ln for ln in text.split("\n") if not ln or len(ln.split(None, 1)) >= 2)
    blank_free = False  # no line is spaces only: true after any of the passes below, so they need not look again
    for stub, in_page, literal in zip(_STUBS, _STUBS_IN_PAGE, _STUB_LITERALS, strict=True):
        if (lowered is not None and literal not in lowered) or not in_page.search(text):
            # no line changes; blank lines (spaces only) go, as the loop below drops them
            if not blank_free and _BLANK_LINE.search(text):
                text = "\n".join(ln for ln in text.split("\n") if not ln or not ln.isspace())
            text, blank_free = text.strip(), True
            continue
        kept = []
        for line in text.split("\n"):
            if len(line.split()) <= 10:
                edited = stub.sub("", line)
                if line and (not edited or edited.isspace()):
                    continue
                line = edited
            kept.append(line)
        text, blank_free = "\n".join(kept).strip(), True  # a line the stub left as spaces only was dropped
        lowered = None
    return text


def edit_page(text: str) -> str:
    """The text DCLM's page filters read: URLs removed, runs of newlines cut to two."""
    text = remove_urls(text)
    return _NEWLINES.sub("\n\n", text) if "\n\n\n" in text else text  # a substring test, not a scan by the pattern


def _segment_repetition(segments: list[str]) -> tuple[float, float]:
    """(share of segments that repeat, share of their characters); one segment repeats nothing."""
    if len(segments) <= 1:
        return (0.0, 0.0) if segments else (math.inf, math.inf)
    counts = Counter(segments)
    total_chars = sum(len(s) for s in segments)
    repeated = [(s, c) for s, c in counts.items() if c > 1]
    by_count = sum(c for _, c in repeated) / len(segments)
    by_chars = sum(len(s) * c for s, c in repeated) / total_chars if total_chars else 0.0
    return by_count, by_chars


_MIXERS = np.random.default_rng(20240611).integers(1, 2**63, size=10, dtype=np.uint64) | np.uint64(1)


def _gram_keys(ids: np.ndarray, n: int, at: np.ndarray, vocabulary: int, shorter: np.ndarray | None) -> np.ndarray:
    """One uint64 per n-gram starting at the positions ``at``: the ids (uint64) packed exactly when ``vocabulary ** n``
    fits 64 bits, else a sum of ids times odd random 64-bit constants (two different n-grams collide with probability
    about 2^-64). ``shorter``: the (n - 1)-grams' keys by start position, built the same way, or None; an n-gram's key
    is then its (n - 1)-gram's extended by its last word (one step of the same sum), not all n words again."""
    packed = vocabulary**n < 2**64
    if shorter is not None and packed == (vocabulary ** (n - 1) < 2**64):
        if packed:
            return shorter[at] * np.uint64(vocabulary) + ids[at + (n - 1)]
        return shorter[at] + (ids[at + (n - 1)] + np.uint64(1)) * _MIXERS[n - 1]
    keys = np.zeros(len(at), dtype=np.uint64)
    if packed:
        for i in range(n):
            keys = keys * np.uint64(vocabulary) + ids[at + i]
    else:
        for i in range(n):
            keys += (ids[at + i] + np.uint64(1)) * _MIXERS[i]
    return keys


def _ngram_ratios(words: list[str]) -> dict[str, float]:
    """Gopher's n-gram repetition over word ids, n-grams compared by one 64-bit key each (``_gram_keys``).

    An n-gram that occurs twice holds two (n - 1)-grams that occur twice (at its start and one word later), so
    from n = 3 on only the positions where both of those repeat are keyed and sorted: every occurrence of a
    repeated n-gram is among them, with its full count; when none repeats, no longer one does either. Few numpy
    calls per n: most pages are short, and there a call's overhead, not its work, is the cost."""
    out = {f"top_{n}gram_char_ratio": 0.0 for n in TOP_NGRAMS} | {f"dup_{n}gram_char_ratio": 0.0 for n in DUP_NGRAMS}
    if not words:
        return out
    ids_of: defaultdict[str, int] = defaultdict(count().__next__)  # ids in order of first occurrence, in one pass
    ids = np.fromiter(map(ids_of.__getitem__, words), dtype=np.uint64, count=len(words))
    lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    prefix = np.zeros(len(words) + 1, dtype=np.int64)
    np.cumsum(lengths, out=prefix[1:])
    total = int(prefix[-1])
    repeated: np.ndarray | None = None  # per start position: does the (n - 1)-gram there occur more than once
    keys_at: np.ndarray | None = None  # the (n - 1)-grams' keys by start position
    for n in (*TOP_NGRAMS, *DUP_NGRAMS):
        m = len(words) - n + 1
        if m <= 0:
            break
        at = np.arange(m) if repeated is None else np.flatnonzero(repeated[:m] & repeated[1 : m + 1])
        if not len(at):
            break
        keys = _gram_keys(ids, n, at, len(ids_of), keys_at)
        order = np.argsort(keys)
        ordered = keys[order]
        first = np.empty(len(at) + 1, dtype=bool)  # the first of its group of equal keys, then the end
        first[0] = first[-1] = True
        np.not_equal(ordered[1:], ordered[:-1], out=first[1:-1])
        bounds = np.flatnonzero(first)
        counts = bounds[1:] - bounds[:-1]
        top = int(counts.max())
        if top == 1:
            break
        per_gram = np.empty(len(at), dtype=np.int64)  # each keyed n-gram's number of occurrences
        per_gram[order] = np.repeat(counts, counts)
        starts = at[per_gram > 1]
        repeated = np.zeros(m, dtype=bool)
        repeated[starts] = True
        keys_at = np.empty(m, dtype=np.uint64)
        keys_at[at] = keys
        if n in TOP_NGRAMS:
            tops = at[per_gram == top]
            out[f"top_{n}gram_char_ratio"] = int((prefix[tops + n] - prefix[tops]).max()) * top / total
        else:
            cover = np.zeros(len(words) + 1, dtype=np.int64)
            cover[starts] += 1  # the start positions are distinct, so no index repeats within one of these
            cover[starts + n] -= 1
            covered = np.cumsum(cover[:-1]) > 0
            out[f"dup_{n}gram_char_ratio"] = int(lengths[covered].sum()) / total
    return out


def signals(text: str) -> tuple[dict[str, float], str]:
    """The family's signals of a page (already edited by ``edit_page``) and its text after the line edits."""
    words = text.split()
    n_words = len(words)
    units = _bmp_units(text)
    lines = [s for ln in text.split("\n") if (s := ln.strip())]
    paragraphs = [s for p in text.split("\n\n") if (s := p.strip())]
    word_count = counted_words(text) if units is None else _counted_words_of_units(units)
    dup_line, dup_line_chars = _segment_repetition(lines)
    dup_para, dup_para_chars = _segment_repetition(paragraphs)
    edited = edit_lines(text)
    values = {
        "word_count": float(word_count),
        "mean_word_length": sum(map(len, words)) / n_words if n_words else math.nan,
        "symbol_word_ratio": ratio(sum(text.count(s) for s in SYMBOLS), n_words),
        "bullet_lines_ratio": ratio(sum(ln.startswith(BULLETS) for ln in lines), len(lines)),
        "end_ellipsis_lines_ratio": ratio(sum(ln.endswith(ELLIPSES) for ln in lines), len(lines)),
        "non_alpha_words_ratio": ratio(words_without_letter(words, units), n_words),
        "stop_word_count": float(sum(map(_STOP_WORD_CASES.__contains__, words))),
        "dup_line_ratio": dup_line,
        "dup_para_ratio": dup_para,
        "dup_line_char_ratio": dup_line_chars,
        "dup_para_char_ratio": dup_para_chars,
        **_ngram_ratios(segment_words(text)),
        "words_removed_ratio": (word_count - counted_words(edited)) / word_count if word_count else math.inf,
    }
    return values, edited


@dataclass(frozen=True)
class DclmRule(Rule):
    """DCLM-Baseline's thresholds (its RefinedWeb yaml); a page without words has no mean length (NaN), which
    fails the bound here as DCLM's ``word_length_filter`` drops it."""

    min_word_count: float | None = 50
    max_word_count: float | None = 100_000
    min_mean_word_length: float | None = 3
    max_mean_word_length: float | None = 10
    max_symbol_word_ratio: float | None = 0.1
    max_bullet_lines_ratio: float | None = 0.9
    max_end_ellipsis_lines_ratio: float | None = 0.3
    max_non_alpha_words_ratio: float | None = 0.2
    min_stop_word_count: float | None = 2
    max_dup_line_ratio: float | None = 0.3
    max_dup_para_ratio: float | None = 0.3
    max_dup_line_char_ratio: float | None = 0.2
    max_dup_para_char_ratio: float | None = 0.2
    max_top_2gram_char_ratio: float | None = TOP_NGRAMS[2]
    max_top_3gram_char_ratio: float | None = TOP_NGRAMS[3]
    max_top_4gram_char_ratio: float | None = TOP_NGRAMS[4]
    max_dup_5gram_char_ratio: float | None = DUP_NGRAMS[5]
    max_dup_6gram_char_ratio: float | None = DUP_NGRAMS[6]
    max_dup_7gram_char_ratio: float | None = DUP_NGRAMS[7]
    max_dup_8gram_char_ratio: float | None = DUP_NGRAMS[8]
    max_dup_9gram_char_ratio: float | None = DUP_NGRAMS[9]
    max_dup_10gram_char_ratio: float | None = DUP_NGRAMS[10]
    max_words_removed_ratio: float | None = 0.05

    FAMILY = FAMILY
    BOUNDS = tuple(
        Bound(signal, side, f"{FAMILY}_{signal}", limits=limits)
        for signal, side, limits in (
            ("word_count", "min", AMOUNT),
            ("word_count", "max", AMOUNT),
            ("mean_word_length", "min", AMOUNT),
            ("mean_word_length", "max", AMOUNT),
            ("symbol_word_ratio", "max", AMOUNT),
            ("bullet_lines_ratio", "max", FRACTION),
            ("end_ellipsis_lines_ratio", "max", FRACTION),
            ("non_alpha_words_ratio", "max", FRACTION),
            ("stop_word_count", "min", AMOUNT),
            ("dup_line_ratio", "max", FRACTION),
            ("dup_para_ratio", "max", FRACTION),
            ("dup_line_char_ratio", "max", FRACTION),
            ("dup_para_char_ratio", "max", FRACTION),
            *((f"top_{n}gram_char_ratio", "max", FRACTION) for n in TOP_NGRAMS),
            *((f"dup_{n}gram_char_ratio", "max", FRACTION) for n in DUP_NGRAMS),
            ("words_removed_ratio", "max", FRACTION),
        )
    )

    def skips(self, bound: Bound, value: float) -> bool:
        return False

    def check(self, signals: dict) -> bool | tuple[bool, str]:  # type: ignore[override]
        if math.isnan(signals.get(f"{FAMILY}_mean_word_length", 0.0)):
            return False, f"{FAMILY}_mean_word_length"
        return super().check(signals)


def judge(text: str, rule: DclmRule | None = None) -> tuple[bool | tuple[bool, str], dict[str, float], str]:
    """(verdict, signal columns, kept text) of a raw page: what the DCLM step does to one document."""
    values, edited = signals(edit_page(text))
    columns = {f"{FAMILY}_{k}": v for k, v in values.items()}
    return (rule or DclmRule()).check(columns), columns, edited
