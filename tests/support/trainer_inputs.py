"""Fixtures for the trainer tests: tokenizers and token shards in the datatrove layout + manifest.json.

The shards are written here with numpy (the mixtures writer is another room's job);
tests/trainer/test_inputs.py checks that what we write is what `mixtures` verifies and what datatrove reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mixtures.manifest import (
    Manifest,
    ShardFile,
    SourceStats,
    TokenizerInfo,
    sha256_file,
    write_manifest,
)
from tests.support.cli import REPO
from tests.support.shared_data import shared_data_dir

EOT = "<|endoftext|>"


def shared_data() -> Path | None:
    """../shared/data (or $CC2MODEL_SHARED_DATA) if present, else None so tests can skip."""
    path = shared_data_dir()
    return path if path.is_dir() else None


def word_tokenizer(path: Path, vocab_size: int) -> Path:
    """A WordLevel tokenizer with ids 0..vocab_size-1 ('<|endoftext|>' = 0): exact, tiny, no training."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {EOT: 0, **{f"w{i}": i for i in range(1, vocab_size - 1)}, "<unk>": vocab_size - 1}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([EOT])
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path


def bpe_tokenizer(path: Path, text: str, vocab_size: int) -> Path:
    """Byte-level BPE trained on `text` (the DESIGN's tokenizer kind), '<|endoftext|>' first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOT], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([text], trainer=trainer)
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path


def write_shards(
    out: Path,
    docs: list[np.ndarray],
    tokenizer: Path,
    *,
    seq_len: int,
    n_files: int = 2,
    token_dtype: str = "uint16",
    eos_id: int = 0,
    seed: int = 0,
) -> Manifest:
    """Documents (already ending in EOS) round-robin into `n_files` .ds files, plus manifest.json."""
    from tokenizers import Tokenizer

    out.mkdir(parents=True, exist_ok=True)
    size = np.dtype(token_dtype).itemsize
    files = []
    for f in range(n_files):
        mine = docs[f::n_files]
        tokens = np.concatenate(mine).astype(f"<u{size}") if mine else np.zeros(0, f"<u{size}")
        name = f"{f:05d}_shard.ds"
        (out / name).write_bytes(tokens.tobytes())
        ends = np.cumsum([len(d) for d in mine]).astype("<u8")
        (out / f"{name}.index").write_bytes(ends.tobytes())
        (out / f"{name}.metadata").write_text(f"{tokenizer}|{size}\n{len(tokens)}\n{len(tokens)}T")
        files.append(ShardFile(name, int(len(tokens)), len(mine), sha256_file(out / name)))
    total = sum(f.tokens for f in files)
    vocab = Tokenizer.from_file(str(tokenizer)).get_vocab_size(with_added_tokens=True)
    manifest = Manifest(
        tokenizer=TokenizerInfo(sha256_file(tokenizer), vocab, None, eos_id, str(tokenizer)),
        token_dtype=token_dtype,
        token_size=size,
        seq_len=seq_len,
        seed=seed,
        files=files,
        sources={"fixture": SourceStats(1.0, total, len(docs), total, 1.0, 1.0)},
        total_tokens=total,
        target_tokens=total,
        root=out,
    )
    write_manifest(manifest, out)
    return manifest


def random_docs(n_docs: int, vocab_size: int, seed: int, min_len: int = 20, max_len: int = 120) -> list[np.ndarray]:
    """Random documents over ids 1..vocab-2, each ending in EOS (0)."""
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n_docs):
        body = rng.integers(1, vocab_size - 1, size=int(rng.integers(min_len, max_len)))
        docs.append(np.append(body, 0))
    return docs


def synthetic_run_inputs(root: Path, vocab: int = 96, n_docs: int = 200, seq_len: int = 32) -> tuple[Path, Path]:
    """(shard dir, tokenizer.json) over random tokens: for tests about mechanics, not learning."""
    tok = word_tokenizer(root / "tok" / "tokenizer.json", vocab)
    write_shards(root / "shards", random_docs(n_docs, vocab, seed=1), tok, seq_len=seq_len)
    return root / "shards", tok


def torchrun(args: list[str], nproc: int = 2, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """Real `torchrun --nproc_per_node=N` (gloo, 1 thread per rank); fails the test with its output."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",  # c10d rendezvous on a port the OS picks: no races between parallel runs
        f"--nproc_per_node={nproc}",
        *args,
    ]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        pytest.fail(f"torchrun failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
