"""Uploads in the background (common/uploads.py) against a real S3 server (moto on 127.0.0.1, real s3fs): a
document file and an atomically written file reach their final key whole, only by the end of the block that
waits for them; a failed upload is raised there; an aborted writer uploads nothing and leaves no local file."""

from __future__ import annotations

import tempfile
from pathlib import Path

import fsspec
import pyarrow.parquet as pq
import pytest
from datatrove.data import Document

from common.atomic import atomic_open
from common.documents import DocumentWriter, document_schema
from common.uploads import background_uploads, uploads_before_completion
from tests.support.s3_server import s3, s3_server_session  # noqa: F401


def document(i: int) -> Document:
    return Document(text=f"text {i}", id=str(i), metadata={"url": f"https://example.com/{i}"})


@pytest.fixture
def scratch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """tempfile's folder for the test (a run points it at its --scratch): the staged files go there."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_a_task_s_document_files_land_whole_before_it_ends(s3, scratch: Path) -> None:  # noqa: F811
    s3.make_bucket("docs")
    fs = fsspec.filesystem("s3")
    written = DocumentWriter("s3://docs/run/curated", schema=document_schema())
    removed = DocumentWriter("s3://docs/run/removed/short", schema=document_schema())

    def pipeline(data: object, rank: int = 0, world_size: int = 1):
        with written, removed:
            for i in range(5):
                (written if i % 2 else removed).write(document(i), rank)
                yield document(i)

    assert len(list(uploads_before_completion(pipeline(None)))) == 5  # the task's end waits for its uploads
    assert sorted(fs.find("docs")) == ["docs/run/curated/00000.parquet", "docs/run/removed/short/00000.parquet"]
    with fs.open("docs/run/curated/00000.parquet", "rb") as f:
        assert pq.read_table(f).column("id").to_pylist() == ["1", "3"]
    assert list(scratch.iterdir()) == []  # the staged files are gone

    aborted = DocumentWriter("s3://docs/run/aborted", schema=document_schema())
    with pytest.raises(RuntimeError), background_uploads(), aborted:
        aborted.write(document(7), 0)
        raise RuntimeError("the task fails")
    assert not fs.exists("docs/run/aborted") and list(scratch.iterdir()) == []


def test_a_failed_upload_is_raised_where_the_uploads_are_waited_for(s3, scratch: Path) -> None:  # noqa: F811
    s3.make_bucket("plots")
    with pytest.raises(FileNotFoundError), background_uploads():
        with atomic_open("s3://plots/report/a.png") as handle:
            handle.write(b"png")
        with atomic_open("s3://no-such-bucket/report/b.png") as handle:
            handle.write(b"png")
    assert fsspec.filesystem("s3").cat("plots/report/a.png") == b"png"
    assert list(scratch.iterdir()) == []
