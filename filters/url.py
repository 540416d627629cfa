"""datatrove's URL filter (bundled blocklists), made fully offline."""

from __future__ import annotations

from typing import Any

from datatrove.pipeline.filters import URLFilter


class OfflineURLFilter(URLFilter):
    """``URLFilter`` whose tldextract uses its bundled public-suffix snapshot, never the network.

    Stock ``URLFilter`` builds ``TLDExtract()``, which tries to download the suffix list on first use
    (and logs a traceback per attempt when offline) before falling back to the same snapshot.
    """

    name = "url"

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        from tldextract import TLDExtract

        self.tldextractor = TLDExtract(suffix_list_urls=(), cache_dir=None)
