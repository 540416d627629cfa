"""The requests ``s3://`` sends for a run's questions (moto on 127.0.0.1, real s3fs): each answered by the
fewest requests, with s3fs's answers (common/s3_store.py, common/storage.py read_matching / read_or_none /
files_by_folder, the local executor's completed tasks)."""

from __future__ import annotations

import json
import pickle
import ssl
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datatrove.data import DocumentsPipeline
from datatrove.executor.base import ExecutorJSONEncoder
from datatrove.io import get_datafolder
from datatrove.pipeline.base import PipelineStep
from datatrove.utils.stats import PipelineStats

from common.documents import DocumentWriter, SharedSchema, folder_schema
from common.object_lock import acquire_output_lock
from common.run_dir import kept_documents_dir, parquet_under
from common.storage import (
    as_path,
    check_store,
    files_by_folder,
    filesystem,
    read_files,
    read_matching,
    read_or_none,
)
from common.transfer import download_kept_documents, fetch_ahead
from dedup.pipeline import count_input_files
from dedup.records import open_sized
from pipelines.costs import CpuLedger
from pipelines.executors import local_executor
from pipelines.layout import StageFolder
from pipelines.report.data import DocSet, _json_object
from pipelines.report.scan import count_rows, iter_batches
from pipelines.stats import merge_run_stats
from tests.support.s3_server import s3, s3_server_session  # noqa: F401


def counted(url: str):
    """The file system of ``url`` and a Counter of the S3 operations it sends from now on."""
    fs, _ = filesystem(url)
    fs.connect()
    calls: Counter = Counter()
    fs._s3.meta.events.register("before-call.s3", lambda model, **_: calls.update([model.name]))
    return fs, calls


def test_look_ups_take_one_request_each(s3) -> None:  # noqa: F811
    s3.make_bucket("look")
    fs, calls = counted("s3://look/run")
    fs.pipe_file("look/run/dir/a.sig", bytes(range(200)))
    calls.clear()
    for name in ("stats", "logs", "completions", "stats"):
        fs.makedirs(f"look/run/{name}", exist_ok=True)
    assert calls == Counter(HeadBucket=1)  # the bucket once, then nothing: S3 has no folders to make
    calls.clear()
    assert fs.isfile("look/run/dir/a.sig") and not fs.isfile("look/run/dir") and not fs.isfile("look/run/none")
    assert fs.size("look/run/dir/a.sig") == 200
    with pytest.raises(FileNotFoundError):
        fs.size("look/run/none")
    assert calls == Counter(HeadObject=5)  # no listing after a 404
    assert fs.exists("look/run/dir") and fs.isdir("look/run/dir")  # folders are still s3fs's own answer
    calls.clear()
    folder = get_datafolder("s3://look/run/dir")
    with open_sized(folder, "a.sig", 200) as f:
        head = f.read(10)
        f.seek(190)
        tail = f.read(10)
    assert (head, tail) == (bytes(range(10)), bytes(range(190, 200)))
    assert set(calls) == {"GetObject"}  # the known size and no ETag look-up: range reads only


def test_reading_many_small_files_is_one_listing_and_a_get_each(s3, tmp_path: Path) -> None:  # noqa: F811
    s3.make_bucket("many")
    fs, calls = counted("s3://many/run")
    for i in range(5):
        fs.pipe_file(f"many/run/stats/{i:05d}.json", f'{{"task": {i}}}'.encode())
        (tmp_path / f"{i:05d}.json").write_text(f'{{"task": {i}}}')
    fs.pipe_file("many/run/stats/notes.txt", b"x")
    calls.clear()
    remote = read_matching("s3://many/run/stats", "*.json")
    assert remote == read_matching(tmp_path, "*.json") == [f'{{"task": {i}}}'.encode() for i in range(5)]
    assert calls == Counter(ListObjectsV2=1, GetObject=5)
    assert read_matching("s3://many/run/absent", "*.json") == []
    calls.clear()
    assert read_or_none("s3://many/run/stats/00001.json") == b'{"task": 1}'
    assert read_or_none("s3://many/run/cpu.json") is None and read_or_none(tmp_path / "cpu.json") is None
    assert calls == Counter(GetObject=2)


