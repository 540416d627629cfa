"""The bundled sample crawl: a small synthetic WARC shipped with the package for offline runs and tests.

``sample.warc.gz`` is written by :mod:`scripts.sample.make_sample` from original text in
:mod:`scripts.sample.texts`; each capture's ``metadata`` record labels what kind of page it is
(``sample-kind``), so tests can check what the pipeline kept and dropped.
"""

from __future__ import annotations

from pathlib import Path

SAMPLE_WARC: Path = Path(__file__).with_name("sample.warc.gz")
