"""Mixture builds on real text: copies per document, budget, shuffling, datatrove layout, re-hydration."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tokenizers import Tokenizer

from mixtures.build import build_mixture
from mixtures.build import main as build_main
from mixtures.manifest import Manifest, ManifestError, read_manifest
from mixtures.plan import InfeasibleMixture
from mixtures.reader import ShardReader
from tests.support.text_corpora import (
    is_held_out,
    shared_data,
    web_documents,
    wiki_articles,
    write_parquet,
)

EOT_ID = 0


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two curated-style sources: 80 web pages in two files, 20 Wikipedia articles in one."""
    root = tmp_path_factory.mktemp("sources")
    web = [r for r in web_documents() if not is_held_out(r)][:80]
    wiki = wiki_articles()[:20]
    write_parquet(web, root / "web", n_files=2)
    write_parquet(wiki, root / "wiki", n_files=1)
    return {"root": root, "web": web, "wiki": wiki}


def doc_lengths(tok_dir: Path, rows: list[dict[str, Any]]) -> dict[str, int]:
    """Independent count: tokens per text plus its EOS."""
    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    tok.encode_special_tokens = True
    encoded = tok.encode_batch([r["text"] for r in rows], add_special_tokens=False)
    return {r["text"]: len(e.ids) + 1 for r, e in zip(rows, encoded, strict=True)}


def decoded_docs(out: Path, tok_dir: Path, bos: bool = False) -> list[str]:
    """Every document in the shards, in file order, decoded without its separators."""
    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    reader = ShardReader(out)
    texts = []
    for f in range(len(reader)):
        for d in range(len(reader.doc_ends(f))):
            ids = reader.document(f, d).tolist()
            assert ids[-1] == EOT_ID and EOT_ID not in ids[int(bos) : -1]
            if bos:
                assert ids[0] == EOT_ID
            texts.append(tok.decode(ids[int(bos) : -1], skip_special_tokens=False))
    return texts


def spec(tok: Path, root: Path, target: int, **extra: Any) -> dict[str, Any]:
    return {
        "tokenizer": str(tok),
        "target_tokens": target,
        "seq_len": 256,
        "seed": 7,
        "workers": 1,
        "sources": [
            {"name": "web", "path": str(root / "web"), "weight": 0.5, "max_repetition": 1},
            {"name": "wiki", "path": str(root / "wiki" / "*.parquet"), "weight": 0.5, "max_repetition": 4},
        ],
        **extra,
    }


