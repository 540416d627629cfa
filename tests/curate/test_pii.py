"""The PII step, which tries datatrove's patterns only on text that can hold a match, formats exactly as
datatrove's ``PIIFormatter``: the same text, and the same rotation of replacements across documents."""

from __future__ import annotations

import pytest
from datatrove.pipeline.formatters import PIIFormatter
from hypothesis import given, settings
from hypothesis import strategies as st

from curate.pipeline import PIISteps
from tests.support import shared_data

PIECES = [
    "jane.doe@mail.example.com", "x@y.org", "a@[192.168.0.1]", "a@[IPv6:x]", "@", "@handle", "name@",
    "8.8.8.8", "10.0.0.1", "192.168.1.1", "1.1.1.1", "255.255.255.255", "256.1.1.1", "3.14", "v1.2.3",
    "127.0.0.1:8080", ".5", "5.", "word", "e-mail", "user.name", "\n", " ", ",", "(", ")",
]
texts = st.lists(st.sampled_from(PIECES), max_size=30).map(" ".join)


def format_all(formatter: PIIFormatter, documents: list[str]) -> list[str]:
    return [formatter.format(text) for text in documents]


@pytest.mark.parametrize("emails,ips", [(True, True), (True, False), (False, True)])
@settings(max_examples=150, deadline=None)
@given(documents=st.lists(texts, min_size=1, max_size=8))
def test_random_documents(documents: list[str], emails: bool, ips: bool) -> None:
    ours = format_all(PIISteps(remove_emails=emails, remove_ips=ips), documents)
    assert ours == format_all(PIIFormatter(remove_emails=emails, remove_ips=ips), documents)


def test_ground_truth_texts() -> None:
    shared_data.require()
    rows = [row for name in shared_data.EXTRACTION_SETS for row in shared_data.ground_truth(name)]
    documents = [row["text"] for row in rows if row.get("text")]
    documents += ["write to jane.doe@mail.example.com from 8.8.8.8"] * 3
    ours = format_all(PIISteps(), documents)
    assert ours == format_all(PIIFormatter(), documents)
    assert sum(a != b for a, b in zip(ours, documents, strict=True)) >= 3  # the patterns did replace
