"""The chain's mixture step into an S3 bucket against onto local disk, and against uploading after the build.

    python -m bench.object_store_mixture [--input sample|pages] [--repeats 7] [--by-key]
                                        [--copies K] [--tokens-per-file N] [--latency-ms N]

``bench.object_store`` times the mixture step a few times after its curation runs, which take minutes each;
this bench times only the mixture step, often enough for its sub-second builds to give stable medians. It
curates the input once, locally (untimed), copies the run's kept documents into a bucket of moto's S3 server
on 127.0.0.1 (a store run's documents equal a local run's: ``tests/pipelines/test_object_store_run.py``) and
trains the tokenizer once. Then ``--repeats`` rounds, the order of the four builds rotating from round to
round, so that a load that rises or falls favours none of them:

- ``local``: built from the local run into a local folder;
- ``s3``: built from the bucket into the bucket as the chain does (``pipelines/chain_store.py``: the
  documents fetched into a scratch folder while the build tokenizes each file as it lands, each shard's files
  uploaded as soon as the shard is written, ``manifest.json`` last);
- ``s3, fetch first``: the same, but the build begun once every document is fetched (the chain's way before);
- ``s3, upload after``: the documents fetched first and the folder uploaded once the build is done
  (``upload_folder``: the chain's way before that), on the same code otherwise.

Prints each one's median wall time, the throughput ratio to local (the ratio of the medians, and the median
of the rounds' ratios), the CPU seconds of this process and of moto's (moto runs on the same cores; a real
store's work is not on the node), and the requests each store build sent, by method and per shard file.

The chain's shards are tiny (20,000 tokens, ~40 KB: the sample must give the trainer several files), so its
builds are mostly per-request costs; ``--tokens-per-file N`` sets the shard size, and ``--copies K`` repeats
the kept documents K times (an input K times as big, documents like any others to the build), to time a
build nearer a real mixture's (10^8-10^9 tokens per file) on this machine. ``--latency-ms N`` sends the store
builds through ``bench/latency_proxy.py`` (in a process of its own), a round trip of N ms a request: what the
documents' fetch and the uploads cost against a store that is not on this machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from statistics import median

from bench.object_store import REPO, load, mixture_once, print_by_key, requests
from common.cli import ArgumentParser, integer, real
from pipelines.sample import SAMPLE_WARC
from tests.support.s3_server import S3Server, clear_clients

BUILDS = ("local", "s3", "s3, fetch first", "s3, upload after")


def curate_locally(warc: Path, out: Path, scratch: Path) -> Path:
    """``pipelines.run`` of `warc` into `out` (local executor); the run directory."""
    cmd = [sys.executable, "-m", "pipelines.run", str(warc), "--dump", "bench", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([*cmd, "--scratch", str(scratch)], cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"pipelines.run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return out / "bench"


def copy_kept_documents(run_dir: Path, url: str) -> str:
    """The run's kept documents folder (``deduped/`` or ``curated/``) uploaded to `url/<name>`; its name."""
    from common.run_dir import kept_documents_dir
    from common.transfer import upload_folder

    kept = kept_documents_dir(run_dir)
    if kept is None:
        raise SystemExit(f"{run_dir} holds no kept documents")
    upload_folder(kept, f"{url}/{kept.name}")
    return kept.name


def copy_documents(run_dir: Path, copies: int) -> None:
    """Each kept parquet file repeated ``copies - 1`` more times beside itself: an input ``copies`` times as big,
    to time the build at shard sizes nearer a real mixture's (the repeats are documents like any others)."""
    from common.run_dir import kept_documents_dir, parquet_under

    kept = kept_documents_dir(run_dir)
    if kept is None:
        raise SystemExit(f"{run_dir} holds no kept documents")
    for path in sorted(parquet_under(kept)):
        for k in range(1, copies):
            shutil.copyfile(path, path.with_name(f"{path.stem}-copy{k}{path.suffix}"))


@contextlib.contextmanager
def remote_store(server: S3Server, latency_ms: float | None) -> Iterator[None]:
    """With `latency_ms`, this process's S3 client sent through ``bench.latency_proxy`` (in a process of its
    own, stopped after: a store `latency_ms` away) for the block; without, left direct to `server`."""
    if latency_ms is None:
        yield
        return
    command = [sys.executable, "-m", "bench.latency_proxy", str(server.port), str(latency_ms)]
    proxy = subprocess.Popen(command, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    saved = os.environ["AWS_ENDPOINT_URL"]
    try:
        os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{int(proxy.stdout.readline())}"
        clear_clients()
        yield
    finally:
        os.environ["AWS_ENDPOINT_URL"] = saved
        clear_clients()
        proxy.stdin.close()
        proxy.wait(10)


def rounds(
    server: S3Server,
    log: Path,
    tmp: Path,
    run_dir: Path,
    tok: Path,
    repeats: int,
    tokens_per_file: int | None,
    latency_ms: float | None = None,
) -> tuple[dict, dict]:
    """Each build's (wall, CPU, server CPU) per round; each store build's requests (by key) in the last round."""
    from common.storage import as_path

    remote = as_path(f"s3://bench/run/{run_dir.name}")
    copy_kept_documents(run_dir, str(remote))
    with remote_store(server, latency_ms):
        return _rounds(server, log, tmp, run_dir, remote, tok, repeats, tokens_per_file)


def _rounds(
    server: S3Server,
    log: Path,
    tmp: Path,
    run_dir: Path,
    remote: Path,
    tok: Path,
    repeats: int,
    tokens_per_file: int | None,
) -> tuple[dict, dict]:
    times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in BUILDS}
    sent: dict[str, Counter] = {}
    for i in range(repeats):
        turn = i % len(BUILDS)
        for name in BUILDS[turn:] + BUILDS[:turn]:
            if name == "local":
                times[name].append(
                    mixture_once(run_dir, tok, tmp / f"mixture-{i}", server, tokens_per_file=tokens_per_file)
                )
                continue
            offset = log.stat().st_size
            out = Path(f"mixture-{i}-{BUILDS.index(name)}")
            upload_after, fetch_first = name == "s3, upload after", name == "s3, fetch first"
            times[name].append(
                mixture_once(remote, tok, out, server, upload_after, tokens_per_file, fetch_first=fetch_first)
            )
            time.sleep(0.3)  # the server's last log lines
            sent[name] = requests(log, offset, by_key=True)
    return times, sent


