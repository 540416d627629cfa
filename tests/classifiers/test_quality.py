"""The fastText quality classifier: training CLI, the curate-stage filter step and its failure modes.

Models are trained here, small and quick, on real text: detokenized WikiText articles (positives)
against the tag-stripped text of the real web pages in ``warc_samples`` (negatives).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datatrove.data import Document

from classifiers import train_quality
from classifiers.lid import LanguageIdentifier, bundled_ft176_path
from classifiers.metrics import roc_auc, top_fraction_threshold
from classifiers.quality_filter import QualityClassifierFilter, check_quality_model
from classifiers.quality_model import QualityModel, QualityModelError, sidecar_path
from classifiers.text_io import TextDoc, read_documents
from classifiers.wikitext import detokenize, sections
from tests.support import shared_data

TINY = ["--dim", "16", "--epoch", "10", "--lr", "0.5", "--bucket", "20000", "--threads", "1"]


def web_negatives(data: Path) -> list[dict]:
    from curate.extract import rough_text
    from curate.warc import iter_warc_records, record_to_dict

    rows = []
    for path in shared_data.warc_sample_files():
        with open(path, "rb") as f:
            for record in iter_warc_records(f):
                page = record_to_dict(record, lambda *_: None)
                if page:
                    rows.append({"text": rough_text(page["text"]), "group": f"{path.name}:{page['url']}"})
    rows = [r for r in rows if len(r["text"].split()) >= 20]
    predictions = LanguageIdentifier().predict([r["text"] for r in rows])
    return [r for r, p in zip(rows, predictions, strict=True) if p.score_of("en") > 0.65]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    """Positives split over jsonl, parquet and txt inputs; negatives as jsonl; a trained model."""
    data = shared_data.require()
    folder = tmp_path_factory.mktemp("quality")
    positives = []
    for line in (data / "wikitext2_articles" / "articles_valid.jsonl").read_text().splitlines():
        article = json.loads(line)
        positives += [{"text": s, "group": article["title"]} for s in sections(article["text"])]
    negatives = web_negatives(data)
    third = len(positives) // 3
    with open(folder / "pos.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in positives[:third])
    pq.write_table(pa.Table.from_pylist(positives[third : 2 * third]), folder / "pos.parquet")
    (folder / "pos.txt").write_text("".join(r["text"].replace("\n", " ") + "\n" for r in positives[2 * third :]))
    with open(folder / "neg.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in negatives)
    model = folder / "quality.bin"
    args = ["--positive", str(folder / "pos.jsonl"), str(folder / "pos.parquet"), str(folder / "pos.txt")]
    args += ["--negative", str(folder / "neg.jsonl"), "--out", str(model), *TINY, "--top-fraction", "0.3", "0.5"]
    assert train_quality.main(args) == 0
    return {"folder": folder, "model": model, "positives": positives, "negatives": negatives, "args": args}


def heldout_docs(corpus: dict) -> tuple[list[TextDoc], list[TextDoc]]:
    """The held-out split the CLI used (same inputs, same seed)."""
    folder = corpus["folder"]
    config = train_quality.TrainConfig()
    pos = read_documents([folder / "pos.jsonl", folder / "pos.parquet", folder / "pos.txt"])
    neg = read_documents([folder / "neg.jsonl"])
    return (
        train_quality.split_heldout(pos, config.heldout, config.seed)[1],
        train_quality.split_heldout(neg, config.heldout, config.seed)[1],
    )


def test_cli_reports_heldout_metrics(corpus: dict, capsys) -> None:
    meta = json.loads(sidecar_path(corpus["model"]).read_text())
    held = meta["heldout"]
    assert held["positive"] > 0 and held["negative"] > 0
    assert 0.7 < held["roc_auc"] <= 1.0  # Wikipedia against raw web pages: an easy, real signal
    assert 0 <= held["precision"] <= 1 and 0 <= held["recall"] <= 1
    pos, neg = heldout_docs(corpus)
    model = QualityModel.load(corpus["model"])
    scores = model.scores([d.text for d in pos + neg])
    assert held["roc_auc"] == pytest.approx(roc_auc([1] * len(pos) + [0] * len(neg), scores))
    qs = meta["calibration"]["quantiles"]
    assert len(qs) == 1001 and qs == sorted(qs)
    assert set(meta["calibration"]["top_fraction_thresholds"]) == {"0.3", "0.5"}
    assert meta["model_bytes"] == corpus["model"].stat().st_size < 10_000_000


def test_split_keeps_groups_together(corpus: dict) -> None:
    docs = [TextDoc(r["text"], r["group"]) for r in corpus["positives"]]
    train, held = train_quality.split_heldout(docs, 0.2, seed=0)
    assert held and train
    assert not {d.group for d in train} & {d.group for d in held}


def test_quantize_writes_a_smaller_usable_model(corpus: dict, tmp_path: Path) -> None:
    out = tmp_path / "quality.ftz"
    args = [a if a != str(corpus["model"]) else str(out) for a in corpus["args"]]
    assert train_quality.main([*args, "--quantize"]) == 0
    assert out.stat().st_size < corpus["model"].stat().st_size / 2
    scores = QualityModel.load(out).scores([r["text"] for r in corpus["positives"][:5]])
    assert all(0 <= s <= 1 for s in scores)


def curate_tail(model: Path, tmp: Path, threshold: float | None = None, top_fraction: float | None = None):
    """The curate pipeline the lead's builder makes for this recipe, from the classifier step on."""
    from curate.pipeline import build_curate_pipeline
    from pipelines.layout import RunLayout
    from pipelines.recipe import load_recipe

    config = load_recipe().curate
    qc = dataclasses.replace(
        config.quality_classifier, model=str(model), threshold=threshold, top_fraction=top_fraction
    )
    config = dataclasses.replace(config, quality_classifier=qc)
    layout = RunLayout(tmp / "run")
    steps = build_curate_pipeline(
        config, str(tmp), str(tmp / "paths.txt"), "test", str(layout.curated), str(layout.removed_root)
    )
    first = next(i for i, s in enumerate(steps) if isinstance(s, QualityClassifierFilter))
    return steps[first:], layout


