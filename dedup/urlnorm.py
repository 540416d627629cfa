"""URL normalisation and capture time: what URL dedup keys and ranks documents by.

Kept apart from ``dedup.urls`` (the clustering stage) so the keyers can import it without a cycle.
"""

from __future__ import annotations

from datetime import datetime
from urllib.parse import urlsplit, urlunsplit

URL_BANDS = 2  # band 0: normalised-URL key, band 1: capture time (seconds since 1970)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalize_url(url: str) -> str:
    """Scheme and host lowercased, default port and fragment dropped, an empty path made "/":
    spellings of one address that servers treat alike. Path and query keep their case."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return url.strip()
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").rstrip(".")
    netloc = host if port in (None, _DEFAULT_PORTS.get(scheme)) else f"{host}:{port}"
    if parts.username:
        netloc = f"{parts.username}@{netloc}"
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))


def capture_time(date: object) -> int:
    """WARC-Date (ISO 8601) -> seconds since 1970; 0 when missing or unreadable (oldest)."""
    if not date:
        return 0
    try:
        return max(0, int(datetime.fromisoformat(str(date).replace("Z", "+00:00")).timestamp()))
    except ValueError:
        return 0
