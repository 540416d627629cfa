"""Bounded parsing (issue 30): configs without alias blow-ups or duplicate keys, size caps on config and
task files, decompressed-size caps against gzip and parquet bombs, only regular files as sources (a FIFO is refused
at once), a real file named like a glob accepted, and listing cycles or link loops as one line."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import yaml

from common import bounded_input, strict_yaml
from common.jsonl import JsonlError, iter_jsonl
from filters.eval_sets import EvalSetError, load_eval_set
from pipelines.sources import SourceError, resolve_paths
from tests.pipelines.test_containment import _refused
from tests.support.cli import REPO
from tests.support.counting_file import CountingFile

SAMPLE = REPO / "pipelines" / "sample" / "sample.warc.gz"
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8)
)  # nine levels of ten: a billion x once expanded


@pytest.mark.parametrize(
    "text, problem",
    [(ALIAS_BOMB, "aliases"), ("a: 1\nb: 2\na: 3\n", "duplicate key 'a'"), ("r: {x: 1, x: 2}\n", "duplicate key 'x'")],
)
def test_strict_yaml_refuses_aliases_and_duplicate_keys(text: str, problem: str) -> None:
    assert isinstance(yaml.safe_load(text), dict)  # what PyYAML alone accepts
    with pytest.raises(yaml.YAMLError) as err:
        strict_yaml.load_text(text)
    assert problem in strict_yaml.first_line(err.value)


def test_strict_yaml_reads_the_bundled_configs_as_pyyaml_does() -> None:
    files = [*REPO.glob("pipelines/recipes/*.yaml"), *REPO.glob("mixtures/*.yaml"), *REPO.glob("examples/**/*.yaml")]
    assert files
    for path in files:
        assert strict_yaml.load_file(path) == yaml.safe_load(path.read_text()), path


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "recipe.yaml"
    os.mkfifo(fifo)
    with pytest.raises(bounded_input.InputRefused, match="FIFO"):
        bounded_input.read_bounded(fifo)


def test_a_config_over_the_size_cap_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("name: x\n" + "# padding\n" * 200_000)  # 2 MB
    with pytest.raises(bounded_input.InputRefused, match="more than"):
        strict_yaml.load_file(big)


def _gzip_bomb(path: Path, decompressed: int) -> None:
    """Valid JSON lines of 1 MiB each (valid `mc` task rows too), `decompressed` bytes in all, ~1000:1."""
    row = {"context": "a" * ((1 << 20) - 60), "choices": ["yes", "no"], "gold": 0}
    line = (json.dumps(row) + "\n").encode()
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip framing
    with open(path, "wb") as out:
        for _ in range(decompressed // len(line)):
            out.write(packer.compress(line))
        out.write(packer.flush())


def test_a_gzip_bomb_stops_at_the_decompressed_cap(tmp_path: Path) -> None:
    bomb = tmp_path / "task.jsonl.gz"
    _gzip_bomb(bomb, 64 << 20)
    assert bomb.stat().st_size < 200_000
    rows = 0
    with pytest.raises(JsonlError, match="more than"):
        for _ in iter_jsonl(bomb, limit=16 << 20):
            rows += 1
    assert rows <= 16
    assert sum(1 for _ in iter_jsonl(bomb, limit=128 << 20)) == 64  # under the cap, read as before
    with gzip.open(bomb) as handle:  # what is refused is still a valid file
        assert json.loads(handle.readline())["context"].startswith("aaa")


def _refused_as_evals_task(tmp_path: Path, task: str, bomb: Path) -> None:
    """`evals.run --task TASK=BOMB`: one line, exit 2, nothing written, under 1.5 GiB of peak RSS (the process's own,
    ``peak_rss_kib``: ru_maxrss reported the forking pytest process's ~1.5 GB late in a whole CI run against ~0.77
    GB for the evals process alone)."""
    code = (
        "import sys\n"
        "from evals.run import main\n"
        "from tests.support.processes import peak_rss_kib\n"
        "code = main(sys.argv[1:])\n"
        "print(peak_rss_kib(), file=sys.stdout)\n"
        "sys.exit(code)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [str(tmp_path / "no-model"), "--task", f"{task}={bomb}", "--out", str(tmp_path / "e.json")]
    done = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300, env=env, cwd=REPO
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1 and "more than" in lines[0], done.stderr[-2000:]
    peak = int(done.stdout.split()[-1])  # KiB
    print(f"peak RSS {peak / 1024:.0f} MiB: {lines[0]}")
    assert peak < 1_500_000
    assert not (tmp_path / "e.json").exists()


@pytest.mark.e2e
def test_a_gzip_bomb_as_an_evals_task_is_one_line_in_bounded_memory(tmp_path: Path) -> None:
    """600 MiB of JSON lines in a ~0.6 MB gzip, given to `evals.run` (the audit's was OOM-killed): one
    line, exit 2, before the model is read, and the process stays far below the decompressed size."""
    bomb = tmp_path / "mc.jsonl.gz"
    _gzip_bomb(bomb, 600 << 20)
    _refused_as_evals_task(tmp_path, "mc", bomb)


def _parquet_bombs(folder: Path) -> dict[str, Path]:
    """Two ways a small parquet file decodes to far more than its size: pages that compress ~1000:1 (32 rows
    of 1 MiB, zstd), and a dictionary page holding one 64 KiB text that 100,000 rows point to (6.5 GB decoded;
    pyarrow's reader took that file to MemoryError under a 3 GB address-space limit, with or without its schema)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    pages = folder / "pages.parquet"
    pq.write_table(pa.table({"text": ["a" * (1 << 20)] * 32}), pages, compression="zstd")
    words = pa.DictionaryArray.from_arrays(pa.array(np.zeros(100_000, np.int32)), pa.array(["the cat " * 8192]))
    dictionary = folder / "dictionary.parquet"
    pq.write_table(pa.table({"text": words}), dictionary, compression="zstd")
    bare = folder / "bare.parquet"  # without pyarrow's schema, which pq.read_table reads as plain strings
    pq.write_table(pa.table({"text": words}), bare, compression="zstd", store_schema=False)
    return {"pages": pages, "dictionary": dictionary, "bare": bare}


@pytest.mark.parametrize("kind", ["pages", "dictionary", "bare"])
def test_a_parquet_bomb_stops_at_the_decoded_cap(tmp_path: Path, kind: str) -> None:
    import pyarrow.parquet as pq

    bomb = _parquet_bombs(tmp_path)[kind]
    assert bomb.stat().st_size < 200_000
    with pytest.raises(bounded_input.InputRefused, match="more than 16,777,216 bytes"):
        bounded_input.read_parquet_bounded(bomb, ["text"], limit=16 << 20)
    small = tmp_path / "small.parquet"  # under the cap: the same table as pyarrow's own reader
    pq.write_table(pq.read_table(bomb, read_dictionary=["text"]).slice(0, 3), small)
    expected = "a" * (1 << 20) if kind == "pages" else "the cat " * 8192
    assert bounded_input.read_parquet_bounded(small, limit=16 << 20).to_pylist() == [{"text": expected}] * 3
    assert pq.read_table(small).to_pylist() == [{"text": expected}] * 3


@pytest.mark.parametrize("codec", ["none", "snappy", "gzip", "zstd", "brotli", "lz4"])
def test_the_parquet_bomb_check_reads_footers_and_dictionary_pages_only(tmp_path: Path, codec: str) -> None:
    """On an ordinary documents file the check reads its footer and dictionary pages, not its documents (it
    read and hashed the whole column, ~4x a plain read, in tokenizer.train and mixtures.build), and its
    bound is at least what the column decodes to: repeated texts (dictionary pages), unique ones (the writer
    falls back to plain pages), nulls, empty texts, data pages v1 and v2."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    words = np.array(["alpha", "beta", "gamma", "delta", "épsilon", "ζήτα", "long" * 50])
    docs = [" ".join(rng.choice(words, int(rng.integers(1, 60)))) for _ in range(12_000)]
    docs += ["repeat me " * 30] * 3000 + [None] * 10 + [""] * 5
    for version in ("1.0", "2.0"):
        path = tmp_path / f"docs-{version}.parquet"
        pq.write_table(pa.table({"id": range(len(docs)), "text": docs}), path, compression=codec,
                       row_group_size=6000, data_page_version=version, dictionary_pagesize_limit=64 << 10)  # fmt: skip
        size = path.stat().st_size
        counting = CountingFile(path)
        with counting:  # the writer's dictionary pages hold the first 1,024 texts of each row group
            bounded_input.refuse_parquet_bomb(counting, str(path), "text", size, floor=0)
        assert counting.read_bytes < size / 3, (counting.read_bytes, size)
        meta = pq.ParquetFile(path).metadata
        with path.open("rb") as handle:
            bound = sum(
                bounded_input._chunk_bound(handle, meta.row_group(g).column(1), 1 << 40)
                for g in range(meta.num_row_groups)
            )
        batches = pq.ParquetFile(path, read_dictionary=["text"]).iter_batches(columns=["text"])
        assert sum(bounded_input._decoded_bytes(b.column(0)) for b in batches) <= bound < 1 << 40


def test_a_parquet_bomb_as_a_decontamination_eval_set_is_refused(tmp_path: Path) -> None:
    """The audit's gzip bomb eval set reached 7.7 GiB; the dictionary bomb would decode to 6.5 GB."""
    with pytest.raises(EvalSetError, match="more than 536,870,912 bytes"):
        load_eval_set(_parquet_bombs(tmp_path)["dictionary"])


@pytest.mark.e2e
def test_a_parquet_bomb_as_an_evals_task_is_one_line_in_bounded_memory(tmp_path: Path) -> None:
    """The dictionary bomb (6.5 GB decoded from a file of kilobytes) as `evals.run`'s bpb texts: one line,
    exit 2, before the model is read, and the process stays far below the decoded size."""
    bomb = _parquet_bombs(tmp_path / "held_out")["dictionary"]
    _refused_as_evals_task(tmp_path, "bpb", bomb)


def test_sources_only_regular_files_once_each(tmp_path: Path) -> None:
    folder = tmp_path / "d"
    folder.mkdir()
    real = folder / "a[1].warc.gz"  # a real file whose name looks like a glob
    real.write_bytes(SAMPLE.read_bytes())
    (folder / "loop").symlink_to(".", target_is_directory=True)
    assert resolve_paths([str(real)]).paths == ("a[1].warc.gz",)
    assert resolve_paths([str(folder / "**" / "*.warc.gz")]).paths == ("a[1].warc.gz",)  # not 40 times via loop/
    assert resolve_paths([str(real), str(real)]).paths == ("a[1].warc.gz",)
    fifo = tmp_path / "f.warc.gz"
    os.mkfifo(fifo)
    with pytest.raises(SourceError, match="regular file"):
        resolve_paths([str(fifo)])
    (tmp_path / "one.txt").write_text("two.txt\n")
    (tmp_path / "two.txt").write_text("one.txt\n")
    with pytest.raises(SourceError, match="lists itself"):
        resolve_paths([str(tmp_path / "one.txt")])


def test_cli_level_refusals(tmp_path: Path) -> None:
    """The same through the CLIs: one line, exit 2, nothing written."""
    out = tmp_path / "out"
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("name: x\nname: y\n")
    _refused(tmp_path, "pipelines.run", [str(SAMPLE), "--out", str(out), "--recipe", str(recipe)], "duplicate key")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(ALIAS_BOMB.replace("a: &a", "tokenizer: t\nseq_len: &a") + "sources: []\ntarget_tokens: 1\n")
    _refused(tmp_path, "mixtures.build", [str(bomb), "--out", str(out), "--quiet"], "aliases")
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    _refused(tmp_path, "pipelines.run", [str(SAMPLE), "--out", str(out), "--recipe", str(fifo)], "FIFO")
    _refused(tmp_path, "pipelines.run", [str(fifo), "--out", str(out)], "regular file")


def test_an_object_on_a_store_is_read_with_the_same_caps() -> None:
    """A run in a bucket has its stats.json there: the report reads it through the same bounded reader."""
    from upath import UPath

    root = UPath("memory://bounded-store-test")
    (root / "stats.json").write_bytes(b'{"kept": 3}')
    (root / "big.json").write_bytes(b"x" * 2048)
    (root / "bomb.json.gz").write_bytes(gzip.compress(b"y" * 4096))
    try:
        assert bounded_input.read_bounded(root / "stats.json") == b'{"kept": 3}'
        with pytest.raises(bounded_input.InputRefused, match="more than 1,024"):
            bounded_input.read_bounded(root / "big.json", 1024)
        with pytest.raises(bounded_input.InputRefused, match="decompressed"):
            bounded_input.read_bounded(root / "bomb.json.gz", 1024)
    finally:
        root.fs.rm(root.path, recursive=True)


def test_a_planted_page_header_is_refused_or_read_never_looped_on() -> None:
    """The page-header reader on hostile bytes: a list field of 2**60 booleans (each element a byte, so the count
    outruns the header) is refused at once, and so is any garbage; a real header still reads."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    list_of_bools = bytes([0x19, 0xF1]) + (2**60).to_bytes(8, "little").replace(b"\x00", b"\x80") + b"\x01" * 8
    with pytest.raises(ValueError):
        bounded_input._dictionary_page_header(list_of_bools)
    with pytest.raises(ValueError):  # a binary field whose length passes the header's end
        bounded_input._dictionary_page_header(bytes([0x18]) + b"\xff\xff\xff\xff\x0f")

    @settings(max_examples=300, deadline=None)
    @given(st.binary(max_size=256))
    def never_more_than_a_value_error(data: bytes) -> None:
        try:
            bounded_input._dictionary_page_header(data)
        except ValueError:
            pass

    never_more_than_a_value_error()
