"""The README's quoted quickstart figures are rewritten from a run's eval.json, and `--check` says when they differ."""

from __future__ import annotations

import json
from pathlib import Path

from scripts.readme_figures import main

OLD = (
    "then:\n`final evaluation: 1.8710 bits/byte on 27 held-out documents (98,468 bytes), BLiMP 48.7 % of "
    "1,340 pairs\n(chance 50 %)` on the sample.\n"
)
NEW = (
    "final evaluation: 1.8711 bits/byte on 27 held-out documents (98,468 bytes), BLiMP 48.9 % of 1,340 pairs "
    "(chance 50 %)"
)


def test_the_quoted_line_follows_the_run(tmp_path: Path) -> None:
    readme, run = tmp_path / "README.md", tmp_path / "sample"
    readme.write_text(OLD)
    (run / "train").mkdir(parents=True)
    (run / "train" / "eval.json").write_text(json.dumps({"summary": NEW}))
    flags = ["--run", str(run), "--readme", str(readme)]
    assert main([*flags, "--check"]) == 1 and readme.read_text() == OLD  # --check writes nothing
    assert main(flags) == 0
    assert readme.read_text() == f"then:\n`{NEW}` on the sample.\n"
    assert main([*flags, "--check"]) == 0
