"""The pre-tokenizer split pattern: which character runs BPE may merge across, and which never."""

from __future__ import annotations

# GPT-4 family: a word with at most one leading non-letter (" the", "(the", "'the"); numbers in short
# digit groups; punctuation runs with their trailing newlines; newline runs; other whitespace runs,
# keeping the last space for the next word. Words include combining marks (\p{M}, as GPT-4o's pattern
# does): cl100k cuts Hindi, Thai or decomposed accents at every vowel sign or accent, which BPE can
# then never merge back.
_CONTRACTION = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
_LEAD = r"[^\r\n\p{L}\p{M}\p{N}]?"
_NEWLINES = r"\s*[\r\n]+"
_SPACES = r"\s+(?!\S)|\s+"

# GPT-4o (o200k) words: split at lower->upper case changes ("JavaScript" -> "Java", "Script"), the
# contraction kept on its word ("don't", "We'll"), "/" kept with the punctuation before it ("://").
_UPPER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"
_LOWER = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
_GPT4O = [
    rf"{_LEAD}{_UPPER}*{_LOWER}+{_CONTRACTION}?",
    rf"{_LEAD}{_UPPER}+{_LOWER}*{_CONTRACTION}?",
]
_GPT4O_PUNCT = r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n/]*"
# GPT-4 (cl100k) words: contractions a piece of their own, no case split.
_GPT4 = [_CONTRACTION, rf"{_LEAD}[\p{{L}}\p{{M}}]+"]
_GPT4_PUNCT = r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"

WORD_STYLES = ("gpt4o", "gpt4")


def split_pattern(max_digits: int | None = 3, number_space: bool = True, words: str = "gpt4o") -> str:
    """Return the split regex (Oniguruma syntax, as HF `tokenizers` uses).

    `max_digits` caps digit groups (GPT-4: 3) so numbers split into regular chunks instead of
    memorising frequent ones like years; None means unlimited (GPT-2). `number_space` lets a number
    carry its leading space (" 2019" -> " 201", "9") the way words do; GPT-4 makes that space a token
    of its own, which costs one token per number in running text. `words` is "gpt4o" (default: on
    held-out web text it compresses better, see tokenizer/README.md) or "gpt4".
    """
    if max_digits is not None and max_digits < 1:
        raise ValueError(f"max_digits must be >= 1 or None, got {max_digits}")
    if words not in WORD_STYLES:
        raise ValueError(f"words must be one of {WORD_STYLES}, got {words!r}")
    quantifier = "+" if max_digits is None else f"{{1,{max_digits}}}"
    number = (" ?" if number_space else "") + r"\p{N}" + quantifier
    word_rules, punct = (_GPT4O, _GPT4O_PUNCT) if words == "gpt4o" else (_GPT4, _GPT4_PUNCT)
    return "|".join([*word_rules, number, punct, _NEWLINES, _SPACES])
