"""The pre-tokenizer split pattern: which character runs BPE may merge across, and which never."""

from __future__ import annotations

# GPT-4 (cl100k) style: case-insensitive English contractions; a word with at most one leading
# non-letter (" the", "(the", "'the"); numbers in short digit groups; punctuation runs with their
# trailing newlines; newline runs; other whitespace runs, keeping the last space for the next word.
# Words include combining marks (\p{M}, as GPT-4o's pattern does): cl100k cuts Hindi, Thai or
# decomposed accents at every vowel sign or accent, which BPE can then never merge back.
_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
_WORD = r"[^\r\n\p{L}\p{M}\p{N}]?[\p{L}\p{M}]+"
_PUNCT = r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
_NEWLINES = r"\s*[\r\n]+"
_SPACES = r"\s+(?!\S)|\s+"


def split_pattern(max_digits: int | None = 3, number_space: bool = True) -> str:
    """Return the split regex (Oniguruma syntax, as HF `tokenizers` uses).

    `max_digits` caps digit groups (GPT-4: 3) so numbers split into regular chunks instead of
    memorising frequent ones like years; None means unlimited (GPT-2). `number_space` lets a number
    carry its leading space (" 2019" -> " 201", "9") the way words do; GPT-4 makes that space a token
    of its own, which costs one token per number in running text.
    """
    if max_digits is not None and max_digits < 1:
        raise ValueError(f"max_digits must be >= 1 or None, got {max_digits}")
    quantifier = "+" if max_digits is None else f"{{1,{max_digits}}}"
    number = (" ?" if number_space else "") + r"\p{N}" + quantifier
    return "|".join([_CONTRACTIONS, _WORD, number, _PUNCT, _NEWLINES, _SPACES])
