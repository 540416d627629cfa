"""Dedup record files on an object store (moto's S3 server on 127.0.0.1, real s3fs): streamed to the final
key, visible only once committed; an aborted or never-committed writer leaves no object a reader could take."""

from __future__ import annotations

import gc
from collections import Counter

import fsspec
import numpy as np
from datatrove.io import get_datafolder

from common.storage import filesystem
from dedup.buckets import DedupBuckets, band_signature_files
from dedup.clusters import docs_per_rank
from dedup.config import DedupConfig
from dedup.formats import SIG_KIND, SIGNATURE
from dedup.records import Header, RecordWriter, listed_version, open_records
from tests.support.s3_server import S3Server, s3, s3_server_session  # noqa: F401

DT = np.dtype([("key", "<u8")])
FP = 0x1234


def test_record_files_appear_on_the_store_only_when_committed(s3: S3Server) -> None:  # noqa: F811
    bucket = s3.make_bucket("records")
    folder = get_datafolder(f"{bucket}/minhash")
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    records = np.arange(1000, dtype="<u8").view(DT)

    with RecordWriter(folder, "band_00/00000.sig", Header(b"SIGS", FP, 0, 1, DT.itemsize)) as writer:
        writer.write(records)
        assert not fs.exists("records/minhash/band_00/00000.sig")  # not visible while written
        writer.commit(extra=7)
    done = open_records(folder, "band_00/00000.sig", b"SIGS", FP, DT, rank=0, world_size=1)
    assert done.extra == 7 and np.array_equal(done.read_all(), records)

    try:
        with RecordWriter(folder, "band_01/00000.sig", Header(b"SIGS", FP, 0, 1, DT.itemsize)) as writer:
            writer.write(records)
            raise RuntimeError("the task fails mid-write")
    except RuntimeError:
        pass
    abandoned = RecordWriter(folder, "band_02/00000.sig", Header(b"SIGS", FP, 0, 1, DT.itemsize))
    abandoned.write(records)
    abandoned.abort()
    del abandoned, writer
    gc.collect()  # a discarded upload is not completed by the file's own close either
    assert fs.find("records") == ["records/minhash/band_00/00000.sig"]  # no .tmp, nothing partial


def test_a_small_record_file_is_fetched_again_only_at_another_listed_version(s3: S3Server) -> None:  # noqa: F811
    """The driver counts every band's pairs, then its cluster task reads them: one GET each, kept by the ETag
    of the listing; an object rewritten since is read again. And one listing for every band's signatures."""
    bucket = s3.make_bucket("kept")
    folder = get_datafolder(f"{bucket}/minhash")
    fs, _ = filesystem(f"s3://{bucket}")
    fs.connect()
    calls: Counter = Counter()
    fs._s3.meta.events.register("before-call.s3", lambda model, **_: calls.update([model.name]))

    def write(name: str, records: np.ndarray, rank: int = 0) -> None:
        with RecordWriter(folder, name, Header(SIG_KIND, FP, rank, 1, SIGNATURE.itemsize)) as writer:
            writer.write(records)
            writer.commit(extra=len(records))

    first, second = (np.arange(i, i + 100, dtype="<u8") for i in (0, 1000))
    records = [np.zeros(100, dtype=SIGNATURE) for _ in range(2)]
    for band, (keys, rec) in enumerate(zip((first, second), records, strict=True)):
        rec["key"], rec["doc"] = keys, band
        write(f"band_{band:02d}/00000.sig", rec)
    listed = folder.find("", detail=True)
    calls.clear()

    def read(version_of: dict) -> np.ndarray:
        entry = version_of["band_00/00000.sig"]
        found = open_records(folder, "band_00/00000.sig", SIG_KIND, FP, SIGNATURE, 0, 1, entry["size"],
                             listed_version(entry))  # fmt: skip
        return found.read_all()

    assert np.array_equal(read(listed), records[0]) and np.array_equal(read(listed), records[0])
    assert calls == Counter(GetObject=1)  # the second read at the same version: no request
    calls.clear()
    records[0]["doc"] = 7  # the same size, another content: another ETag
    write("band_00/00000.sig", records[0])
    relisted = folder.find("", detail=True)
    calls.clear()
    assert np.array_equal(read(relisted), records[0]) and calls == Counter(GetObject=1)
    calls.clear()
    every = [band_signature_files(folder, band, FP, relisted) for band in (0, 1)]
    assert every == [band_signature_files(folder, band, FP) for band in (0, 1)]
    # the two bands' own listings (none with the whole listing given); band 1's file read once, band 0's kept
    assert calls == Counter(ListObjectsV2=2, GetObject=1)