@pytest.fixture(scope="module")
def built(sources: dict[str, Any], tok4k: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    lengths = doc_lengths(tok4k, sources["web"] + sources["wiki"])
    web_tokens = sum(lengths[r["text"]] for r in sources["web"])
    target = int(web_tokens * 1.2)  # web: 0.6 of itself; wiki: several passes
    out = tmp_path_factory.mktemp("mix")
    manifest = build_mixture(
        spec(tok4k, sources["root"], target, tokens_per_file=target // 3), out, progress=False
    )
    return {"out": out, "manifest": manifest, "lengths": lengths, "target": target}


def test_each_document_appears_as_often_as_its_weight_requires(
    built: dict[str, Any],
    sources: dict[str, Any],
    tok4k: Path,
) -> None:
    manifest: Manifest = built["manifest"]
    counts = collections.Counter(decoded_docs(built["out"], tok4k))
    lengths = built["lengths"]
    for name in ("web", "wiki"):
        rows = sources[name]
        available = sum(lengths[r["text"]] for r in rows)
        requested = round(0.5 * built["target"])
        per_doc = [counts[r["text"]] for r in rows]
        base = requested // available
        assert set(per_doc) <= {base, base + 1}, name
        got = sum(counts[r["text"]] * lengths[r["text"]] for r in rows)
        assert abs(got - requested) <= max(lengths[r["text"]] for r in rows), name
        stats = manifest.sources[name]
        assert (stats.tokens, stats.documents, stats.available_tokens) == (got, sum(per_doc), available)
        assert stats.repetitions == pytest.approx(got / available)
        assert stats.realized_ratio == pytest.approx(got / manifest.total_tokens)
    assert sum(counts.values()) == sum(f.documents for f in manifest.files)


def test_documents_are_shuffled_across_sources_and_files(
    built: dict[str, Any],
    sources: dict[str, Any],
    tok4k: Path,
) -> None:
    wiki = {r["text"] for r in sources["wiki"]}
    order = [t in wiki for t in decoded_docs(built["out"], tok4k)]
    runs = 1 + sum(a != b for a, b in zip(order, order[1:], strict=False))
    assert runs > len(order) / 4  # grouped by source would be 2 runs
    reader = ShardReader(built["out"])
    assert len(reader) >= 3
    for f in range(len(reader)):
        tokens = reader.tokens(f)
        assert tokens.dtype == np.dtype("<u2") and int(reader.doc_ends(f)[-1]) == tokens.size


def test_shards_read_back_with_datatrove(built: dict[str, Any]) -> None:
    pytest.importorskip("torch")
    from datatrove.utils.dataset import DatatroveFolderDataset

    manifest = read_manifest(built["out"], verify=True)
    seq = manifest.seq_len
    dataset = DatatroveFolderDataset(str(built["out"]), seq_len=seq, token_size=manifest.token_size)
    reader = ShardReader(built["out"])
    assert len(dataset) == sum(f.tokens // (seq + 1) for f in manifest.files)
    file_idx, item = 0, 0
    for i in range(len(dataset)):
        if item == reader.num_windows(file_idx, seq + 1):
            file_idx, item = file_idx + 1, 0
        expected = reader.window(file_idx, item * (seq + 1), seq + 1).astype(np.int64)
        assert dataset[i]["input_ids"].numpy().tolist() == expected.tolist()
        item += 1


def test_same_seed_same_bytes_other_seed_other_order(
    built: dict[str, Any],
    sources: dict[str, Any],
    tok4k: Path,
    tmp_path: Path,
) -> None:
    base = spec(tok4k, sources["root"], built["target"], tokens_per_file=built["target"] // 3)
    again = build_mixture({**base, "workers": 2}, tmp_path / "again", progress=False)
    assert [f.sha256 for f in again.files] == [f.sha256 for f in built["manifest"].files]
    other = build_mixture({**base, "seed": 8}, tmp_path / "other", progress=False)
    assert [f.sha256 for f in other.files] != [f.sha256 for f in built["manifest"].files]


def test_impossible_spec_is_refused_with_numbers(
    sources: dict[str, Any],
    tok4k: Path,
    tmp_path: Path,
) -> None:
    out = tmp_path / "never"
    with pytest.raises(InfeasibleMixture) as err:
        build_mixture(spec(tok4k, sources["root"], 10**9), out, progress=False)
    message = str(err.value)
    web_available = sum(doc_lengths(tok4k, sources["web"]).values())
    assert "web:" in message and "wiki:" in message
    assert f"available {web_available:,} x max_repetition 1" in message
    assert not out.exists()  # no shards, no manifest, no temp folder, no folder


def test_epoch_takes_every_document_once_as_the_counted_target_does(
    sources: dict[str, Any],
    tok4k: Path,
    tmp_path: Path,
) -> None:
    rows = sources["web"] + sources["wiki"]
    lengths = doc_lengths(tok4k, rows)
    available = {name: sum(lengths[r["text"]] for r in sources[name]) for name in ("web", "wiki")}
    total = sum(available.values())
    base = {"tokenizer": str(tok4k), "seq_len": 256, "seed": 7, "workers": 1, "tokens_per_file": total // 3}
    epoch = {
        **base,
        "target_tokens": "epoch",
        "sources": [
            {"name": "web", "path": str(sources["root"] / "web")},
            {"name": "wiki", "path": str(sources["root"] / "wiki"), "weight": 1},
        ],
    }
    manifest = build_mixture(epoch, tmp_path / "epoch", progress=False)
    assert collections.Counter(decoded_docs(tmp_path / "epoch", tok4k)) == collections.Counter(r["text"] for r in rows)
    assert manifest.target_tokens == manifest.total_tokens == total
    for name, tokens in available.items():
        stats = manifest.sources[name]
        assert (stats.tokens, stats.available_tokens, stats.repetitions) == (tokens, tokens, 1.0)
        assert stats.weight == stats.realized_ratio == tokens / total
    # what the chain asked for before `epoch`, from a count of its own: the same bytes, the same manifest
    counted = {
        **epoch,
        "target_tokens": total,
        "sources": [{**s, "weight": available[s["name"]], "max_repetition": 1} for s in epoch["sources"]],
    }
    again = build_mixture(counted, tmp_path / "counted", progress=False)
    assert again.to_dict() == manifest.to_dict()
    for f in manifest.files:
        assert (tmp_path / "epoch" / f.path).read_bytes() == (tmp_path / "counted" / f.path).read_bytes()


def test_epoch_of_sources_without_tokens_is_refused(sources: dict[str, Any], tok4k: Path, tmp_path: Path) -> None:
    write_parquet([{**r, "text": ""} for r in sources["web"][:3]], tmp_path / "blank")
    mix = {
        "tokenizer": str(tok4k),
        "target_tokens": "epoch",
        "seq_len": 64,
        "sources": [{"name": "blank", "path": str(tmp_path / "blank")}],
    }
    with pytest.raises(InfeasibleMixture, match="epoch, but the sources hold no tokens"):
        build_mixture(mix, tmp_path / "none", progress=False)
    assert not (tmp_path / "none").exists()


def test_rehydration_repeats_documents_by_cluster_size(
    sources: dict[str, Any],
    tok4k: Path,
    tmp_path: Path,
) -> None:
    table = {1: 1, 2: 2, 3: 3, 5: 0}
    weights = {r["text"]: rehydrate_weight(r["minhash_cluster_size"], table) for r in sources["web"]}
    lengths = doc_lengths(tok4k, sources["web"])
    epoch = sum(weights[t] * lengths[t] for t in weights)
    mix = {
        "tokenizer": str(tok4k),
        "target_tokens": epoch,
        "seq_len": 64,
        "workers": 1,
        "sources": [
            {
                "name": "web",
                "path": str(sources["root"] / "web"),
                "weight": 1,
                "max_repetition": 3,
                "rehydrate": table,
            }
        ],
    }
    manifest = build_mixture(mix, tmp_path / "rehydrated", progress=False)
    counts = collections.Counter(decoded_docs(tmp_path / "rehydrated", tok4k))
    assert {t: counts[t] for t in weights} == weights
    assert manifest.sources["web"].tokens == epoch


def rehydrate_weight(size: int, table: dict[int, int]) -> int:
    return table[max(k for k in table if k <= size)]


def test_existing_shards_are_a_source(
    built: dict[str, Any],
    sources: dict[str, Any],
    tok4k: Path,
    tmp_path: Path,
) -> None:
    first = built["manifest"]
    mix = {
        "tokenizer": str(tok4k),
        "target_tokens": first.total_tokens,
        "seq_len": 64,
        "workers": 1,
        "sources": [{"name": "old", "path": str(built["out"]), "weight": 1, "max_repetition": 1}],
    }
    again = build_mixture(mix, tmp_path / "reshard", progress=False)
    assert again.total_tokens == first.total_tokens
    old_docs = collections.Counter(decoded_docs(built["out"], tok4k))
    assert collections.Counter(decoded_docs(tmp_path / "reshard", tok4k)) == old_docs
    other_tok = shared_data() / "reference_tokenizer_gpt_neo"
    with pytest.raises(ManifestError, match="tokenizer"):
        build_mixture({**mix, "tokenizer": str(other_tok)}, tmp_path / "mismatch", progress=False)


def test_separators_and_literal_endoftext(
    sources: dict[str, Any],
    tok4k: Path,
    tmp_path: Path,
) -> None:
    rows = [dict(r) for r in sources["web"][:10]]
    rows[0]["text"] = rows[0]["text"][:200] + " <|endoftext|> " + rows[0]["text"][200:]
    write_parquet(rows, tmp_path / "src", n_files=1)
    lengths = doc_lengths(tok4k, rows)
    mix = {
        "tokenizer": str(tok4k),
        "target_tokens": sum(lengths.values()) + len(rows),  # one BOS more per document
        "seq_len": 64,
        "workers": 1,
        "separator": "both",
        "sources": [{"name": "s", "path": str(tmp_path / "src"), "weight": 1}],
    }
    manifest = build_mixture(mix, tmp_path / "both", progress=False)
    assert manifest.tokenizer.bos_id == manifest.tokenizer.eos_id == EOT_ID
    assert sorted(decoded_docs(tmp_path / "both", tok4k, bos=True)) == sorted(r["text"] for r in rows)


def test_refuses_to_overwrite_and_cli_prints_ratios(
    built: dict[str, Any],
    sources: dict[str, Any],
    tok4k: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(FileExistsError):
        build_mixture(spec(tok4k, sources["root"], 1000), built["out"], progress=False)
    own = {
        **spec(tok4k, sources["root"], 1000),
        "sources": [{"name": "self", "path": str(built["out"]), "weight": 1}],
    }
    with pytest.raises(ValueError, match="output folder"):
        build_mixture(own, built["out"], overwrite=True, progress=False)
    assert read_manifest(built["out"]).files == built["manifest"].files  # nothing was deleted
    yaml_path = tmp_path / "mix.yaml"
    yaml_path.write_text(
        f"tokenizer: {tok4k}\ntarget_tokens: 20000\nseq_len: 128\nworkers: 1\nsources:\n"
        f"  - {{name: web, path: {sources['root'] / 'web'}, weight: 3}}\n"
        f"  - {{name: wiki, path: {sources['root'] / 'wiki'}, weight: 1}}\n"
    )
    build_main([str(yaml_path), "--out", str(tmp_path / "cli"), "--quiet"])
    out = capsys.readouterr().out
    assert "realized" in out and "web" in out and "tokens/s" in out
    manifest = read_manifest(tmp_path / "cli")
    assert manifest.sources["web"].realized_ratio == pytest.approx(0.75, abs=0.1)
