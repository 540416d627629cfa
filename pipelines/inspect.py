"""``python -m pipelines.inspect RUN``: browse a run's documents in the terminal, with signals and reason.

Kept documents by default (``deduped/`` when dedup ran, else ``curated/``); ``--removed RULE`` shows
what a step dropped, where RULE is a step id, which is its ``removed/`` folder (``gopher_quality``,
``language``, ``minhash``, ``decontamination``, ``cross_dump``, ...), a drop reason (``dup_line_frac``,
``precheck``, ``contaminated[wiki]``: a reason without its detail, ...) or ``all``.
``--grep`` keeps documents whose text or URL matches a regex; ``--sample N`` picks N at random
(seeded, so a colleague sees the same ones). Files are streamed, so a whole dump is fine. A search of
one document stops after ``--grep-timeout`` seconds (the ``regex`` module's timeout): a pattern that
backtracks catastrophically, like ``(a|aa)+$`` on a long run of a's, ends in one ``error:`` line, not a hang.
On a refilter output (``RUN/refilter/<name>/``), ``--newly dropped`` shows the documents the new recipe
dropped that the run had kept, ``--newly kept`` those it lets back in, each with where it was and why.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import textwrap
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path

import regex

from common.cli import COUNT, SEED, ArgumentParser, integer, one_line, real
from common.run_dir import CURATED, PREVIOUS_REASON, PREVIOUSLY
from pipelines.report.data import (
    NEWLY,
    DocSet,
    RunInfo,
    disk_reasons,
    load_run,
    newly,
    reason_kind,
    resolve_run_dir,
)
from pipelines.report.scan import Reservoir, iter_batches

NOT_SIGNALS = ("text", "id", "url", "dump", "date", "warc_path", "language", "language_score", "filter_reason")


class UsageError(ValueError):
    """A RULE or option that names nothing in this run."""


def available(run: RunInfo) -> str:
    """What ``--removed`` accepts in this run, for the error message and ``--list``."""
    lines = [f"kept documents (the default): {run.kept.label}", "--removed takes a folder, one of its reasons, or all:"]
    for docset in run.removed:
        reasons = ", ".join(f"{r} ({n:,})" for r, n in disk_reasons(docset).most_common())
        step = f"by {run.steps[docset.step].name}" if docset.step is not None else "(no step in stats.json)"
        lines.append(f"  {docset.key:20} removed {step}: {reasons}")
    if comparison := run.meta.get("comparison"):  # a refilter output
        lines.append(
            f"refilter of {run.meta.get('refilter_of')}: --newly dropped ({comparison['newly_dropped']:,} documents "
            f"the run kept), --newly kept ({comparison['newly_kept']:,} documents the run removed)"
        )
    return "\n".join(lines)


def select(run: RunInfo, rule: str | None, curated: bool = False) -> tuple[list[DocSet], str | None]:
    """Resolve ``--removed RULE`` (a step id or a reason; or None for the kept documents): the document sets to
    read, and the drop reason to keep (None: any)."""
    if rule is None:
        return [DocSet.kept(run.root / "curated") if curated else run.kept], None
    if rule == "all":
        return list(run.removed), None
    by_key = [s for s in run.removed if s.key == rule]
    if by_key:
        return by_key, None
    by_reason = [s for s in run.removed if rule in disk_reasons(s)]
    if by_reason:
        return by_reason, rule
    if any(s.name == rule or rule in s.reasons for s in run.steps):
        return [], None  # a step or reason of this run that removed nothing on disk
    raise UsageError(f"no removed documents for {rule!r} in this run; --removed takes one of:\n{available(run)}")


def changed(
    run: RunInfo, which: str, sets: list[DocSet], rule: str | None
) -> tuple[list[DocSet], Callable[[dict], bool]]:
    """``--newly dropped|kept`` on a refilter output: the sets to read (``--removed RULE`` narrows the dropped
    ones) and which of their rows moved."""
    if not run.meta.get("refilter_of"):
        raise UsageError(f"--newly compares a refilter output with its run; {run.root} is not one (pipelines.refilter)")
    if which == "kept" and rule is not None:
        raise UsageError("--newly kept shows kept documents: drop --removed")
    every, moved = newly(run, which)
    return (sets if rule is not None else every), moved


def documents(
    sets: list[DocSet],
    only: str | None,
    pattern: regex.Pattern | None,
    timeout: float | None = None,
    moved: Callable[[dict], bool] | None = None,
) -> Iterator[tuple[DocSet, dict]]:
    """Matching documents (of the drop reason ``only``, when given; that ``moved``, when given), streamed in
    file order; a search that runs past ``timeout`` seconds raises TimeoutError."""
    for docset in sets:
        for batch in iter_batches(docset.files):
            for row in batch.to_pylist():
                reason = row.get("filter_reason") or docset.default_reason
                if only is not None and only not in (reason, reason_kind(reason or "")):
                    continue
                if moved is not None and not moved(row):
                    continue
                text, url = row.get("text") or "", row.get("url") or ""
                if pattern is not None and not (
                    pattern.search(text, timeout=timeout) or pattern.search(url, timeout=timeout)
                ):
                    continue
                row["filter_reason"] = reason
                yield docset, row


def sample(stream: Iterator[tuple[DocSet, dict]], n: int, seed: int) -> tuple[list[tuple[DocSet, dict]], int]:
    """A uniform random ``n`` of the stream (the report's reservoir), in stream order, and how many there were."""
    reservoir = Reservoir(n, random.Random(seed))
    for index, item in enumerate(stream):
        if (slot := reservoir.slot()) is not None:
            reservoir.items[slot] = (index, item)
    return [item for _, item in sorted(reservoir.items, key=lambda p: p[0])], reservoir.seen


def _excerpt(text: str, pattern: regex.Pattern | None, chars: int, timeout: float | None = None) -> str:
    """The text (or ``chars`` of it around the first match), with the match marked »like this«."""
    match = pattern.search(text, timeout=timeout) if pattern is not None else None
    if chars and len(text) > chars:
        start = max(0, match.start() - chars // 3) if match else 0
        end = start + chars
        body = ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")
    else:
        body = text
    if pattern is not None:
        body = pattern.sub(lambda m: f"»{m.group(0)}«", body, timeout=timeout)
    return body


GREP_TIMEOUT_S = 5.0  # a linear search of a megabyte-long page takes milliseconds

# Control characters (ESC sequences, BEL, C1 controls, ...) from a crawled page must not reach the terminal.
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c != 0x0A}


def printable(text: str) -> str:
    """``text`` with every control character but the newline shown as ``\\xNN``."""
    return text.translate(_CONTROL)


def format_document(
    docset: DocSet, row: dict, pattern: regex.Pattern | None, chars: int, width: int, timeout: float | None = None
) -> str:
    """One document as a terminal block: where it went and why, metadata, signals, text."""
    where = "kept" if docset.key == "kept" else f"removed/{docset.key}"
    reason = row.get("filter_reason")
    head = f"── [{where}" + (f" · {reason}" if reason and docset.key != "kept" else "") + f"] {row.get('url') or ''}"
    if previously := row.get(PREVIOUSLY):  # a refilter output: where the run had put it
        was = "kept" if previously == CURATED else f"removed/{previously} · {row.get(PREVIOUS_REASON) or '–'}"
        head += f"\n   before the refilter: [{was}]"
    score = row.get("language_score")
    meta = [
        f"id {row.get('id')}",
        f"date {row.get('date')}",
        f"language {row.get('language') or '–'}" + (f" ({score:.3f})" if isinstance(score, float) else ""),
        f"tokens {len((row.get('text') or '').split()):,}",
    ]
    size = row.get("minhash_cluster_size")
    if size is not None:
        meta.append(f"cluster {row.get('minhash_cluster_id')} of {size}" if size > 1 else "no near-duplicate")
    signals = [f"{k}={v:.4g}" for k, v in row.items() if k not in NOT_SIGNALS and isinstance(v, float) and v == v]
    sig = textwrap.fill(" ".join(signals), width, initial_indent="signals: ", subsequent_indent="  ") if signals else ""
    text = _excerpt(row.get("text") or "", pattern, chars, timeout) or "(no text)"
    body = "\n".join(
        textwrap.fill(line, width, initial_indent="  ", subsequent_indent="  ") or "  " for line in text.splitlines()
    )
    return printable("\n".join(x for x in (head, "  ".join(meta), sig, body) if x)) + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m pipelines.inspect",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run", type=Path, help="run directory (OUT/<DUMP>), or an OUT folder holding one run")
    parser.add_argument("--removed", metavar="RULE", help="removed documents: step id, reason, or 'all'")
    parser.add_argument("--curated", action="store_true", help="kept documents before dedup (curated/)")
    parser.add_argument("--sample", type=integer(1, 1 << 40), metavar="N", help="N documents at random (seeded)")
    parser.add_argument("--seed", type=SEED, default=0, help="seed of --sample (default 0)")
    parser.add_argument("--grep", metavar="PATTERN", help="only documents whose text or URL matches this regex")
    parser.add_argument("-i", "--ignore-case", action="store_true", help="--grep ignores case")
    parser.add_argument(
        "--grep-timeout",
        type=real(0, 86400, open_low=True),  # a day for one document
        default=GREP_TIMEOUT_S,
        metavar="SECONDS",
        help=f"most seconds --grep may search one document (default {GREP_TIMEOUT_S:g})",
    )
    parser.add_argument("--limit", type=COUNT, default=10, help="without --sample: the first N matches (default 10)")
    parser.add_argument("--chars", type=COUNT, default=600, help="characters of text per document (0: all)")
    parser.add_argument(
        "--newly",
        choices=NEWLY,
        help="on a refilter output (RUN/refilter/NAME): documents it dropped that the run kept (with --removed "
        "RULE: dropped by that rule), or that it kept and the run had removed; each shows where it was and why",
    )
    parser.add_argument("--list", action="store_true", help="list what --removed accepts in this run and exit")
    return parser


