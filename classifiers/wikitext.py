"""WikiText's tokenized text back to plain prose, split into sections.

WikiText spaces out punctuation (``word , word``), writes joined hyphens and numbers as ``@-@``,
``@,@``, ``@.@`` and replaces rare words with ``<unk>``. Left in, a quality classifier would learn
those artefacts instead of quality, so they are undone (``<unk>`` tokens are dropped).
"""

from __future__ import annotations

import re

_JOINERS = re.compile(r" @([-,.])@ ")
_UNK = re.compile(r"\s*<unk>")
_SPACE_BEFORE = re.compile(r" ([.,;:!?%)\]}])")
_SPACE_AFTER = re.compile(r"([(\[{$]) ")
_CLITICS = re.compile(r" (n't|'s|'re|'ve|'ll|'d|'m)\b")
_QUOTED = re.compile(r'" ([^"\n]*?) "')
_POSSESSIVE_PLURAL = re.compile(r"s ' ")
_MULTI_SPACE = re.compile(r"[ \t]{2,}")
_HEADING = re.compile(r"^\s*(=(?: =)*) (.+?) \1\s*$")


def detokenize(text: str) -> str:
    """WikiText markup -> ordinary text (line breaks kept)."""
    text = _JOINERS.sub(r"\1", text)
    text = _UNK.sub("", text)
    text = _QUOTED.sub(r'"\1"', text)
    text = _SPACE_BEFORE.sub(r"\1", text)
    text = _SPACE_AFTER.sub(r"\1", text)
    text = _CLITICS.sub(r"\1", text)
    text = _POSSESSIVE_PLURAL.sub("s' ", text)
    text = _MULTI_SPACE.sub(" ", text)
    return "\n".join(line.strip() for line in text.split("\n"))


def heading_level(line: str) -> int:
    """2 for ``= = Title = =``, 3 for ``= = = Title = = =``; 0 for a body line."""
    m = _HEADING.match(line)
    return m.group(1).count("=") if m else 0


def sections(article: str, min_words: int = 50) -> list[str]:
    """Top-level sections of one article (subsections stay inside), headings removed, detokenized;
    sections shorter than ``min_words`` are merged into the next one."""
    out: list[str] = []
    current: list[str] = []
    for line in article.split("\n"):
        level = heading_level(line)
        if level == 2 and current and sum(len(x.split()) for x in current) >= min_words:
            out.append(detokenize("\n".join(current)))
            current = []
        if level == 0 and line.strip():
            current.append(line)
    if current:
        text = detokenize("\n".join(current))
        if out and len(text.split()) < min_words:
            out[-1] = out[-1] + "\n" + text
        else:
            out.append(text)
    return [s for s in out if s.strip()]