def run_tail(steps, docs: list[Document]) -> None:
    data = iter(docs)
    for step in steps:
        data = step.run(data, 0, 1)
    for _ in data:
        pass


def read_rows(folder: Path) -> list[dict]:
    return [row for p in sorted(folder.glob("*.parquet")) for row in pq.read_table(p).to_pylist()]


def documents(corpus: dict) -> list[Document]:
    pos, neg = heldout_docs(corpus)
    return [
        Document(text=d.text, id=f"doc-{i}", metadata={"language": "en", "language_score": 0.9})
        for i, d in enumerate(pos + neg)
    ]


def test_threshold_decides_the_curated_output(corpus: dict, tmp_path: Path) -> None:
    docs = documents(corpus)
    scores = dict(
        zip([d.id for d in docs], QualityModel.load(corpus["model"]).scores([d.text for d in docs]), strict=True)
    )
    kept_sets = []
    for name, q in (("median", 50), ("upper", 75)):
        threshold = float(np.percentile(list(scores.values()), q))
        steps, layout = curate_tail(corpus["model"], tmp_path / name, threshold=threshold)
        assert steps[0].threshold == threshold
        run_tail(steps, documents(corpus))
        curated = read_rows(layout.curated)
        removed = read_rows(layout.removed("quality_classifier"))
        assert {r["id"] for r in curated} == {i for i, s in scores.items() if s >= threshold}
        assert {r["id"] for r in removed} == {i for i, s in scores.items() if s < threshold}
        assert {r["filter_reason"] for r in removed} == {"quality_score"}
        for row in curated + removed:
            assert row["quality_score"] == pytest.approx(scores[row["id"]], abs=1e-6)
        kept_sets.append({r["id"] for r in curated})
    assert kept_sets[1] < kept_sets[0]  # a higher threshold keeps a strict subset
    assert kept_sets[1] and len(kept_sets[0]) < len(docs)


def test_top_fraction_uses_the_threshold_stored_beside_the_model(corpus: dict) -> None:
    meta = json.loads(sidecar_path(corpus["model"]).read_text())
    step = QualityClassifierFilter(str(corpus["model"]), top_fraction=0.3)
    assert step.threshold == meta["calibration"]["top_fraction_thresholds"]["0.3"]
    pos, neg = heldout_docs(corpus)  # the calibration set when --calibration is not given
    scores = step.model.scores([d.text for d in pos + neg])
    assert step.threshold == top_fraction_threshold(scores, 0.3)
    kept = sum(s >= step.threshold for s in scores)
    assert kept >= np.ceil(0.3 * len(scores))
    between = QualityClassifierFilter(str(corpus["model"]), top_fraction=0.42)  # interpolated quantiles
    share = sum(s >= between.threshold for s in scores) / len(scores)
    assert abs(share - 0.42) <= 2 / len(scores)


