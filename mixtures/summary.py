"""The table a build prints: what each source was asked for and what it got."""

from __future__ import annotations

from mixtures.manifest import Manifest


def format_summary(manifest: Manifest) -> str:
    head = f"{'source':<24} {'weight':>8} {'realized':>8} {'tokens':>14} {'docs':>10} {'available':>14}"
    lines = [head + f" {'reps':>6}"]
    for name, s in manifest.sources.items():
        lines.append(
            f"{name[:24]:<24} {s.weight:>8.4f} {s.realized_ratio:>8.4f} {s.tokens:>14,} {s.documents:>10,} "
            f"{s.available_tokens:>14,} {s.repetitions:>6.2f}"
        )
    too_long = {name: s.skipped_too_long for name, s in manifest.sources.items() if s.skipped_too_long}
    if too_long:
        skipped = ", ".join(f"{name} {n:,}" for name, n in too_long.items())
        lines.append(f"documents over max_doc_chars, not tokenized: {skipped}")
    lines.append(
        f"total {manifest.total_tokens:,} tokens (target {manifest.target_tokens:,}), "
        f"{len(manifest.files)} file(s), {manifest.token_dtype}"
    )
    return "\n".join(lines)