def run_inspect(args: argparse.Namespace, out=sys.stdout) -> int:
    """Print the selected documents; 2 on a bad RUN, RULE or pattern."""
    try:
        run = load_run(resolve_run_dir(args.run))
        if args.list:
            print(f"{run.root}\n{available(run)}", file=out)
            return 0
        sets, only = select(run, args.removed, args.curated)
        moved = None
        if args.newly is not None:
            sets, moved = changed(run, args.newly, sets, args.removed)
        try:
            pattern = regex.compile(args.grep, regex.IGNORECASE if args.ignore_case else 0) if args.grep else None
        except regex.error as err:
            raise UsageError(f"--grep: {err}") from None
        if not 0 < args.grep_timeout < float("inf"):  # nan too: a search must end
            raise UsageError(f"--grep-timeout must be a positive number of seconds, got {args.grep_timeout}")
        if args.sample is not None and args.sample < 1:
            raise UsageError("--sample must be >= 1")
        if args.limit < 0 or args.chars < 0:  # islice would raise a traceback on a negative count
            raise UsageError(f"--limit and --chars must be >= 0, got {args.limit} and {args.chars}")
    except (FileNotFoundError, UsageError) as err:
        print(f"error: {one_line(err)}", file=sys.stderr)
        return 2
    try:
        return _show(args, sets, only, pattern, moved, out)
    except TimeoutError:
        print(f"error: {one_line(_too_slow(args.grep, args.grep_timeout))}", file=sys.stderr)
        return 2