def counted_bucket(s3: S3Server, name: str) -> tuple[str, Counter]:  # noqa: F811
    """A new bucket, and the S3 calls this process's client sends from now on, by operation name."""
    bucket = s3.make_bucket(name)
    fs, _ = filesystem(bucket)
    fs.connect()
    calls: Counter = Counter()
    fs._s3.meta.events.register("before-call.s3", lambda model, **_: calls.update([model.name]))
    return bucket, calls


def test_a_bucket_task_takes_its_band_s_files_from_the_driver_s_listings(s3: S3Server, tmp_path) -> None:  # noqa: F811
    """``DedupBuckets.list_ahead``: the driver lists the signatures and the output folder once before the stage;
    a band's task then neither lists its band nor looks its pairs up, and writes the pairs a local run writes. A
    task whose pairs the listing shows is skipped."""
    bucket, calls = counted_bucket(s3, "ahead")
    config = DedupConfig()
    fp, bands = config.fingerprint("minhash"), config.num_buckets
    fs, _ = filesystem(bucket)
    rng, header = np.random.default_rng(3), Header(SIG_KIND, fp, 0, 1, SIGNATURE.itemsize)
    for folder in (get_datafolder(f"{bucket}/sigs"), get_datafolder(str(tmp_path / "sigs"))):
        for band in range(bands):
            records = np.zeros(50, dtype=SIGNATURE)
            records["key"], records["doc"] = rng.integers(0, 20, 50), np.arange(50)
            with RecordWriter(folder, f"band_{band:02d}/00000.sig", header) as w:
                w.write(records)
                w.commit(extra=50)
        rng = np.random.default_rng(3)  # the same signatures in both
    step = DedupBuckets(f"{bucket}/sigs", f"{bucket}/buckets", config)
    calls.clear()
    step.list_ahead()
    assert calls == Counter(ListObjectsV2=2)  # the output folder is empty: no HEAD and second listing for it
    calls.clear()
    step.run(rank=3, world_size=bands)
    assert calls == Counter(GetObject=1, PutObject=1)  # the band's signature file, the pairs
    DedupBuckets(str(tmp_path / "sigs"), str(tmp_path / "buckets"), config).run(rank=3, world_size=bands)
    assert fs.cat_file(f"{bucket}/buckets/band_03.pairs") == (tmp_path / "buckets" / "band_03.pairs").read_bytes()
    again = DedupBuckets(f"{bucket}/sigs", f"{bucket}/buckets", config).list_ahead()
    calls.clear()
    again.run(rank=3, world_size=bands)
    assert "PutObject" not in calls and "HeadObject" not in calls and "ListObjectsV2" not in calls  # skipped


def test_the_driver_reads_the_small_signatures_ahead_for_the_band_and_cluster_tasks(s3: S3Server) -> None:  # noqa: F811
    """``list_ahead(keep=True)`` (the local executor: band tasks forked from the driver, the cluster task run in
    it): the driver reads every band's signature file once, side by side; a band task then sends only its
    outputs, and the cluster stage's document counts, given the folder's listing, send nothing. Without ``keep``
    (tasks elsewhere) the driver reads none."""
    bucket, calls = counted_bucket(s3, "keep-ahead")
    config = DedupConfig()
    fp, bands = config.fingerprint("minhash"), config.num_buckets
    sigs, rng = get_datafolder(f"{bucket}/sigs"), np.random.default_rng(5)
    for band in range(bands):
        for rank in range(2):
            records = np.zeros(40, dtype=SIGNATURE)
            records["key"], records["doc"] = rng.integers(0, 30, 40), np.arange(40)
            header = Header(SIG_KIND, fp, rank, 2, SIGNATURE.itemsize)
            with RecordWriter(sigs, f"band_{band:02d}/{rank:05d}.sig", header) as w:
                w.write(records)
                w.commit(extra=40 + rank)
    calls.clear()
    DedupBuckets(f"{bucket}/sigs", f"{bucket}/elsewhere", config).list_ahead()
    assert calls == Counter(ListObjectsV2=2)
    calls.clear()
    step = DedupBuckets(f"{bucket}/sigs", f"{bucket}/buckets", config).list_ahead(keep=True)
    assert calls == Counter(ListObjectsV2=2, GetObject=2 * bands)  # each signature file once
    calls.clear()
    step.run(rank=3, world_size=bands)
    assert calls == Counter(PutObject=1)  # the pairs; the band's two signature files kept
    listed = sigs.find("", detail=True)
    calls.clear()
    assert docs_per_rank(sigs, fp, listed) == [40, 41] and not calls
    assert docs_per_rank(sigs, fp) == [40, 41] and calls == Counter(HeadObject=2, GetObject=2)  # no listing given
