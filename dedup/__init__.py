"""MinHash-LSH deduplication as datatrove pipeline steps; see dedup/README.md.

Entry points: ``dedup.pipeline.build_dedup_stages`` (for ``pipelines.run``), ``python -m dedup.run``.
"""