def test_the_driver_asks_every_stage_s_files_by_one_listing(s3, tmp_path: Path) -> None:  # noqa: F811
    """The run's stats merge (every stage's stats and completions) and a stage's completed tasks."""
    s3.make_bucket("grouped")
    fs, calls = counted("s3://grouped/run")
    for stage in ("curate", "dedup_buckets"):
        (tmp_path / "stats" / stage).mkdir(parents=True)
        for i in range(3):
            fs.pipe_file(f"grouped/run/stats/{stage}/{i:05d}.json", f'{{"{stage}": {i}}}'.encode())
            (tmp_path / "stats" / stage / f"{i:05d}.json").write_text(f'{{"{stage}": {i}}}')
        fs.pipe_file(f"grouped/run/completions/{stage}/00001", b"")
    fs.pipe_file("grouped/run/stats/curate.json", b"{}")  # a stage's own merge: not a task's stats
    calls.clear()
    grouped = files_by_folder("s3://grouped/run/stats", "*.json")
    assert grouped == files_by_folder(tmp_path / "stats", "*.json")
    assert grouped["curate"] == ["curate/00000.json", "curate/00001.json", "curate/00002.json"]
    names = grouped["curate"] + grouped["dedup_buckets"]
    assert read_files("s3://grouped/run/stats", names) == read_files(tmp_path / "stats", names)
    assert calls == Counter(ListObjectsV2=1, GetObject=6)
    calls.clear()
    executor = local_executor([], 3, 2, StageFolder("s3://grouped/run", "dedup_buckets"))
    assert [executor.is_rank_completed(r) for r in range(3)] == [False, True, False]
    assert executor.get_incomplete_ranks() == [0, 2]
    assert calls == Counter(ListObjectsV2=1)  # not a HEAD per task, nor a second listing
    executor.save_executor_as_json()  # goes up in the background; asking for the ranks to run waits for it
    assert executor.get_incomplete_ranks() == [0, 2] and "_saving" not in vars(executor)
    saved = fs.cat_file("grouped/run/logs/dedup_buckets/executor.json").decode()
    assert saved == json.dumps(executor, cls=ExecutorJSONEncoder, indent=4)  # datatrove's own bytes
    calls.clear()
    first = local_executor([], 3, 2, StageFolder("s3://grouped/run", "dedup_filter"))  # a stage not run yet
    assert [first.is_rank_completed(r) for r in range(3)] == [False, False, False]
    assert first.get_incomplete_ranks() == [0, 1, 2]
    assert calls == Counter(ListObjectsV2=1)  # s3fs's find would add a HEAD and a listing to find nothing


def test_a_bucket_found_once_is_not_asked_for_again_and_the_lock_is_read_by_one_get(s3) -> None:  # noqa: F811
    """``check_store`` lists the bucket; the file systems the run makes after it (the driver's, each task's own
    instance, a forked worker's) write into it without a HEAD for the bucket each (a sample run sent 9); the lock's
    release reads its record by one GET (s3fs asked its size first) before the delete."""
    s3.make_bucket("seen")
    check_store("s3://seen/run")
    fs, calls = counted("s3://seen/run")
    lock = acquire_output_lock("s3://seen/run", checked=True)
    task, _ = filesystem("s3://seen/run", skip_instance_cache=True)  # a task's own instance: its own client
    task_calls: Counter = Counter()
    task.connect().meta.events.register("before-call.s3", lambda model, **_: task_calls.update([model.name]))
    for each in (fs, task):
        each.makedirs("seen/run/stats", exist_ok=True)
        each.pipe_file("seen/run/stats/00000.json", b"{}")
    assert calls["HeadBucket"] == task_calls["HeadBucket"] == 0 and task_calls["PutObject"] == 1
    calls.clear()
    lock.release()
    assert calls == Counter(GetObject=1, DeleteObject=1)
    assert fs.ls("seen/run", refresh=True) == ["seen/run/stats"]


