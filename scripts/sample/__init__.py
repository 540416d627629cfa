"""The generator of the bundled sample crawl (pipelines/sample/sample.warc.gz) and its original prose."""
