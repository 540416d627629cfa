"""Write the quickstart's printed figures into README.md from a run, so the README quotes what a run printed.

    ./quickstart.sh && python -m scripts.readme_figures            # rewrite README.md from out/sample
    python -m scripts.readme_figures --run out/sample --check      # exit 1 when the README differs

The figure is the chain's `final evaluation: ...` line (`train/eval.json`'s summary, what
`pipelines.run --train` prints); the README quotes it in backticks. A hand-typed copy drifted (issue 31).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from common.atomic import atomic_write_text
from common.cli import ArgumentParser, errors_as_one_line

REPO = Path(__file__).resolve().parents[1]
QUOTED = re.compile(r"`final evaluation: [^`]*`")


def run_summary(run: Path) -> str:
    """The `final evaluation: ...` line a chain run printed (its train/eval.json)."""
    return json.loads((run / "train" / "eval.json").read_text())["summary"]


def with_summary(readme: str, summary: str) -> str:
    """`readme` with its quoted final-evaluation line replaced by `summary` (a ValueError when it quotes none)."""
    if not QUOTED.search(readme):
        raise ValueError("README quotes no `final evaluation: ...` line")
    return QUOTED.sub(lambda _: f"`{summary}`", readme, count=1)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m scripts.readme_figures", description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=REPO / "out" / "sample", help="a chain run (default: out/sample)")
    parser.add_argument("--readme", type=Path, default=REPO / "README.md")
    parser.add_argument("--check", action="store_true", help="only compare: exit 1 when the README differs")
    args = parser.parse_args(argv)
    with errors_as_one_line(ValueError, OSError, KeyError):
        old = args.readme.read_text()
        new = with_summary(old, run_summary(args.run))
    if new == old:
        print(f"{args.readme}: up to date")
        return 0
    if args.check:
        print(f"{args.readme} quotes other figures than {args.run}", file=sys.stderr)
        return 1
    atomic_write_text(args.readme, new)
    print(f"{args.readme}: {QUOTED.search(new).group(0)}")  # type: ignore[union-attr]
    return 0


if __name__ == "__main__":
    sys.exit(main())