def test_the_report_reads_each_store_file_once_fetched_ahead(s3, tmp_path: Path) -> None:  # noqa: F811
    """The report's pass over a store run's documents (pipelines/report): each file by one GET, fetched ahead
    of the reader into the scratch and deleted once read; the footers for its total read together; the
    kept folder found by one listing. The batches are a local read's."""
    s3.make_bucket("report")
    fs, calls = counted("s3://report/run")
    local = []
    for i in range(5):
        path = tmp_path / "twin" / "deduped" / f"{i:05d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"id": [f"{i}-{j}" for j in range(3 + i)], "text": ["a b"] * (3 + i)}), path)
        fs.put_file(str(path), f"report/run/deduped/{i:05d}.parquet")
        local.append(path)
    fs.pipe_file("report/run/deduped/.00009.parquet", b"partial")  # a writer in progress: not a document
    calls.clear()
    kept = kept_documents_dir("s3://report/run")
    assert calls == Counter(ListObjectsV2=1)  # a HEAD and four listings, and a HEAD per file, before
    files = sorted(parquet_under(kept), key=str)
    assert [f.name for f in files] == [p.name for p in local]
    assert count_rows(files) == count_rows(local) == 25
    calls.clear()
    with fetch_ahead(files, ahead=2) as ahead:
        assert ahead is not None
        got = pa.Table.from_batches(list(iter_batches(files, ahead=ahead)))
        assert not any(ahead._dir.iterdir())  # each copy deleted once read
    assert not ahead._dir.exists()
    assert got.equals(pa.Table.from_batches(list(iter_batches(local))))
    assert calls == Counter(GetObject=5)  # opening each file in turn was a HEAD and two GETs


def test_a_run_s_own_files_take_one_request_where_a_look_up_came_first(s3, tmp_path: Path) -> None:  # noqa: F811
    """The driver's and the filter task's questions with an answer known from one request (a look-up came
    first, one round trip each, one after another): the answers are the local twin's."""
    s3.make_bucket("own")
    fs, calls = counted("s3://own/run")
    twin = tmp_path / "twin"
    for rel in ("curated/00000.parquet", "curated/sub/00001.parquet", "deduped/00000.parquet"):
        (twin / rel).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"text": ["a"], "id": [rel]}), twin / rel)
        fs.put_file(str(twin / rel), f"own/run/{rel}")
    for rel, text in (("stats.json", '{"stages": {}}'), ("run.json", '{"dump": "d"}')):
        (twin / rel).write_text(text)
        fs.pipe_file(f"own/run/{rel}", text.encode())
    calls.clear()
    assert count_input_files("s3://own/run/curated") == count_input_files(str(twin / "curated")) == 2
    assert count_input_files("s3://own/run/absent") == 0
    assert calls == Counter(ListObjectsV2=2)  # a HEAD and two listings each, before
    calls.clear()
    assert [p.name for p in DocSet.kept(as_path("s3://own/run/deduped")).files] == ["00000.parquet"]
    assert calls == Counter(ListObjectsV2=1)  # the glob: a HEAD and three listings
    calls.clear()
    assert _json_object(as_path("s3://own/run/stats.json")) == _json_object(twin / "stats.json")
    assert _json_object(as_path("s3://own/run/refilter.json"), missing_ok=True) is None
    assert _json_object(twin / "refilter.json", missing_ok=True) is None
    # stats.json: the open's HEAD and a GET (an exists and a stat first were three more); a missing file: the
    # open's HEAD and listing, what exists asked before
    assert calls == Counter(HeadObject=2, GetObject=1, ListObjectsV2=1)

    extra = [pa.field("reason", pa.string())]
    schema = SharedSchema("s3://own/run/curated")
    calls.clear()
    assert schema.schema(extra) == folder_schema(str(twin / "curated"), extra)
    first = +calls
    assert schema.schema() == folder_schema(str(twin / "curated"))  # the task's second writer: no request
    assert calls == first and first["ListObjectsV2"] == 1
    writers = [DocumentWriter(str(tmp_path / n), schema_from=schema) for n in ("a", "b")]
    copies = pickle.loads(pickle.dumps(writers))  # a task's copy of its pipeline: one schema, read there again
    assert copies[0].schema_from is copies[1].schema_from and not copies[0].schema_from._read

    ledger = CpuLedger(as_path("s3://own/run"))
    ledger.add("curate", 1.0)
    ledger.add("dedup", 2.5)
    ledger.written()
    assert json.loads(fs.cat_file("own/run/cpu.json")) == {"curate": 1.0, "dedup": 2.5}