def report(times: dict, sent: dict, shards: int, by_key: bool) -> None:
    print(f"{'build':18} {'wall s (median)':>16} {'CPU s build':>12} {'CPU s moto':>11}   wall s of each round")
    for name in BUILDS:
        walls, cpus, served = ([r[k] for r in times[name]] for k in range(3))
        each = ", ".join(f"{t:.2f}" for t in walls)
        print(f"{name:18} {median(walls):>16.3f} {median(cpus):>12.3f} {median(served):>11.3f}   {each}")
    local = [r[0] for r in times["local"]]
    for name in BUILDS[1:]:
        walls = [r[0] for r in times[name]]
        pairs = median(a / b for a, b in zip(local, walls, strict=True))
        print(f"ratio {name} / local: {median(local) / median(walls):.2f}x (medians), {pairs:.2f}x (median of rounds)")
    streamed, first = ([r[0] for r in times[name]] for name in ("s3", "s3, fetch first"))
    pairs = median(b / a for a, b in zip(streamed, first, strict=True))
    speedup = median(first) / median(streamed)
    print(f"s3 against s3, fetch first (same rounds): {speedup:.3f}x (medians), {pairs:.3f}x (median of rounds)")
    for name, keys in sent.items():
        methods: Counter = Counter()
        for key, count in keys.items():
            methods[key.split(" ", 1)[0]] += count
        total = sum(methods.values())
        listed = ", ".join(f"{m} {n}" for m, n in methods.most_common())
        print(f"requests, {name}: {total} ({listed}); {total / max(shards, 1):.2f} per shard ({shards} shards)")
    if by_key:
        for name, keys in sent.items():
            print_by_key(f"{name}, the last round", keys)


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(prog="python -m bench.object_store_mixture", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=integer(1, 1000), default=7, help="rounds (default: 7)")
    parser.add_argument("--input", choices=("sample", "pages"), default="pages", help="(bench.object_store's)")
    parser.add_argument("--by-key", action="store_true", help="the requests by method and key, too")
    parser.add_argument(
        "--copies",
        type=integer(1, 1000),
        default=1,
        help="the kept documents this many times over (default: 1), for shards nearer a real mixture's size",
    )
    parser.add_argument(
        "--tokens-per-file",
        type=integer(1, 2**40),
        default=None,
        help="tokens per shard file (default: the chain's, 20,000; a real mixture's are 10^8-10^9)",
    )
    parser.add_argument(
        "--latency-ms",
        type=real(0, 10_000),
        help="the store builds reach the server through bench/latency_proxy.py, a round trip of this many ms a "
        "request (a remote store; the documents' copy into the bucket stays direct)",
    )
    args = parser.parse_args(argv)
    load_before = load()
    with tempfile.TemporaryDirectory(prefix="bench-s3mix-") as name:
        tmp = Path(name)
        warc = SAMPLE_WARC
        if args.input == "pages":
            from tests.support.shared_data import write_extraction_warc

            warc = tmp / "pages.warc.gz"
            write_extraction_warc(warc)
        run_dir = curate_locally(warc, tmp / "local", tmp)
        from mixtures.manifest import read_manifest
        from tokenizer.train import train_tokenizer

        tok = tmp / "tokenizer"
        train_tokenizer([str(run_dir)], tok, vocab_size=4096, progress=False)
        copy_documents(run_dir, args.copies)
        log = tmp / "moto.log"
        server = S3Server(log=log).start()
        try:
            with server.use():
                server.make_bucket("bench")
                times, sent = rounds(
                    server, log, tmp, run_dir, tok, args.repeats, args.tokens_per_file, args.latency_ms
                )
        finally:
            server.stop()
        built = read_manifest(tmp / "mixture-0", verify=False)
        shards, tokens = len(built.files), built.total_tokens
    print(
        f"input: {args.input}; mixture: one epoch of the kept documents ({args.copies}x), {tokens:,} tokens in "
        f"{shards} shards (tokens per file: {args.tokens_per_file or 'the chain default'}); {args.repeats} rounds"
    )
    if args.latency_ms is not None:
        print(f"store builds through a proxy adding {args.latency_ms:g} ms a request (a remote store)")
    print(f"load average (1/5/15 min): {load_before} before, {load()} after; {os.cpu_count()} CPUs")
    report(times, sent, shards, args.by_key)


if __name__ == "__main__":
    main()
