"""Dedup record files on an object store (moto's S3 server on 127.0.0.1, real s3fs): streamed to the final
key, visible only once committed; an aborted or never-committed writer leaves no object a reader could take."""

from __future__ import annotations

import gc

import fsspec
import numpy as np
from datatrove.io import get_datafolder

from dedup.records import Header, RecordWriter, open_records
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
