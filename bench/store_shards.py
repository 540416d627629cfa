"""The trainer on a mixture in an S3 bucket that it reads only a part of: bytes and requests against the mixture.

    python -m bench.store_shards [--docs 150000] [--max-steps 10]

Starts moto's S3 server on 127.0.0.1 (``tests.support.s3_server``, its request log on), writes a synthetic
mixture (random documents, 8 files) into the bucket, then runs ``trainer/fsdp_train.py`` (one CPU rank, the
tiny model, ``--max-steps`` steps: a small part of the epoch) with ``--shards s3://...`` in a few read modes:
the default range size with a cache smaller than the mixture (one window per read), 1 MiB reads with that
cache, the default with a cache that holds the mixture (1 MiB reads), and the default with ``--verify-shards``.
For each: the bytes the reader fetched (its end-of-run line), the windows the run read, and the requests the
store answered (the server's log, by method: the manifest, the listing, the range reads).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import fsspec

from bench.object_store import REPO, requests
from common.cli import ArgumentParser
from tests.support.s3_server import S3Server, subprocess_env
from tests.support.trainer_inputs import random_docs, word_tokenizer, write_shards

FETCHED = re.compile(r"shards s3://\S+: (\d+) bytes \S+ MiB\) fetched in (\d+) range reads of (\d+) bytes")
VERIFIED = re.compile(r"; ([\d.]+) MiB streamed to verify")
MODES = {  # name -> extra trainer flags
    "auto, cache < mixture": ["--shard-cache-mb", "1", "--no-verify-shards"],
    "1 MiB reads, cache < mixture": ["--shard-cache-mb", "1", "--shard-block-kb", "1024", "--no-verify-shards"],
    "auto, cache > mixture": ["--shard-cache-mb", "256", "--no-verify-shards"],
    "auto, --verify-shards": ["--shard-cache-mb", "1"],
}


def train_once(server: S3Server, tmp: Path, tok: Path, name: str, flags: list[str], steps: int) -> str:
    """One trainer run on the bucket's mixture; its stdout."""
    out = tmp / f"run-{list(MODES).index(name)}"
    cmd = [sys.executable, "trainer/fsdp_train.py", "--shards", "s3://bench/mix", "--tokenizer", str(tok),
           "--out", str(out), "--scratch", str(tmp / "scratch"), "--device", "cpu", "--micro-batch", "8",
           "--max-steps", str(steps), "--checkpoint-every", "0", "--no-export-hf", "--log-every", "5",
           *flags]  # fmt: skip
    env = subprocess_env(server, PYTHONPATH=str(REPO), OMP_NUM_THREADS="2")
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{name}: the trainer failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return proc.stdout + proc.stderr


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(prog="python -m bench.store_shards", description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=150_000, help="documents in the mixture (~70 tokens each)")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--max-steps", type=int, default=10)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-shards-") as name:
        tmp = Path(name)
        log = tmp / "moto.log"
        server = S3Server(log=log).start()
        try:
            with server.use():
                tok = word_tokenizer(tmp / "tok" / "tokenizer.json", 96)
                manifest = write_shards(tmp / "mix", random_docs(args.docs, 96, seed=1), tok, seq_len=args.seq_len,
                                        n_files=8)  # fmt: skip
                server.make_bucket("bench")
                fs = fsspec.filesystem("s3", skip_instance_cache=True)
                fs.put(str(tmp / "mix") + "/", "bench/mix/", recursive=True)
                mixture = manifest.total_tokens * manifest.token_size
                windows = args.max_steps * 8
                print(f"mixture: {manifest.total_tokens} tokens in {len(manifest.files)} files, "
                      f"{mixture / 2**20:.2f} MiB; the run reads {windows} windows of {args.seq_len + 1} tokens "
                      f"({windows * (args.seq_len + 1) * manifest.token_size / 2**20:.3f} MiB)")  # fmt: skip
                print(f"{'mode':30} {'fetched MiB':>12} {'of mixture':>10} {'range reads':>11}   requests to the store")
                for mode, flags in MODES.items():
                    offset = log.stat().st_size
                    text = train_once(server, tmp, tok, mode, flags, args.max_steps)
                    time.sleep(0.5)  # the server's last log lines
                    sent = requests(log, offset)
                    found = FETCHED.search(text)
                    if found is None:
                        raise SystemExit(f"{mode}: no fetch summary in the trainer's output:\n{text[-2000:]}")
                    mib, reads = int(found.group(1)) / 2**20, int(found.group(2))
                    methods = ", ".join(f"{m} {n}" for m, n in sent.most_common())
                    verified = VERIFIED.search(text)
                    streamed = f"; + {verified.group(1)} MiB streamed by the check" if verified else ""
                    print(f"{mode:30} {mib:>12.3f} {mib * 2**20 / mixture:>10.1%} {reads:>11}   "
                          f"{sum(sent.values())} ({methods}){streamed}")  # fmt: skip
        finally:
            server.stop()


if __name__ == "__main__":
    main()
