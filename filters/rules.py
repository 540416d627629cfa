"""Heuristic rules as predicates over stored signals (Gopher repetition, Gopher quality, C4, FineWeb).

Each rule group checks its conditions in datatrove's order and returns datatrove's reason string for
the first one that fails, so ``removed/<rule>/`` and the stats read exactly like datatrove's. A
threshold of ``None`` disables that condition (datatrove's ``if self.x and ...``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

Signals = Mapping[str, float]
Verdict = bool | tuple[bool, str]


def _on(value: float | None) -> bool:
    return value is not None and value is not False and value != 0


@dataclass(frozen=True)
class GopherRepetitionRule:
    """Gopher (Rae et al. 2021, Table A1) repetition thresholds."""

    dup_line_frac: float | None = 0.3
    dup_para_frac: float | None = 0.3
    dup_line_char_frac: float | None = 0.2
    dup_para_char_frac: float | None = 0.2
    top_n_grams: dict[int, float] = field(default_factory=lambda: {2: 0.2, 3: 0.18, 4: 0.16})
    dup_n_grams: dict[int, float] = field(
        default_factory=lambda: {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10}
    )
    name = "gopher_repetition"

    def check(self, s: Signals) -> Verdict:
        if "dup_para_frac" not in s:
            return False, "empty"
        if _on(self.dup_para_frac) and s["dup_para_frac"] > self.dup_para_frac:
            return False, "dup_para_frac"
        if _on(self.dup_para_char_frac) and s["dup_para_char_frac"] > self.dup_para_char_frac:
            return False, "dup_para_char_frac"
        if _on(self.dup_line_frac) and s["dup_line_frac"] > self.dup_line_frac:
            return False, "dup_line_frac"
        if _on(self.dup_line_char_frac) and s["dup_line_char_frac"] > self.dup_line_char_frac:
            return False, "dup_line_char_frac"
        for n, frac in sorted(self.top_n_grams.items()):
            if s.get(f"top_{n}_gram_char_frac", 0.0) > frac:
                return False, f"top_{n}_gram"
        for n, frac in sorted(self.dup_n_grams.items()):
            if s.get(f"dup_{n}_gram_char_frac", 0.0) > frac:
                return False, f"duplicated_{n}_n_grams"
        return True


@dataclass(frozen=True)
class GopherQualityRule:
    """Gopher quality thresholds (word counts, word length, symbols, bullets, alpha, stop words)."""

    min_doc_words: int | None = 50
    max_doc_words: int | None = 100_000
    min_avg_word_length: float | None = 3
    max_avg_word_length: float | None = 10
    max_symbol_word_ratio: float | None = 0.1
    max_bullet_lines_ratio: float | None = 0.9
    max_ellipsis_lines_ratio: float | None = 0.3
    max_non_alpha_words_ratio: float | None = 0.8
    min_stop_words: int | None = 2
    name = "gopher_quality"

    def check(self, s: Signals) -> Verdict:
        words = s["word_count"]
        if _on(self.min_doc_words) and words < self.min_doc_words:
            return False, "gopher_short_doc"
        if _on(self.max_doc_words) and words > self.max_doc_words:
            return False, "gopher_long_doc"
        mean = s["mean_word_length"]
        if not math.isnan(mean):
            if _on(self.min_avg_word_length) and mean < self.min_avg_word_length:
                return False, "gopher_below_avg_threshold"
            if _on(self.max_avg_word_length) and mean > self.max_avg_word_length:
                return False, "gopher_above_avg_threshold"
        if _on(self.max_symbol_word_ratio) and s["hash_word_ratio"] > self.max_symbol_word_ratio:
            return False, "gopher_too_many_hashes"
        if _on(self.max_symbol_word_ratio) and s["ellipsis_word_ratio"] > self.max_symbol_word_ratio:
            return False, "gopher_too_many_ellipsis"
        if _on(self.max_bullet_lines_ratio) and s["bullet_lines_ratio"] > self.max_bullet_lines_ratio:
            return False, "gopher_too_many_bullets"
        if (
            _on(self.max_ellipsis_lines_ratio)
            and s["end_ellipsis_lines_ratio"] > self.max_ellipsis_lines_ratio
        ):
            return False, "gopher_too_many_end_ellipsis"
        if _on(self.max_non_alpha_words_ratio) and s["alpha_words_ratio"] < self.max_non_alpha_words_ratio:
            return False, "gopher_below_alpha_threshold"
        if _on(self.min_stop_words) and s["stop_word_count"] < self.min_stop_words:
            return False, "gopher_enough_stop_words"
        return True


@dataclass(frozen=True)
class C4QualityRule:
    """C4's document-level drops; its line-level edits are applied when the document passes."""

    filter_lorem_ipsum: bool = True
    filter_curly_bracket: bool = True
    min_num_sentences: int = 5
    name = "c4_quality"

    def check(self, s: Signals) -> Verdict:
        lorem = int(s["c4_lorem_ipsum_line"]) if self.filter_lorem_ipsum else -1
        curly = int(s["c4_curly_bracket_line"]) if self.filter_curly_bracket else -1
        if lorem >= 0 and (curly < 0 or lorem <= curly):
            return False, "lorem_ipsum"
        if curly >= 0:
            return False, "curly_bracket"
        if self.min_num_sentences != -1 and s["c4_sentences"] < self.min_num_sentences:
            return False, "too_few_sentences"
        return True


@dataclass(frozen=True)
class FineWebQualityRule:
    """FineWeb's own rules (Penedo et al. 2024) over C4's output text."""

    line_punct_thr: float = 0.12
    line_punct_exclude_zero: bool = False
    short_line_thr: float = 0.67
    char_duplicates_ratio: float = 0.01
    new_line_ratio: float = 0.3
    name = "fineweb_quality"

    def check(self, s: Signals) -> Verdict:
        if s["fw_lines"] == 0:
            return False, "empty"
        ratio = s["fw_line_punct_ratio"]
        if ratio < self.line_punct_thr and not (ratio == 0 and self.line_punct_exclude_zero):
            return False, "line_punct_ratio"
        if s["fw_short_line_ratio"] > self.short_line_thr:
            return False, "short_line_ratio"
        if s["fw_char_dup_ratio"] > self.char_duplicates_ratio:
            return False, "char_dup_ratio"
        if s["fw_list_ratio"] > self.new_line_ratio:
            return False, "list_ratio"
        return True


Rule = GopherRepetitionRule | GopherQualityRule | C4QualityRule | FineWebQualityRule
RULE_TYPES: dict[str, type] = {
    "gopher_repetition": GopherRepetitionRule,
    "gopher_quality": GopherQualityRule,
    "c4_quality": C4QualityRule,
    "fineweb_quality": FineWebQualityRule,
}