def _too_slow(pattern: str, seconds: float) -> str:
    return (
        f"--grep: {pattern!r} searched one document for more than {seconds:g} s and was stopped; it backtracks "
        "catastrophically (nested or overlapping repeats such as (a|aa)+); simplify it, or raise --grep-timeout"
    )


def _show(
    args: argparse.Namespace,
    sets: list[DocSet],
    only: str | None,
    pattern: regex.Pattern | None,
    moved: Callable[[dict], bool] | None,
    out,
) -> int:
    """Collect the selected documents (a --grep search bounded by --grep-timeout), then print them."""
    width = min(os.get_terminal_size().columns if out.isatty() else 100, 120)
    timeout = args.grep_timeout
    stream = documents(sets, only, pattern, timeout, moved)
    if args.sample is not None:
        items, total = sample(stream, args.sample, args.seed)
        summary = f"{len(items)} of {total:,} matching documents, sampled with seed {args.seed}"
    else:
        items = list(islice(stream, args.limit + 1))
        more = len(items) > args.limit
        items = items[: args.limit]
        summary = f"first {len(items)} matching documents" if items else "no matching documents"
        summary += f" (newly {args.newly} by the refilter)" if args.newly else ""
        summary += " (more match: --limit, --sample)" if more else ""
    for docset, row in items:
        print(format_document(docset, row, pattern, args.chars, width, timeout), file=out)
    print(summary, file=out)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run_inspect(args)
    except BrokenPipeError:  # `| head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
