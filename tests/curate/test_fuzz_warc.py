"""Hostile WARC input never stops the reader: every record ends as a document or a counted reason.

The inputs come from ``tests/support/hostile_warc.py`` (built from the real samples); the full run is
``python -m tests.support.hostile_warc --n 1000``, this file runs a bounded subset in CI.
"""

from __future__ import annotations

import io
import random
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from curate.warc import LOSSES, RECORD_FATES, RobustWarcReader
from pipelines.sources import SourceError, resolve_paths
from tests.support import hostile_warc as hw

CI_RANDOM_CASES = 30


@pytest.fixture(scope="module")
def seeds() -> list[hw.Seed]:
    return hw.all_seeds()


def _check(case: hw.Case, tmp_path: Path) -> dict:
    path = tmp_path / case.filename
    path.write_bytes(case.data)
    result = hw.account(path)
    assert not hw.problems(case, result), (case.name, hw.problems(case, result))
    return result


def test_the_issues_crashing_inputs_end_as_counted_reasons(seeds: list[hw.Seed], tmp_path: Path) -> None:
    """Issue 19's 16 crashes: missing/empty URI and Content-Length 2**63 / 10**30 (in .warc.gz and
    plain .warc), plain .warc cut inside a header block, a file name holding a newline."""
    cases = hw.issue_cases(seeds)
    assert len(cases) == 16
    for case in cases:
        result = _check(case, tmp_path)
        counted = sum(result["losses"].values()) + sum(n for k, n in result["fates"].items() if k != "document")
        assert counted, case.name
        assert len(result["read_ids"]) + sum(result["losses"][k] for k in (*LOSSES, "missing_url")) >= len(case.ids)


def test_a_file_name_with_a_line_break_is_refused_before_any_work(seeds: list[hw.Seed], tmp_path: Path) -> None:
    bad = tmp_path / "new\nline.warc.gz"
    bad.write_bytes(hw.encode(list(seeds[0].records[:3]), "gz")[0])
    with pytest.raises(SourceError) as err:
        resolve_paths([str(tmp_path)])
    assert "\n" not in str(err.value) and "line break" in str(err.value)


def test_hostile_inputs_ci_subset(seeds: list[hw.Seed], tmp_path: Path) -> None:
    """Every container kind, header edit, HTTP edit, both bombs and random damage, each in its own
    process with a time limit: no crash, no hang, every record accounted for, bounded RSS."""
    rng = random.Random(2024)
    cases = hw.fixed_cases(seeds, rng) + hw.random_cases(seeds, CI_RANDOM_CASES, rng)
    failures, peak = [], 0
    for case in cases:
        outcome = hw.run_isolated(case, tmp_path)
        peak = max(peak, outcome["rss"])
        if outcome["crash"] or outcome["hang"] or outcome["problems"]:
            failures.append((case.name, outcome["crash"] or ("hang" if outcome["hang"] else outcome["problems"])))
    assert not failures, failures
    assert peak <= hw.RSS_BOUND_BYTES, f"peak RSS {peak / 2**20:.0f} MiB"


@pytest.mark.parametrize(
    "kind", ["garbage_prefix_gz", "garbage_between_gz", "empty_members_gz", "zst_dictionary", "garbage_prefix_warc"]
)
def test_the_reader_step_balances_its_counters(kind: str, seeds: list[hw.Seed], tmp_path: Path) -> None:
    """Through the datatrove step: documents + record fates == ``records``, and the losses are counted."""
    case = hw.case_container(seeds[0], random.Random(kind), kind)
    path = tmp_path / case.filename
    path.write_bytes(case.data)
    counts: Counter = Counter()
    reader = RobustWarcReader(str(tmp_path), glob_pattern=case.filename)
    reader.stat_update = lambda *keys, value=1, unit=None: counts.update({k: value for k in keys})
    docs = list(reader.run(None, 0, 1))
    fates = sum(n for k, n in counts.items() if k in RECORD_FATES or k.startswith("skipped_"))
    assert len(docs) + fates == counts["records"] == len(case.ids), counts
    assert counts[case.expect or "records"], counts


def test_bombs_stop_at_the_cap(seeds: list[hw.Seed], tmp_path: Path) -> None:
    """A 1.1 GB Content-Encoding body and a 200 MB gzip member are never inflated past the caps."""
    rng = random.Random(7)
    for case in (hw.case_http(seeds[0], rng, "gz", "body_bomb_gzip"), hw.case_member_bomb(seeds[0], rng)):
        outcome = hw.run_isolated(case, tmp_path)
        assert not (outcome["crash"] or outcome["hang"] or outcome["problems"]), (case.name, outcome)
        assert outcome["rss"] < 1 << 30, f"{case.name}: {outcome['rss'] / 2**20:.0f} MiB"


# ---- properties -----------------------------------------------------------------------------

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=200)
_page = st.tuples(
    st.sampled_from(["response", "metadata", "resource"]),
    st.sampled_from(["text/html", "application/pdf", "text/plain"]),
    _text,
    st.booleans(),  # empty URI
)


