"""The resiliparse extractor behind the trafilatura step's contract (sandbox, drop reasons, exclusion
writer), on real WARC files; and the DCLM-style recipe loads under today's schema."""

from __future__ import annotations

import json
from pathlib import Path

from datatrove.data import Document
from datatrove.pipeline.writers import JsonlWriter

from curate.extract_resiliparse import ResiliparseExtractor, resiliparse_extract
from curate.warc import RobustWarcReader
from pipelines.recipe import load_recipe
from tests.support.shared_data import require, warc_sample_files

ARTICLE = (
    "<html><head><title>t</title></head><body><nav><a href='/'>Home</a> | <a href='/a'>About</a></nav>"
    "<article><h1>Lobsters</h1><p>The European lobster is a species of clawed lobster from the eastern "
    "Atlantic Ocean, the Mediterranean Sea and parts of the Black Sea.</p></article>"
    "<footer>Copyright 2024</footer></body></html>"
)


def test_main_content_without_navigation() -> None:
    text = resiliparse_extract(ARTICLE)
    assert "European lobster is a species" in text
    assert "About" not in text and "Copyright" not in text
    assert "About" in resiliparse_extract(ARTICLE, main_content=False)
    assert resiliparse_extract("<html><body><script>var x = 1;</script></body></html>") is None


def test_step_contract_drop_reasons(tmp_path: Path) -> None:
    docs = [
        Document(text=ARTICLE, id="article", metadata={"url": "https://a.example/"}),
        Document(text="<html><body></body></html>", id="empty", metadata={"url": "https://b.example/"}),
        Document(text="<p>" + "x " * 600 + "</p>", id="large", metadata={"url": "https://c.example/"}),
    ]
    writer = JsonlWriter(str(tmp_path), output_filename="${rank}.jsonl", compression=None)
    step = ResiliparseExtractor(max_html_bytes=1000, timeout=5.0, exclusion_writer=writer)
    kept = list(step.run(iter(docs)))
    assert [d.id for d in kept] == ["article"]
    assert "European lobster" in kept[0].text
    rows = [json.loads(line) for line in (tmp_path / "00000.jsonl").read_text().splitlines()]
    assert {r["id"]: r["metadata"]["filter_reason"] for r in rows} == {"empty": "empty", "large": "too_large"}
    assert step.stats["dropped_empty"].total == 1 and step.stats["dropped_too_large"].total == 1


def test_real_warc_files() -> None:
    require()
    files = [p for p in warc_sample_files() if p.name.startswith(("cc-main-2020-34", "dolma_wget"))]
    for path in files:
        step = ResiliparseExtractor(timeout=5.0)
        docs = list(step.run(RobustWarcReader(str(path.parent), glob_pattern=path.name).run()))
        stats = step.stats
        assert docs and all(d.text.strip() for d in docs)
        assert stats["total"].total == stats["forwarded"].total + stats["dropped"].total


def test_dclm_recipe_loads_under_todays_schema() -> None:
    recipe = load_recipe(Path(__file__).resolve().parents[2] / "pipelines" / "recipes" / "dclm.yaml")
    curate = recipe.curate
    assert recipe.name == "dclm"
    assert curate.language.languages == ("en",) and curate.language.threshold == 0.65
    assert curate.signals.heuristics == "dclm"  # DCLM's own heuristics replace FineWeb's four families
    assert [rule.FAMILY for rule in curate.rules.ordered(curate.signals.heuristics)] == ["dclm"]
    assert curate.quality_classifier.top_fraction == 0.1
    assert (curate.extraction.extractor, curate.extraction.main_content, curate.reader.library) == (
        "resiliparse",
        True,
        "fastwarc",
    )
    assert curate.decontamination.n_grams == 13 and not curate.decontamination.enabled
    dedup = recipe.dedup.config()
    assert dedup.url_dedup and dedup.exact_dedup and dedup.exact_text == "simplified"
    assert (dedup.method, dedup.bff_max_ngram, dedup.bff_threshold, dedup.bff_fp_rate) == ("bff", 13, 0.8, 0.01)
    assert not recipe.dedup.write_index  # the cross-dump index is MinHash's
