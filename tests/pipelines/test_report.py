"""The run report's numbers are ``stats.json``'s, its tokens are the files' words, its page is self-contained.

Every expectation is computed here from the run directory itself (``stats.json`` and the parquet
files read with pyarrow), never from the report's own helpers.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pipelines.report import write as report
from pipelines.report.html import _doc
from pipelines.report.scan import word_counts
from tests.support.s3_server import s3, s3_server_session  # noqa: F401

pytestmark = pytest.mark.e2e

PNG = b"\x89PNG\r\n\x1a\n"


class Page(HTMLParser):
    """Tables by id (rows of cell text), image sources, every URL attribute, <pre> texts, scripts."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.images: list[str] = []
        self.urls: list[str] = []
        self.pres: list[str] = []
        self.scripts = 0
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._pre: list[str] | None = None
        self._in_body = False
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.urls += [v for k, v in attrs.items() if k in ("src", "href") and v]
        if tag == "script":
            self.scripts += 1
        elif tag == "img":
            self.images.append(attrs["src"])
        elif tag == "table":
            self._table = attrs.get("id")
            if self._table:
                self.tables[self._table] = []
        elif tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._table and self._in_body:
            self.tables[self._table].append([])
        elif tag == "td" and self._table and self._in_body:
            self._cell = []
        elif tag == "pre":
            self._pre = []

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table, self._in_body = None, False
        elif tag == "pre" and self._pre is not None:
            self.pres.append("".join(self._pre))
            self._pre = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._pre is not None:
            self._pre.append(data)


def _int(cell: str) -> int | None:
    return None if cell == "–" else int(cell.replace(",", ""))


def _texts(files: list[Path]) -> list[str]:
    return [t or "" for f in files for t in pq.read_table(f, columns=["text"]).column("text").to_pylist()]


def _words(files: list[Path]) -> int:
    return sum(len(t.split()) for t in _texts(files))


def _expected_steps(stats: dict) -> list[dict]:
    """Filtering steps of the document stages, in run order, straight from stats.json."""
    out = []
    for stage in ("curate", "dedup_filter"):
        for step in stats["stages"].get(stage, {}).get("steps", []):
            if step["in"] is not None and step["kept"] is not None:
                out.append({"stage": stage, **step})
    return out