def _write(pages: list[tuple], container: str) -> tuple[bytes, list[str]]:
    """Pages written by warcio; returns the file's bytes and the ids of the expected documents."""
    buf = io.BytesIO()
    expected = []
    writer = WARCWriter(buf, gzip=container == "gz")
    raws = []
    for i, (rec_type, mime, text, empty_uri) in enumerate(pages):
        url = "" if empty_uri else f"https://p.example/{i}"
        http = StatusAndHeaders("200 OK", [("Content-Type", mime)], protocol="HTTP/1.1")
        body = f"<html><body><p>{text}</p></body></html>".encode()
        rid = f"<urn:uuid:{i:08d}-0000-0000-0000-000000000000>"
        headers = {"WARC-Record-ID": rid, "WARC-Identified-Payload-Type": mime}
        record = writer.create_warc_record(
            url,
            rec_type,
            payload=io.BytesIO(body),
            http_headers=http if rec_type == "response" else None,
            warc_headers_dict=headers,
        )
        if container == "zst":
            one = io.BytesIO()
            WARCWriter(one, gzip=False).write_record(record)
            raws.append(one.getvalue())
        else:
            writer.write_record(record)
        if rec_type == "response" and mime == "text/html" and not empty_uri:
            expected.append(headers["WARC-Record-ID"])
    data = b"".join(hw._zstd(r) for r in raws) if container == "zst" else buf.getvalue()
    return data, expected


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pages=st.lists(_page, min_size=1, max_size=8), container=st.sampled_from(["gz", "warc", "zst"]))
def test_records_written_by_warcio_round_trip(pages: list[tuple], container: str, tmp_path: Path) -> None:
    data, expected = _write(pages, container)
    path = tmp_path / f"rt{hw.SUFFIX[container]}"
    path.write_bytes(data)
    counts: Counter = Counter()
    reader = RobustWarcReader(str(tmp_path), glob_pattern=path.name)
    reader.stat_update = lambda *keys, value=1, unit=None: counts.update({k: value for k in keys})
    docs = list(reader.run(None, 0, 1))
    assert [d.id for d in docs] == expected
    assert counts["records"] == len(pages) and not any(counts[k] for k in LOSSES), counts
    assert all(d.text.startswith("<html><body><p>") for d in docs)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    container=st.sampled_from(["gz", "warc", "zst"]),
    edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=6),
    cut=st.one_of(st.none(), st.floats(0, 1)),
    prefix=st.binary(max_size=64).filter(lambda b: not any(m in b for m in (b"\x1f\x8b", b"WARC/", b"\x28\xb5"))),
)
def test_random_corruption_never_raises_and_is_accounted(
    container: str, edits: list[tuple[float, int]], cut: float | None, prefix: bytes, tmp_path: Path
) -> None:
    _check(_corrupted(container, edits, cut, prefix), tmp_path)


def test_two_members_with_destroyed_magic_are_each_counted(tmp_path: Path) -> None:
    """Found by the property above with random examples: both lost members count as a loss, not one."""
    result = _check(_corrupted("gz", [(0.0, 0), (0.109375, 0)], None, b""), tmp_path)
    assert result["losses"]["garbage_bytes"] == 2


def _corrupted(container: str, edits: list[tuple[float, int]], cut: float | None, prefix: bytes) -> hw.Case:
    """The last real seed's first 8 records in ``container``, bytes overwritten at ``edits``, cut, prefixed."""
    seed = hw.load_seed(hw.seed_paths()[-1])
    records, ids = list(seed.records[:8]), list(seed.ids[:8])
    data, spans = hw.encode(records, container)
    buf = bytearray(data)
    positions = [int(at * len(buf)) for at, _ in edits]
    for p, (_, value) in zip(positions, edits, strict=True):
        buf[p] = value
    kept = ids
    if cut is not None:
        end = int(cut * len(buf))
        buf = buf[:end]
        positions.append(end)
        kept = [rid for (a, _), rid in zip(spans, ids, strict=True) if a < end]
    damaged = hw._hit(spans, ids, positions) & set(kept)
    if prefix:
        damaged |= set(kept[:1])  # a prefix may complete a broken first header or magic
    return hw.Case("hypothesis", "h" + hw.SUFFIX[container], prefix + bytes(buf), kept, damaged)


def test_junk_spelling_a_zstd_skippable_frame_does_not_hide_the_gzip_members(tmp_path: Path) -> None:
    """Found by the property above: 4 junk bytes that read as the warc-zstd dictionary frame's magic made a
    whole .warc.gz read as zstd (0 records, 0 losses); now the gzip members are read and the junk counted."""
    result = _check(_corrupted("gz", [], None, b"]*M\x18"), tmp_path)
    assert result["losses"]["garbage_bytes"] == 1 and result["read_ids"]


def test_a_prefix_does_not_hide_a_member_whose_magic_was_destroyed(tmp_path: Path) -> None:
    """Found by the property above: one junk byte, then the first member with its magic destroyed, then the
    second member broken inside: both records lost and one loss counted (the destroyed member was looked for
    only where the junk starts). Now the junk, the destroyed member and the broken one count one each."""
    result = _check(_corrupted("gz", [(0.0, 0), (0.109375, 0)], None, b"\x00"), tmp_path)
    assert result["losses"]["garbage_bytes"] == 3, result["losses"]