def test_no_threshold_annotates_only(corpus: dict) -> None:
    step = QualityClassifierFilter(str(corpus["model"]))
    docs = documents(corpus)
    assert step.filter_batch(docs) == [True] * len(docs)
    assert all(0 <= d.metadata["quality_score"] <= 1 for d in docs)


def one_line_error(fn) -> str:
    with pytest.raises(QualityModelError) as err:
        fn()
    message = str(err.value)
    assert message and "\n" not in message
    return message


def test_unusable_models_fail_before_any_document(corpus: dict, tmp_path: Path) -> None:
    missing = tmp_path / "missing.bin"
    assert str(missing) in one_line_error(lambda: QualityClassifierFilter(str(missing), threshold=0.5))
    good = corpus["model"].read_bytes()
    for name, data in {"empty": b"", "garbage": b"\x00garbage" * 64, "truncated": good[: len(good) // 3]}.items():
        path = tmp_path / f"{name}.bin"
        path.write_bytes(data)
        assert str(path) in one_line_error(lambda p=path: QualityClassifierFilter(str(p), threshold=0.5))
    lid = str(bundled_ft176_path())
    assert "positive label" in one_line_error(lambda: QualityClassifierFilter(lid, threshold=0.5))
    model = str(corpus["model"])
    one_line_error(lambda: QualityClassifierFilter(model, threshold=0.5, top_fraction=0.1))
    one_line_error(lambda: QualityClassifierFilter(model, threshold=1.5))
    one_line_error(lambda: QualityClassifierFilter(model, top_fraction=0.0))
    bare = tmp_path / "bare.bin"
    shutil.copy(corpus["model"], bare)  # no metadata beside it: no top-fraction threshold
    assert check_quality_model(str(bare), threshold=0.5) == 0.5
    assert "top_fraction" in one_line_error(lambda: QualityClassifierFilter(str(bare), top_fraction=0.1))
    sidecar_path(bare).write_text("{not json")
    one_line_error(lambda: QualityClassifierFilter(str(bare), threshold=0.5))
    sidecar_path(bare).unlink()
    step = QualityClassifierFilter(str(bare), threshold=0.5)
    bare.unlink()
    one_line_error(step.check)


def test_curate_pipeline_refuses_a_missing_model(tmp_path: Path) -> None:
    with pytest.raises(QualityModelError):
        curate_tail(tmp_path / "missing.bin", tmp_path, threshold=0.5)


def test_wikitext_is_detokenized() -> None:
    raw = 'The 2 @,@ 000 @-@ year @-@ old <unk> stone , " a relic " ( c. 1 @.@ 5 m ) is n\'t lost .'
    assert detokenize(raw) == 'The 2,000-year-old stone, "a relic" (c. 1.5 m) isn\'t lost.'
    data = shared_data.require()
    for line in (data / "wikitext2_articles" / "articles_valid.jsonl").read_text().splitlines():
        for text in sections(json.loads(line)["text"]):
            assert "<unk>" not in text and " @-@ " not in text and " , " not in text
            assert not any(x.startswith("= ") for x in text.split("\n"))


def test_text_inputs(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "one", "group": "g"}) + "\n\n" + json.dumps({"x": 1}) + "\n")
    pq.write_table(pa.table({"text": ["two", None, "three"]}), tmp_path / "b.parquet")
    (tmp_path / "c.txt").write_text("four\n\nfive\n")
    docs = read_documents([tmp_path])
    assert [d.text for d in docs] == ["one", "two", "three", "four", "five"]
    assert docs[0].group == "g" and len({d.group for d in docs}) == 5
    (tmp_path / "d.csv").write_text("text\n")
    with pytest.raises(ValueError):
        read_documents([tmp_path / "d.csv"])
    with pytest.raises(ValueError):
        read_documents([tmp_path / "b.parquet"], field="body")


def test_roc_auc_counts_pairs_with_ties_as_half() -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 300)
    scores = np.round(rng.random(300), 1)  # many ties
    pos, neg = scores[labels == 1], scores[labels == 0]
    pairs = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    assert roc_auc(labels, scores) == pytest.approx(pairs / (len(pos) * len(neg)))
    assert top_fraction_threshold([0.1, 0.9, 0.5, 0.7], 0.5) == 0.7