@pytest.fixture(scope="module")
def built(sample_run: Path) -> tuple[Path, str]:
    """``python -m pipelines.report OUT`` (the parent folder) once; its index.html and stdout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert report.main([str(sample_run.parent)]) == 0
    return sample_run / "report" / "index.html", out.getvalue()


@pytest.fixture(scope="module")
def page(built) -> Page:
    return Page(built[0].read_text())


@pytest.fixture(scope="module")
def data(built) -> dict:
    return json.loads((built[0].parent / "report.json").read_text())


def test_steps_table_equals_stats_json(sample_run: Path, page: Page, data: dict) -> None:
    expected = _expected_steps(json.loads((sample_run / "stats.json").read_text()))
    rows = page.tables["steps"]
    assert len(rows) == len(expected) == len(data["steps"])
    for row, want, got in zip(rows, expected, data["steps"], strict=True):
        stage, name, n_in, kept, dropped, _share, _tokens, reasons, _disk = row
        assert stage == want["stage"] and name == want["id"] and want["name"].endswith(f": {name}")
        assert (_int(n_in), _int(kept), _int(dropped)) == (want["in"], want["kept"], want["dropped"] or 0)
        shown = dict(pair.split("=") for pair in reasons.split(", ")) if reasons else {}
        assert {k: _int(v) for k, v in shown.items()} == want["dropped_by_reason"]
        assert (got["in"], got["kept"], got["dropped"]) == (want["in"], want["kept"], want["dropped"] or 0)
    funnel = [f["docs"] for f in data["funnel"]]
    assert funnel == [expected[0]["in"]] + [s["kept"] for s in expected]


def test_reader_and_removal_tables_equal_stats_json(sample_run: Path, page: Page) -> None:
    stats = json.loads((sample_run / "stats.json").read_text())
    reader = next(s for s in stats["stages"]["curate"]["steps"] if "records" in s["counters"])
    assert {k: _int(v) for k, v in page.tables["reader"]} == reader["counters"]
    by_step: dict[str, int] = {}
    for step, _reason, count in page.tables["removals"]:
        by_step[step] = by_step.get(step, 0) + _int(count)
    for step in _expected_steps(stats):
        assert by_step.get(step["id"], 0) == (step["dropped"] or 0), step["id"]
        for reason, n in step["dropped_by_reason"].items():
            assert [step["id"], reason, f"{n:,}"] in page.tables["removals"]
    tasks = {stage: (_int(done), _int(total)) for stage, done, total in page.tables["tasks"]}
    assert tasks == {k: (v["tasks_completed"], v.get("tasks_total")) for k, v in stats["stages"].items()}


def test_removed_files_and_tokens_agree_with_the_parquet_files(sample_run: Path, data: dict) -> None:
    removed = sample_run / "removed"
    rows = {d.name: sum(pq.ParquetFile(f).metadata.num_rows for f in d.glob("*.parquet")) for d in removed.iterdir()}
    steps = {s["step"]: s for s in data["steps"]}
    assert all(s["consistent"] for s in data["steps"]), data["steps"]
    for step_id, n in rows.items():  # removed/<id>/ holds what step <id> dropped, the pre-check's too
        assert steps[step_id]["removed_rows"] == n == steps[step_id]["dropped"], step_id
    deduped = sorted((sample_run / "deduped").glob("*.parquet"))
    assert data["totals"]["kept_documents"] == len(_texts(deduped)) == data["steps"][-1]["kept"]
    assert data["totals"]["kept_tokens"] == _words(deduped) == data["steps"][-1]["tokens_kept"]
    # kept after extraction = the kept documents plus everything a later step removed
    later = [f for f in removed.glob("*/*.parquet") if f.parent.name != "extraction"]
    assert steps["extraction"]["tokens_kept"] == _words(deduped) + _words(later)
    assert steps["url"]["tokens_kept"] is None  # HTML, before extraction
    sizes = pq.read_table(deduped[0], columns=["minhash_cluster_size"]).column(0).to_pylist()
    assert data["clusters"]["duplicates_removed"] == sum(s - 1 for s in sizes) == steps["minhash"]["dropped"]
    assert sum(data["lengths"]["after"]) == len(sizes)


def test_page_is_static_and_self_contained(built, page: Page) -> None:
    index, _ = built
    assert page.scripts == 0
    assert not [u for u in page.urls if "://" in u or u.startswith("/")], page.urls  # data: icon only
    assert {"funnel.png", "removals.png", "languages.png", "lengths.png", "clusters.png", "domains.png"} <= set(
        page.images
    )
    for name in page.images:
        assert (index.parent / name).read_bytes()[:8] == PNG
    assert "quality.png" not in page.images  # no classifier in the sample recipe
    assert "no quality classifier ran" in index.read_text()


def test_sampled_documents_are_shown_escaped(page: Page, data: dict) -> None:
    items = [it for group in data["samples"] for it in group["items"]]
    assert {g["set"] for g in data["samples"] if g["items"]} >= {"kept", "gopher_repetition", "minhash"}
    shown = [p for p in page.pres if p != "(no text)"]
    texts = [it["text"] + (" […]" if it["truncated"] else "") for it in items if it["text"]]
    assert shown == texts  # the parser unescapes: what the reader sees is the document's own text
    html = _doc({"text": "<script>alert(1)</script> & <b>", "reason": "<i>", "url": "x?a=<b>", "words": 3}, "kept")
    assert "<script>" not in html and "&lt;script&gt;" in html and "<i>" not in html and "&lt;b&gt;" in html


def test_summary_table_is_printed(built, data: dict) -> None:
    _, stdout = built
    for step in data["steps"]:
        assert step["step"][:28] in stdout
    assert f"kept: {data['totals']['kept_documents']:,} documents" in stdout
    assert "report: " in stdout and stdout.strip().endswith("index.html")


def test_word_counts_match_str_split() -> None:
    texts = ["  a  b\u00a0c\u3000d\x1ce\x85f\u2028g\x0bh ", "", None, "one", "x\ty\nz"]
    assert word_counts(pa.array(texts)).tolist() == [len((t or "").split()) for t in texts]


def test_the_records_its_driver_just_wrote_are_handed_over_not_read_back(
    tmp_path: Path, sample_run: Path, data: dict
) -> None:
    """``pipelines.run`` hands the report the stats.json and run.json it wrote (on a store each read back was a
    HEAD and a GET): the same report as one read from the folder alone, here with neither file left to read."""
    run = tmp_path / "sample"
    shutil.copytree(sample_run, run, ignore=shutil.ignore_patterns("report"))
    records = {name: json.loads((run / name).read_text()) for name in ("stats.json", "run.json")}
    for name in records:
        (run / name).unlink()
    index, written = report.written_report(run, records)
    assert written == {**data, "root": str(run)} == json.loads((index.parent / "report.json").read_text())


def test_a_store_run_s_report_reads_each_document_file_by_one_get_and_no_footer_when_no_bar_shows(
    s3,  # noqa: F811
    sample_run: Path,
    data: dict,
) -> None:
    """Off a terminal the report's progress bar is hidden, and so is its total: the footers it read for it (a HEAD
    and a GET per file on a store, beside the file's own GET) are not read. The same report as a local one."""
    from common.storage import filesystem

    s3.make_bucket("rep")
    fs, _ = filesystem("s3://rep/run")
    fs.put(str(sample_run), "rep/run/sample", recursive=True)
    fs.rm("rep/run/sample/report", recursive=True)
    sent: list[tuple[str, str]] = []
    fs.connect().meta.events.register(
        "before-parameter-build.s3", lambda params, model, **_: sent.append((model.name, params.get("Key", "")))
    )
    records = {name: json.loads((sample_run / name).read_text()) for name in ("stats.json", "run.json")}
    _, written = report.written_report("s3://rep/run/sample", records)
    files = [*sample_run.glob("deduped/*.parquet"), *sample_run.glob("removed/*/*.parquet")]
    parquet = sorted(p.relative_to(sample_run).as_posix() for p in files)
    reads = sorted((op, key) for op, key in sent if key.endswith(".parquet"))
    assert reads == [("GetObject", f"run/sample/{name}") for name in parquet]
    assert written == {**data, "root": "s3://rep/run/sample"}


