"""Curation and mixture build into an S3 bucket against the same onto local disk, same input, side by side.

    python -m bench.object_store [--repeats 3] [--input sample|pages | --warcs WARC ...] [--by-key]
                                 [--latency-ms N [--timeline FILE]]

Starts moto's S3 server on 127.0.0.1 (``tests.support.s3_server``: moto's S3 app on a server that keeps
connections open, as a real store does; the real s3fs / botocore client over HTTP), then runs ``python -m
pipelines.run`` (curate + dedup + report, local executor) alternately with ``--out`` a local temp folder and
``--out s3://bench/run-N``, back to back, ``--repeats`` pairs (the order within a pair alternating, so that a
load that rises or falls during the bench favours neither). Prints the
median wall time of each, the throughput ratio (S3 / local documents per second; goal >= 0.9) both as the
ratio of the medians and as the median of the pairs' ratios (on a shared machine a pair sees one load), the
CPU seconds of the run's processes and of the server's, the load average before and after, and the requests
the run sent to the store, by HTTP method, per document read (the server's request log). moto keeps objects in
memory on this machine, so the ratio measures the client side (staging, uploads, listings, the per-request
round trips) and moto's own CPU on the same cores, not a real store's latency or bandwidth.

Inputs: ``sample`` (default; the bundled WARC, 270 HTML documents: a run's fixed costs, per process, task and
file, dominate) or ``pages`` (the WARC ``bench.curate`` builds from the extraction benchmark's pages, 1,061 HTML
documents and 36 MB, a size where one task's work starts to amortise them; a Common Crawl WARC holds ~30k).
``--by-key`` also prints the last ``s3://`` run's and mixture build's requests by method and key (digits folded),
to see which look-ups a run still sends.

``--latency-ms N``: a remote store instead of one on this machine. The ``s3://`` curation runs reach moto through
``bench/latency_proxy.py``, which holds each request back N ms (a real bucket is 10-30 ms away; moto answers in
1-2 ms), so the requests a run sends one after another add up as they would against a far store, and those sent
together overlap. ``--timeline FILE`` writes the last ``s3://`` run's requests with the time each left, to see
which ones wait on each other. The mixture build stays direct to moto.

Then the chain's mixture step (``pipelines.chain``: one epoch of the run's kept documents, with a tokenizer
trained once beforehand, untimed): built from the local run into a local folder, against built from the
bucket's run into the bucket (``pipelines/chain_store.py``: the documents fetched into a scratch folder while
the build tokenizes them, each shard uploaded as soon as it is written, the manifest last), ``--repeats`` times
each, with its requests per document. At the sample's size that build is a fraction of a second in shards of
20,000 tokens, mostly fixed costs, and the bench says so under its row: ``bench.object_store_mixture`` times
the step alone, more often, at a shard size nearer a real mixture's (``--copies``, ``--tokens-per-file``).
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from statistics import median

from bench.latency_proxy import LatencyProxy
from common.cli import ArgumentParser, real
from pipelines.sample import SAMPLE_WARC
from tests.support.s3_server import S3Server, subprocess_env

REPO = Path(__file__).resolve().parents[1]
REQUEST = re.compile(r'"(GET|PUT|POST|HEAD|DELETE) ')
REQUEST_KEY = re.compile(r'"(GET|PUT|POST|HEAD|DELETE) /([^ ?]*)(\?[^ ]*)? ')
LISTING_PREFIX = re.compile(r"[?&]prefix=([^&]*)")
DOCUMENTS = re.compile(r"^url\s+(\d[\d,]*)\s", re.MULTILINE)  # the first step's "in": HTML documents read


def children_cpu() -> float:
    """User + system CPU seconds of this process's waited-for children (the runs and their task processes)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def server_cpu(server: S3Server) -> float:
    """CPU seconds the S3 server's process used so far (Linux's /proc; 0 elsewhere): work a real store does off
    the node, which moto does on this machine's cores, beside the run."""
    try:
        fields = Path(f"/proc/{server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, AttributeError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def run_once(
    server: S3Server, out: str, warcs: list[str], scratch: str, endpoint: str | None = None
) -> tuple[float, float, float, int]:
    """Wall seconds, CPU seconds (the run's processes, the server's) and documents read of one ``pipelines.run``
    (its store requests sent to ``endpoint``: the latency proxy; default: the server)."""
    env = subprocess_env(server, PYTHONPATH=str(REPO), **({"AWS_ENDPOINT_URL": endpoint} if endpoint else {}))
    cmd = [sys.executable, "-m", "pipelines.run", *warcs, "--dump", "bench", "--out", out, "--scratch", scratch]
    cpu, served, start = children_cpu(), server_cpu(server), time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    seconds, cpu, served = time.perf_counter() - start, children_cpu() - cpu, server_cpu(server) - served
    if proc.returncode != 0:
        raise SystemExit(f"{out}: pipelines.run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    found = DOCUMENTS.search(proc.stdout)
    return seconds, cpu, served, int(found.group(1).replace(",", "")) if found else 0


def ratios(local: list[float], remote: list[float]) -> str:
    """Throughput s3 / local: the ratio of the medians, and the median of the pairs' ratios."""
    pairs = median(a / b for a, b in zip(local, remote, strict=True))
    return f"{median(local) / median(remote):.2f}x (medians), {pairs:.2f}x (median of pairs)"


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def own_cpu() -> float:
    """CPU seconds of this process (all its threads: s3fs's event loop too) and its waited-for children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime + children_cpu()


def mixture_once(
    run_dir: Path,
    tok: Path,
    out: Path,
    server: S3Server,
    upload_after: bool = False,
    tokens_per_file: int | None = None,
    fetch_first: bool = False,
) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (this process's, the server's) of the chain's mixture step from ``run_dir``
    (local, or a store URL) into ``out`` (its twin on the store when ``run_dir`` is one: the chain's staging,
    each shard uploaded as soon as it is written; with ``upload_after``, the previous way: the whole folder
    uploaded once the build is done, ``upload_folder``; with ``fetch_first`` (implied by ``upload_after``), the
    documents fetched whole before the build begins, not tokenized as they land); ``tokens_per_file`` replaces the
    chain's shard size."""
    from common.storage import is_remote
    from mixtures.build import build_mixture
    from mixtures.manifest import MANIFEST_NAME
    from pipelines.chain import ChainConfig, mixture_spec
    from pipelines.chain_store import staging

    config = ChainConfig() if tokens_per_file is None else ChainConfig(tokens_per_file=tokens_per_file)
    cpu, served, start = own_cpu(), server_cpu(server), time.perf_counter()
    if not is_remote(run_dir):
        build_mixture(mixture_spec(run_dir, tok, config), out, overwrite=True, progress=False)
    else:
        with staging(run_dir) as staged:
            spec = mixture_spec(staged.documents(wait=upload_after or fetch_first), tok, config)
            if upload_after:
                build_mixture(spec, staged.folder(out.name), overwrite=True, progress=False)
                staged.publish(out.name, MANIFEST_NAME)
            else:
                staged.build_mixture(spec, out.name, progress=False)
    return time.perf_counter() - start, own_cpu() - cpu, server_cpu(server) - served


def requests(log: Path, start: int, by_key: bool = False) -> Counter:
    """Requests by method in the server's log after byte offset ``start``; with ``by_key``, by method and key
    (a listing by its prefix; runs of digits and the run's folder folded, so that tasks and bands add up)."""
    with log.open("rb") as f:
        f.seek(start)
        text = f.read().decode("utf-8", "replace")
    if not by_key:
        return Counter(REQUEST.findall(text))
    found: Counter = Counter()
    for method, key, query in REQUEST_KEY.findall(text):
        prefix = LISTING_PREFIX.search(query or "")
        if prefix:
            key = f"{key}?list {prefix.group(1)}"
        key = re.sub(r"\d+", "N", re.sub(r"(run|mixture)-\d+/", "", key))
        found[f"{method} {key}"] += 1
    return found


def print_by_key(title: str, sent: Counter) -> None:
    print(f"\n{title}: requests by method and key")
    for key, count in sorted(sent.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{count:>6}  {key}")


MIXTURE_NOTE = (
    "note: this mixture is a fraction of a second of tokenizing in shards of 20,000 tokens (the chain's, sized for\n"
    "the sample's trainer): its store build is mostly fixed costs (a listing, a GET per document file, 3 PUTs per\n"
    "shard, the manifest), so its ratio says little about a real mixture's. Timed at a shard size nearer one:\n"
    "  python -m bench.object_store_mixture --input pages --repeats 9 --copies 10 --tokens-per-file 1000000"
)


def mixture_side_by_side(server: S3Server, log: Path, tmp: Path, repeats: int) -> tuple[list, list, Counter]:
    """The mixture step from the last curation runs (local and bucket), alternately; its requests per run, by
    method and key."""
    from common.storage import as_path
    from tokenizer.train import train_tokenizer

    local_run, remote_run = tmp / f"local-{repeats - 1}" / "bench", as_path(f"s3://bench/run-{repeats - 1}/bench")
    tok = tmp / "tokenizer"
    train_tokenizer([str(local_run)], tok, vocab_size=4096, progress=False)
    local, remote, sent = [], [], Counter()
    for i in range(repeats):
        if i % 2:
            local.append(mixture_once(local_run, tok, tmp / f"mixture-{i}", server))
        offset = log.stat().st_size
        remote.append(mixture_once(remote_run, tok, Path(f"mixture-{i}"), server))
        time.sleep(0.5)
        sent = requests(log, offset, by_key=True)
        if not i % 2:
            local.append(mixture_once(local_run, tok, tmp / f"mixture-{i}", server))
    return local, remote, sent


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(prog="python -m bench.object_store", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    given = parser.add_mutually_exclusive_group()
    given.add_argument("--input", choices=("sample", "pages"), default="sample", help="(see above; default: sample)")
    given.add_argument("--warcs", nargs="+", help="input WARC files instead")
    parser.add_argument("--by-key", action="store_true", help="the requests by method and key, too")
    parser.add_argument(
        "--latency-ms",
        type=real(0, 10_000),
        help="the s3:// curation runs reach the server through a proxy that gives each request a round trip of "
        "this many ms (bench/latency_proxy.py: a remote store; the mixture build stays direct)",
    )
    parser.add_argument(
        "--timeline",
        type=Path,
        help="with --latency-ms: write the last s3:// run's requests to this file, one a line: ms since its first "
        "request, connection, request line (to see which ones go one after another)",
    )
    args = parser.parse_args(argv)
    if args.timeline is not None and args.latency_ms is None:
        parser.error("--timeline needs --latency-ms (the proxy records the requests)")
    if args.timeline is not None and (args.timeline.is_dir() or not args.timeline.parent.is_dir()):
        parser.error(f"--timeline {args.timeline}: not a file in an existing folder (checked before the runs)")
    load_before = load()
    keyed: Counter = Counter()
    timeline: list[tuple[float, int, str]] = []
    with tempfile.TemporaryDirectory(prefix="bench-s3-") as tmp:
        if args.warcs is None:
            args.warcs = [str(SAMPLE_WARC)]
            if args.input == "pages":
                from tests.support.shared_data import write_extraction_warc

                args.warcs = [str(Path(tmp, "pages.warc.gz"))]
                write_extraction_warc(Path(args.warcs[0]))
        log = Path(tmp, "moto.log")
        server = S3Server(log=log).start()
        proxy = LatencyProxy(server.port, args.latency_ms).start() if args.latency_ms is not None else None
        endpoint = proxy.endpoint if proxy is not None else None
        try:
            with server.use():
                server.make_bucket("bench")
                runs: dict[str, list[tuple[float, float, float, int]]] = {"local": [], "s3": []}
                per_run = []
                for i in range(args.repeats):
                    for side in ("local", "s3") if i % 2 == 0 else ("s3", "local"):
                        out = str(Path(tmp, f"local-{i}")) if side == "local" else f"s3://bench/run-{i}"
                        offset, sent_before = log.stat().st_size, len(proxy.sent) if proxy else 0
                        runs[side].append(run_once(server, out, args.warcs, tmp, endpoint if side == "s3" else None))
                        if side == "s3":
                            time.sleep(0.5)  # the server's last log lines
                            per_run.append(requests(log, offset))
                            keyed = requests(log, offset, by_key=True) if args.by_key else Counter()
                            timeline = proxy.sent[sent_before:] if proxy else []
                mix_local, mix_remote, mix_sent = mixture_side_by_side(server, log, Path(tmp), args.repeats)
        finally:
            if proxy is not None:
                proxy.stop()
            server.stop()
    if args.timeline is not None and timeline:
        args.timeline.write_text(
            "".join(f"{(t - timeline[0][0]) * 1000:9.1f} {c:6d} {line}\n" for t, c, line in timeline)
        )
    local, remote = ([r[0] for r in runs[side]] for side in ("local", "s3"))
    docs = runs["s3"][-1][3]
    sent = per_run[-1]
    shape = f"{len(args.warcs)} WARC file(s), {docs} HTML documents"
    print(f"input: {shape}; {args.repeats} pairs, {os.cpu_count()} CPUs")
    if args.latency_ms is not None:
        print(f"s3:// curation runs through a proxy adding {args.latency_ms:g} ms a request (a remote store)")
    print(f"load average (1/5/15 min): {load_before} before, {load()} after")
    print("CPU s: the run's processes, and the S3 server's (moto, on the same cores; a real store's is not)")
    header = f"{'out':10} {'wall s (median)':>16} {'docs/s':>8} {'CPU s run':>10} {'CPU s server':>13}"
    print(f"{header}   wall s of each run")
    remote_name = "s3 (moto)" if args.latency_ms is None else f"s3 +{args.latency_ms:g}ms"
    for name, side in (("local", "local"), (remote_name, "s3")):
        times, cpus, served = ([r[k] for r in runs[side]] for k in range(3))
        each = ", ".join(f"{t:.1f}" for t in times)
        cpu = f"{median(cpus):>10.1f} {median(served):>13.1f}"
        print(f"{name:10} {median(times):>16.1f} {docs / median(times):>8.2f} {cpu}   {each}")
    print(f"throughput ratio s3 / local: {ratios(local, remote)} (goal >= 0.9x)")
    total = sum(sent.values())
    methods = ", ".join(f"{m} {n}" for m, n in sent.most_common())
    print(f"requests to the store per run: {total} ({methods}); {total / max(docs, 1):.2f} per document read")
    print(f"\nmixture build (one epoch of the kept documents): {args.repeats} repeats")
    print(f"{'out':10} {'wall s (median)':>16} {'CPU s build':>12} {'CPU s server':>13}   wall s of each")
    for name, runs_of in (("local", mix_local), ("s3 (moto)", mix_remote)):
        times, cpus, served = ([r[k] for r in runs_of] for k in range(3))
        each = ", ".join(f"{t:.2f}" for t in times)
        print(f"{name:10} {median(times):>16.2f} {median(cpus):>12.2f} {median(served):>13.2f}   {each}")
    walls = [[r[0] for r in runs_of] for runs_of in (mix_local, mix_remote)]
    print(f"mixture ratio s3 / local: {ratios(*walls)} (goal >= 0.9x; not this row's to say, see below)")
    total = sum(mix_sent.values())
    by_method = Counter()
    for key, count in mix_sent.items():
        by_method[key.split(" ", 1)[0]] += count
    methods = ", ".join(f"{m} {n}" for m, n in by_method.most_common())
    print(f"mixture requests to the store per build: {total} ({methods})")
    print(MIXTURE_NOTE)
    if args.by_key:
        print_by_key("the last s3:// run", keyed)
        print_by_key("the last mixture build", mix_sent)


if __name__ == "__main__":
    main()
