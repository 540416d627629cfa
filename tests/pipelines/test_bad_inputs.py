"""Every CLI on bad input (issue 19's table and more): one line on stderr, exit status 2, nothing written.

One row per case: the CLI, its arguments (``{tmp}``, ``{run}``, ``{spec}``... filled in below) and a word
the line must hold. The CLIs run in-process through their ``main`` (as ``python -m`` would, minus the
interpreter start), so the table stays fast; the trainer's rows run through ``python -m trainer.launch``
(torchrun, 2 ranks) where the launcher is what is tested. "Nothing written" is checked on the parent of
every output path: its listing before and after the call must be equal.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.cli import REPO
from tests.support.trainer_inputs import synthetic_run_inputs

SAMPLE = str(REPO / "pipelines" / "sample" / "sample.warc.gz")

# (id, module, argv with placeholders, needle in the error line)
CASES: list[tuple[str, str, list[str], str]] = [
    # pipelines.run: output folder, counts, languages, recipes, sources, chain knobs
    ("run-out-under-a-file", "pipelines.run", [SAMPLE, "--out", "{file}/out"], "a_file"),
    ("run-out-unwritable", "pipelines.run", [SAMPLE, "--out", "{ro}/out"], "ro"),
    ("run-workers-negative", "pipelines.run", [SAMPLE, "--out", "{out}", "--workers", "-3"], "--workers"),
    ("run-workers-zero", "pipelines.run", [SAMPLE, "--out", "{out}", "--workers", "0"], "--workers"),
    ("run-tasks-zero", "pipelines.run", [SAMPLE, "--out", "{out}", "--tasks", "0"], "--tasks"),
    ("run-limit-warcs-zero", "pipelines.run", [SAMPLE, "--out", "{out}", "--limit-warcs", "0"], "--limit-warcs"),
    ("run-languages-nonsense", "pipelines.run", [SAMPLE, "--out", "{out}", "--languages", "xx_nonsense"],
     "xx_nonsense"),
    ("run-languages-eng", "pipelines.run", [SAMPLE, "--out", "{out}", "--languages", "eng"], "en"),
    ("run-recipe-missing", "pipelines.run", [SAMPLE, "--out", "{out}", "--recipe", "{tmp}/none.yaml"], "none.yaml"),
    ("run-recipe-not-yaml", "pipelines.run", [SAMPLE, "--out", "{out}", "--recipe", "{recipe:broken}"], "YAML"),
    ("run-recipe-unknown-key", "pipelines.run", [SAMPLE, "--out", "{out}", "--recipe", "{recipe:unknown}"],
     "unknown"),
    ("run-recipe-text-number", "pipelines.run", [SAMPLE, "--out", "{out}", "--recipe", "{recipe:text_number}"],
     "min_word_count"),
    ("run-min-doc-words-negative", "pipelines.run", [SAMPLE, "--out", "{out}", "--recipe", "{recipe:min_words}"],
     "min_word_count"),
    ("run-line-punct-negative", "pipelines.run", [SAMPLE, "--out", "{out}", "--recipe", "{recipe:line_punct}"],
     "min_line_punct_ratio"),
    ("run-dup-line-frac-7", "pipelines.run", [SAMPLE, "--out", "{out}", "--recipe", "{recipe:dup_line}"],
     "max_dup_line_frac"),
    ("run-top-gram-nan", "pipelines.run", [SAMPLE, "--out", "{out}", "--recipe", "{recipe:nan}"], "max_top_2_gram"),
    ("run-mean-word-length-negative", "pipelines.run",
     [SAMPLE, "--out", "{out}", "--recipe", "{recipe:word_length}"], "min_mean_word_length"),
    ("run-min-sentences-below-off", "pipelines.run", [SAMPLE, "--out", "{out}", "--recipe", "{recipe:sentences}"],
     "min_sentences"),
    ("run-max-html-bytes-negative", "pipelines.run", [SAMPLE, "--out", "{out}", "--recipe", "{recipe:html_bytes}"],
     "max_html_bytes"),
    ("run-timeout-zero", "pipelines.run", [SAMPLE, "--out", "{out}", "--recipe", "{recipe:timeout}"], "timeout"),
    ("run-precheck-threshold", "pipelines.run", [SAMPLE, "--out", "{out}", "--recipe", "{recipe:precheck}"],
     "precheck.threshold"),
    ("run-language-threshold", "pipelines.run", [SAMPLE, "--out", "{out}", "--recipe", "{recipe:lid}"],
     "language.threshold"),
    ("run-short-line-length", "pipelines.run", [SAMPLE, "--out", "{out}", "--recipe", "{recipe:short_line}"],
     "short_line_length"),
    ("run-decontamination-ngrams", "pipelines.run", [SAMPLE, "--out", "{out}", "--recipe", "{recipe:ngrams}"],
     "n_grams"),
    ("run-source-missing", "pipelines.run", ["{tmp}/nothing.warc.gz", "--out", "{out}"], "nothing.warc.gz"),
    ("run-ray-cpus-zero", "pipelines.run", [SAMPLE, "--out", "{out}", "--ray-cpus-per-task", "0"],
     "--ray-cpus-per-task"),
    ("run-cluster-cap-impossible", "pipelines.run", [SAMPLE, "--out", "{out}", "--cluster-memory-mb", "10"],
     "below the"),
    ("run-dedup-against-missing", "pipelines.run", [SAMPLE, "--out", "{out}", "--dedup-against", "{tmp}/old"],
     "--dedup-against"),
    ("run-dedup-against-with-bff", "pipelines.run",
     [SAMPLE, "--out", "{out}", "--recipe", str(REPO / "pipelines/recipes/dclm.yaml"), "--dedup-against", "{tmp}/old"],
     "BFF"),
    ("run-train-vocab-zero", "pipelines.run", [SAMPLE, "--out", "{out}", "--train", "--vocab-size", "0"],
     "--vocab-size"),
    ("run-train-nproc-zero", "pipelines.run", [SAMPLE, "--out", "{out}", "--train", "--nproc", "0"], "nproc"),
    ("run-train-model-unknown", "pipelines.run", [SAMPLE, "--out", "{out}", "--train", "--model", "huge"], "huge"),
    ("run-eval-blimp-without-train", "pipelines.run", [SAMPLE, "--out", "{out}", "--eval-blimp", "{recipe:ok}"],
     "--train"),
    ("run-eval-blimp-missing", "pipelines.run", [SAMPLE, "--out", "{out}", "--train", "--eval-blimp", "{tmp}/b.jsonl"],
     "b.jsonl"),
    ("run-eval-blimp-not-blimp", "pipelines.run", [SAMPLE, "--out", "{out}", "--train", "--eval-blimp", "{recipe:ok}"],
     "--eval-blimp"),
    # pipelines.refilter: the same range checks, its run and its output folder
    ("refilter-not-a-run", "pipelines.refilter", ["{tmp}", "--recipe", "{recipe:ok}"], "run.json"),
    ("refilter-recipe-missing", "pipelines.refilter", ["{rrun}", "--recipe", "{tmp}/none.yaml"], "none.yaml"),
    ("refilter-min-doc-words-negative", "pipelines.refilter", ["{rrun}", "--recipe", "{recipe:min_words}"],
     "min_word_count"),
    ("refilter-line-punct-negative", "pipelines.refilter", ["{rrun}", "--recipe", "{recipe:line_punct}"],
     "min_line_punct_ratio"),
    ("refilter-dup-line-frac-7", "pipelines.refilter", ["{rrun}", "--recipe", "{recipe:dup_line}"],
     "max_dup_line_frac"),
    ("refilter-out-under-a-file", "pipelines.refilter", ["{rrun}", "--recipe", "{recipe:ok}", "--out", "{file}/x"],
     "a_file"),
    # dedup.run
    ("dedup-out-unwritable", "dedup.run", ["--input", "{curated}", "--out", "{ro}/out"], "ro"),
    ("dedup-out-under-a-file", "dedup.run", ["--input", "{curated}", "--out", "{file}/out"], "a_file"),
    ("dedup-input-missing", "dedup.run", ["--input", "{tmp}/none", "--out", "{out}"], "none"),
    ("dedup-workers-negative", "dedup.run", ["--input", "{curated}", "--out", "{out}", "--workers", "-3"],
     "--workers"),
    ("dedup-tasks-zero", "dedup.run", ["--input", "{curated}", "--out", "{out}", "--tasks", "0"], "--tasks"),
    ("dedup-ray-memory-zero", "dedup.run",
     ["--input", "{curated}", "--out", "{out}", "--executor", "ray", "--ray-memory-per-task", "0"],
     "--ray-memory-per-task"),
    ("dedup-ngrams-zero", "dedup.run", ["--input", "{curated}", "--out", "{out}", "--n-grams", "0"], "--n-grams"),
    ("dedup-bands-zero", "dedup.run", ["--input", "{curated}", "--out", "{out}", "--bands", "0"], "--bands"),
    ("dedup-bff-fp-rate", "dedup.run",
     ["--input", "{curated}", "--out", "{out}", "--method", "bff", "--bff-fp-rate", "1.5"], "--bff-fp-rate"),
    ("dedup-against-missing", "dedup.run", ["--input", "{curated}", "--out", "{out}", "--dedup-against", "{tmp}/old"],
     "--dedup-against"),
    # tokenizer.train
    ("tokenizer-input-missing", "tokenizer.train", ["--input", "/nonexistent", "--out", "{out}"], "/nonexistent"),
    ("tokenizer-vocab-zero", "tokenizer.train", ["--input", "{run}", "--out", "{out}", "--vocab-size", "0"],
     "--vocab-size"),
    ("tokenizer-out-under-a-file", "tokenizer.train", ["--input", "{run}", "--out", "{file}/tok"], "a_file"),
    ("tokenizer-out-unwritable", "tokenizer.train", ["--input", "{run}", "--out", "{ro}/tok"], "ro"),
    ("tokenizer-char-budget-zero", "tokenizer.train", ["--input", "{run}", "--out", "{out}", "--char-budget", "0"],
     "--char-budget"),
    # mixtures.build
    ("mixture-spec-missing", "mixtures.build", ["{tmp}/none.yaml", "--out", "{out}"], "none.yaml"),
    ("mixture-spec-not-yaml", "mixtures.build", ["{spec:broken}", "--out", "{out}"], "expected"),
    ("mixture-unknown-key", "mixtures.build", ["{spec:unknown}", "--out", "{out}"], "unknown"),
    ("mixture-tokenizer-missing", "mixtures.build", ["{spec:no_tokenizer}", "--out", "{out}"], "tokenizer"),
    ("mixture-weight-negative", "mixtures.build", ["{spec:negative_weight}", "--out", "{out}"], "weight"),
    ("mixture-weight-text", "mixtures.build", ["{spec:text_weight}", "--out", "{out}"], "weight"),
    ("mixture-source-missing", "mixtures.build", ["{spec:no_source}", "--out", "{out}"], "web"),
    ("mixture-seq-len-zero", "mixtures.build", ["{spec:seq_len}", "--out", "{out}"], "seq_len"),
    ("mixture-doc-token-cap-zero", "mixtures.build", ["{spec:doc_cap}", "--out", "{out}"], "max_doc_chars"),
    ("mixture-target-impossible", "mixtures.build", ["{spec:impossible}", "--out", "{out}"], "cannot be met"),
    ("mixture-out-under-a-file", "mixtures.build", ["{spec:ok}", "--out", "{file}/mix"], "a_file"),
    ("mixture-out-holds-shards", "mixtures.build", ["{spec:ok}", "--out", "{foreign}"], "another build"),
    # the trainer, in-process (one rank) and under trainer.launch (torchrun, two ranks)
    ("train-shards-missing", "trainer.fsdp_train", ["--shards", "{tmp}/none", "--tokenizer", "{tok}", "--out", "{out}"],
     "none"),
    ("train-tokenizer-missing", "trainer.fsdp_train",
     ["--shards", "{shards}", "--tokenizer", "{tmp}/none.json", "--out", "{out}"], "none.json"),
    ("train-out-under-a-file", "trainer.fsdp_train",
     ["--shards", "{shards}", "--tokenizer", "{tok}", "--out", "{file}/train"], "a_file"),
    ("train-micro-batch-zero", "trainer.fsdp_train",
     ["--shards", "{shards}", "--tokenizer", "{tok}", "--out", "{out}", "--micro-batch", "0"], "--micro-batch"),
    ("train-lr-negative", "trainer.fsdp_train",
     ["--shards", "{shards}", "--tokenizer", "{tok}", "--out", "{out}", "--lr", "-1"], "--lr"),
    ("train-model-unknown", "trainer.fsdp_train",
     ["--shards", "{shards}", "--tokenizer", "{tok}", "--out", "{out}", "--model", "huge"], "huge"),
    ("train-eval-task-malformed", "trainer.fsdp_train",
     ["--shards", "{shards}", "--tokenizer", "{tok}", "--out", "{out}", "--eval-task", "bpb"], "NAME=PATH"),
    ("train-eval-task-file-missing", "trainer.fsdp_train",
     ["--shards", "{shards}", "--tokenizer", "{tok}", "--out", "{out}", "--eval-task", "blimp={tmp}/none.jsonl"],
     "none.jsonl"),
    ("train-eval-batch-size-zero", "trainer.fsdp_train",
     ["--shards", "{shards}", "--tokenizer", "{tok}", "--out", "{out}", "--eval-batch-size", "0"], "--eval-batch-size"),
    ("train-holdout-too-many", "trainer.launch",
     ["--shards", "{shards}", "--tokenizer", "{tok}", "--out", "{out}", "--val-holdout-files", "999"],
     "cannot hold out 999"),
    ("train-out-unwritable", "trainer.launch", ["--shards", "{shards}", "--tokenizer", "{tok}", "--out", "{ro}/train"],
     "ro"),
]

RECIPES = {  # name -> recipe YAML text (a recipe names only what it changes)
    "ok": "name: ok\n",
    "broken": "rules: [unclosed\n",
    "unknown": "name: x\nrulez: {}\n",
    "text_number": "name: x\nrules: {gopher_quality: {min_word_count: many}}\n",
    "min_words": "name: x\nrules: {gopher_quality: {min_word_count: -5}}\n",
    "line_punct": "name: x\nrules: {fineweb: {min_line_punct_ratio: -0.5}}\n",
    "dup_line": "name: x\nrules: {gopher_repetition: {max_dup_line_frac: 7}}\n",
    "nan": "name: x\nrules: {gopher_repetition: {max_top_2_gram: .nan}}\n",
    "word_length": "name: x\nrules: {gopher_quality: {min_mean_word_length: -1}}\n",
    "sentences": "name: x\nrules: {c4: {min_sentences: -2}}\n",
    "html_bytes": "name: x\nextraction: {max_html_bytes: -1}\n",
    "timeout": "name: x\nextraction: {timeout: 0}\n",
    "precheck": "name: x\nextraction: {precheck: {threshold: 2}}\n",
    "lid": "name: x\nlanguage: {threshold: 1.5}\n",
    "short_line": "name: x\nsignals: {fineweb: {short_line_length: -1}}\n",
    "ngrams": "name: x\ndecontamination: {n_grams: 0}\n",
}


def _spec(tok: Path, docs: Path, tmp: Path, kind: str) -> str | dict:
    good = {
        "tokenizer": str(tok), "target_tokens": "epoch", "seq_len": 64, "seed": 3, "workers": 1,
        "tokens_per_file": 4000, "sources": [{"name": "web", "path": str(docs), "weight": 1}],
    }  # fmt: skip
    src = good["sources"][0]
    return {
        "ok": good,
        "broken": "sources: [ {name: web",
        "unknown": {**good, "tokenz": 1},
        "no_tokenizer": {**good, "tokenizer": str(tmp / "none")},
        "negative_weight": {**good, "sources": [{**src, "weight": -1}]},
        "text_weight": {**good, "sources": [{**src, "weight": "heavy"}]},
        "no_source": {**good, "sources": [{**src, "path": str(tmp / "nothing")}]},
        "seq_len": {**good, "seq_len": 0},
        "doc_cap": {**good, "max_doc_chars": 0},
        "impossible": {**good, "target_tokens": 10**9},
    }[kind]


@pytest.fixture(scope="module")
def inputs(run_dir: Path, tok4k: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad-inputs")
    shards, tok = synthetic_run_inputs(root / "train-inputs", vocab=96, n_docs=40, seq_len=32)
    refilter_run = root / "refilter-run"
    refilter_run.mkdir()
    (refilter_run / "run.json").write_text('{"config": {"recipe": {}}}')
    os.symlink(run_dir / "curated", refilter_run / "curated")
    return {"run": run_dir, "tok4k": tok4k, "shards": shards, "tok": tok, "refilter_run": refilter_run}


def _fill(arg: str, case_tmp: Path, inputs: dict[str, Path]) -> str:
    if arg.startswith("{recipe:"):
        path = case_tmp / "recipe.yaml"
        path.write_text(RECIPES[arg[8:-1]])
        return str(path)
    if arg.startswith("{spec:"):
        spec = _spec(inputs["tok4k"], inputs["run"] / "curated", case_tmp, arg[6:-1])
        path = case_tmp / "mix.yaml"
        path.write_text(spec if isinstance(spec, str) else yaml.safe_dump(spec))
        return str(path)
    return arg.format(
        tmp=case_tmp, out=case_tmp / "out", file=case_tmp / "a_file", ro=case_tmp / "ro", foreign=case_tmp / "foreign",
        run=inputs["run"], rrun=inputs["refilter_run"], curated=inputs["run"] / "curated",
        shards=inputs["shards"], tok=inputs["tok"],
    )  # fmt: skip


def _listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _in_process(module: str, argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    code: object = 0
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = importlib.import_module(module).main(argv)
        except SystemExit as exit_:
            code = exit_.code
    if isinstance(code, str):  # SystemExit("message") prints the message and exits 1
        return 1, err.getvalue() + code + "\n"
    return int(code or 0), err.getvalue()


def _launched(argv: list[str]) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "trainer.launch", "--standalone", "--nproc_per_node=2", "trainer/fsdp_train.py"]
    proc = subprocess.run([*cmd, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stderr


def _unwritable(folder: Path) -> None:
    """A folder no one may write to, even root: a read-only bind mount is not available in a test, so
    the folder is made immutable when chattr works, else only its mode is taken away (non-root)."""
    folder.mkdir()
    folder.chmod(0o555)
    if os.geteuid() == 0 and subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("root without chattr: no way to make a folder unwritable")


@pytest.mark.e2e
@pytest.mark.parametrize(("module", "argv", "needle"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    inputs: dict[str, Path], tmp_path: Path, module: str, argv: list[str], needle: str
) -> None:
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "old_00000.ds").write_bytes(b"\0" * 8)
    filled = [_fill(arg, tmp_path, inputs) for arg in argv]
    if module in ("mixtures.build", "tokenizer.train"):
        filled.append("--quiet")  # no progress bars on stderr
    if any("/ro/" in a or a.endswith("/ro") for a in filled):
        _unwritable(tmp_path / "ro")
    watched = [tmp_path, inputs["refilter_run"]]
    before = [_listing(p) for p in watched]
    try:
        code, stderr = _launched(filled) if module == "trainer.launch" else _in_process(module, filled)
    finally:
        subprocess.run(["chattr", "-i", str(tmp_path / "ro")], capture_output=True)
    lines = stderr.strip().splitlines()
    assert code == 2, stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
    assert needle in lines[0], lines[0]
    assert [_listing(p) for p in watched] == before