def test_a_run_s_kept_documents_come_down_by_a_listing_and_a_get_each(s3, tmp_path: Path) -> None:  # noqa: F811
    """The chain's copy of a store run's documents (pipelines/chain_store.py): the folder kept_documents_dir
    names, fetched whole, with one listing per folder looked at (it was three and a HEAD per file)."""
    s3.make_bucket("kept")
    fs, calls = counted("s3://kept/run")
    files = {"deduped/00000.parquet": b"d0", "deduped/sub/00001.parquet": b"d1", "curated/00000.parquet": b"c0"}
    for rel, data in files.items():
        fs.pipe_file(f"kept/run/{rel}", data)
        (tmp_path / "twin" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "twin" / rel).write_bytes(data)
    fs.pipe_file("kept/run/deduped/.lock", b"{}")  # a folder's lock is not its data
    calls.clear()
    assert download_kept_documents("s3://kept/run", tmp_path / "a") == kept_documents_dir(tmp_path / "twin").name
    assert calls == Counter(ListObjectsV2=1, GetObject=2)
    got = sorted(p.relative_to(tmp_path / "a").as_posix() for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert got == ["deduped/00000.parquet", "deduped/sub/00001.parquet"]
    assert (tmp_path / "a" / "deduped" / "sub" / "00001.parquet").read_bytes() == b"d1"

    fs.rm("kept/run/deduped", recursive=True)
    fs.pipe_file("kept/run/deduped/.00002.parquet", b"partial")  # hidden: a writer in progress, not documents
    calls.clear()
    assert download_kept_documents("s3://kept/run", tmp_path / "b") == "curated"
    assert calls == Counter(ListObjectsV2=2, GetObject=1)
    assert (tmp_path / "b" / "curated" / "00000.parquet").read_bytes() == b"c0"
    fs.rm("kept/run/curated", recursive=True)
    assert download_kept_documents("s3://kept/run", tmp_path / "c") is None
    assert not (tmp_path / "c").exists()


def test_a_small_put_sends_its_body_at_once_a_big_one_waits_for_100_continue(
    s3,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """botocore asks ``Expect: 100-continue`` of every PUT: a second round trip each, against a remote store.
    Seen through the bench's proxy (it notes a body that left only after the server's interim answer)."""
    from bench.latency_proxy import LatencyProxy
    from common import s3_store
    from tests.support.s3_server import clear_clients

    s3.make_bucket("bodies")
    monkeypatch.setattr(s3_store, "SMALL_BODY", 1024)  # the threshold, without uploading 8 MiB
    with LatencyProxy(s3.port, 0) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        clear_clients()
        fs, _ = filesystem("s3://bodies/run")
        fs.pipe_file("bodies/run/small", b"x" * 1024)
        fs.pipe_file("bodies/run/big", b"x" * 1025)
        lines = [line for _, _, line in proxy.sent]
        assert fs.cat_file("bodies/run/small") == b"x" * 1024 and fs.cat_file("bodies/run/big") == b"x" * 1025
    clear_clients()
    assert lines == ["PUT /bodies/run/small HTTP/1.1", "PUT /bodies/run/big HTTP/1.1", "(body after 100 Continue)"]


def test_the_clients_of_one_process_share_one_tls_context(s3) -> None:  # noqa: F811
    """aiobotocore builds a TLS context, the CA bundle loaded, for each client (~25 ms of CPU; a run makes one
    client in each task process): ``SharedTLSSession`` builds it once per process for the same settings."""
    s3.make_bucket("tls")

    def context_of(fs) -> ssl.SSLContext:
        fs.ls("tls")  # the HTTP session and its connector are made on the first request
        return fs._s3._endpoint.http_session._sessions[None].connector._ssl

    first, second = (filesystem("s3://tls/run", skip_instance_cache=True)[0] for _ in range(2))
    assert context_of(first) is context_of(second) and first._s3 is not second._s3
    assert context_of(first).verify_mode == ssl.CERT_REQUIRED  # verified as aiobotocore's own
    unverified, _ = filesystem("s3://tls/run", skip_instance_cache=True, client_kwargs={"verify": False})
    assert context_of(unverified) is not context_of(first) and context_of(unverified).verify_mode == ssl.CERT_NONE


class _Count(PipelineStep):
    """A step with stats of its own: a counter and a timing."""

    name = "count"

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        with self.track_time():
            self.stat_update("seen", value=rank + 1)
        yield from ()


def test_the_run_s_stats_merge_reads_back_only_the_stats_of_tasks_it_did_not_run(s3) -> None:  # noqa: F811
    """The local executor hands the driver the stats files its tasks wrote (``TaskStats``); ``merge_run_stats``
    reads from the store only the others' (a task of an earlier invocation), and writes the same stats.json."""
    s3.make_bucket("merge")
    fs, calls = counted("s3://merge/run")
    step = _Count()
    list(step(None, 1, 3))  # task 1, run by an earlier invocation
    fs.pipe_file("merge/run/stats/curate/00001.json", PipelineStats([step]).to_json().encode())
    fs.pipe_file("merge/run/completions/curate/00001", b"")
    executor = local_executor([_Count()], 3, 1, StageFolder("s3://merge/run", "curate"))
    executor.list_completions()
    ran = executor.run()
    assert sorted(ran.files) == ["00000.json", "00002.json"]  # the task it skipped wrote none
    for name, text in ran.files.items():
        assert fs.cat_file(f"merge/run/stats/curate/{name}").decode() == text
    known = {f"curate/{name}": text for name, text in ran.files.items()}
    calls.clear()
    merged = merge_run_stats(as_path("s3://merge/run"), ["curate"], {"curate": 3}, known)
    assert calls == Counter(ListObjectsV2=2, GetObject=1, PutObject=1)  # the earlier task's stats alone read
    written = fs.cat_file("merge/run/stats.json")
    assert merge_run_stats(as_path("s3://merge/run"), ["curate"], {"curate": 3}) == merged  # all read back
    assert fs.cat_file("merge/run/stats.json") == written
    assert merged["stages"]["curate"]["steps"][0]["counters"] == {"seen": 1 + 2 + 3}


def test_the_s3_server_keeps_connections_open_and_logs_each_request_as_the_benches_count_them(tmp_path: Path) -> None:
    """The tests' and benches' S3 server (``tests/support/moto_s3_server.py``): one connection serves a client's
    requests one after another, as a real store's does (werkzeug's, behind ``python -m moto.server``, closed each
    after its answer: a connection and a server thread per request), and its log has one line per request, which
    ``bench.object_store`` counts by method and key."""
    import http.client

    from bench.object_store import requests
    from tests.support.s3_server import S3Server

    log = tmp_path / "server.log"
    server = S3Server(log=log).start()
    try:
        with server.use():
            server.make_bucket("kept")
            fs, _ = filesystem("s3://kept/x")
            fs.pipe_file("kept/run/a.json", b"{}")
            assert fs.cat_file("kept/run/a.json", **fs.small_read_options) == b"{}"  # one GET
            assert fs.size("kept/run/a.json") == 2
            assert fs.ls("kept/run", detail=False) == ["kept/run/a.json"]
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        try:
            sockets = []
            for _ in range(3):
                connection.request("GET", "/moto-api/")
                answer = connection.getresponse()
                answer.read()
                assert answer.status == 200
                assert answer.getheader("Connection", "").lower() != "close"
                sockets.append(connection.sock)
            assert sockets[0] is not None and sockets.count(sockets[0]) == 3  # one socket: no connection per request
        finally:
            connection.close()
        assert log.stat().st_size > 0
        by_key = requests(log, 0, by_key=True)
    finally:
        server.stop()
    assert by_key["PUT kept/run/a.json"] == 1
    assert by_key["GET kept/run/a.json"] == 1
    assert by_key["HEAD kept/run/a.json"] == 1
    assert by_key["GET kept?list run/"] == 1
    assert requests(log, 0)["GET"] >= 5  # the listing, the object and the three /moto-api/ pages