def test_report_without_dedup_shows_quality_scores(tmp_path: Path, sample_run: Path) -> None:
    """A --no-dedup run whose documents carry a quality_score: the report adapts to both."""
    run = tmp_path / "sample"
    shutil.copytree(sample_run, run, ignore=shutil.ignore_patterns("report", "deduped", "minhash", "logs"))
    stats = json.loads((run / "stats.json").read_text())
    stats["stages"] = {"curate": stats["stages"]["curate"]}
    (run / "stats.json").write_text(json.dumps(stats))
    for path in [*run.glob("curated/*.parquet"), *run.glob("removed/gopher_quality/*.parquet")]:
        table = pq.read_table(path)  # a score in [0, 1] per document, as a classifier would write
        index = table.schema.get_field_index("quality_score")
        pq.write_table(table.set_column(index, "quality_score", pc.cast(table["language_score"], pa.float64())), path)
    index = report.write_report(run)
    page, data = Page(index.read_text()), json.loads((index.parent / "report.json").read_text())
    curated = sum(pq.ParquetFile(f).metadata.num_rows for f in run.glob("curated/*.parquet"))
    removed = sum(pq.ParquetFile(f).metadata.num_rows for f in run.glob("removed/gopher_quality/*.parquet"))
    assert sum(data["quality"]["kept"]) == curated and sum(data["quality"]["removed"]) == removed
    assert "quality.png" in page.images and "clusters.png" not in page.images
    assert data["totals"]["kept_documents"] == curated == data["steps"][-1]["kept"]
    assert [s["stage"] for s in data["steps"]] == ["curate"] * len(data["steps"])
    assert "no dedup stage in this run" in index.read_text()
