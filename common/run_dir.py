"""Which folder of a run directory holds its kept documents: ``deduped/`` when dedup ran, else ``curated/``.

Tokenizer training, mixture sources (through ``tokenizer.inputs``) and the run report all read "the
documents of a run" and must agree on what that is, so the rule lives here, below every room that needs
it; none of them has to import a room above it (``pipelines.layout``) to learn it.
"""

from __future__ import annotations

from pathlib import Path

from common.storage import as_path, filesystem, is_remote, keys_under

CURATED = "curated"
DEDUPED = "deduped"
# Deduplicated documents are the ones to train and mix on; curated ones are kept only without dedup.
KEPT_ORDER = (DEDUPED, CURATED)


def kept_documents_dir(run_dir: str | Path) -> Path | None:
    """``run_dir/deduped`` when it holds parquet, else ``run_dir/curated`` when that does; None for neither."""
    for name in KEPT_ORDER:
        folder = as_path(run_dir) / name
        if parquet_under(folder):
            return folder
    return None


def parquet_under(folder: str | Path) -> list[Path]:
    """Visible parquet files anywhere under ``folder`` (unsorted); [] when it is not a folder.

    On a store one listing of the keys below it (the folder test and the recursive glob were a HEAD and
    four listings, and a HEAD per file, one after another: the run's report asks it of ``deduped/``)."""
    folder = as_path(folder)
    if is_remote(folder):
        fs, inner = filesystem(folder)
        inner = inner.rstrip("/")
        found = [folder / name[len(inner) + 1 :] for name in keys_under(fs, inner) if name[-1] != "/"]
        return [p for p in found if p.name.endswith(".parquet") and is_visible(p)]
    if not folder.is_dir():
        return []
    return [p for p in folder.rglob("*.parquet") if p.is_file() and is_visible(p)]


def is_visible(path: Path) -> bool:
    """Hidden names are temp files of writers still in progress (``common.atomic`` writes ``.NAME.*.tmp``)."""
    return not path.name.startswith(".")


# A refilter's output (pipelines.refilter) is a run directory whose documents say where they were before
# and why: the inspector and the report show "newly dropped / newly kept" from these two columns.
PREVIOUSLY = "refilter_previously"  # "curated", or the removed/<step>/ folder the document was in
PREVIOUS_REASON = "refilter_previous_reason"  # its filter_reason there (None when it was kept)
