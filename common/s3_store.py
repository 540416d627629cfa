"""s3fs without the look-ups a run directory does not need: what ``s3://`` URLs open (``common.storage``).

Measured on ``bench.object_store`` (moto's request log), s3fs spent a third of a sample run's requests on
questions whose answer the run already has:

- ``makedirs`` before every file opened for writing (datatrove's ``DataFolder`` asks it for each output,
  stats file, log and completion marker) sends a HEAD for the bucket each time, listings not being cached
  (``common.storage``): S3 has no folders, so once a bucket is known to exist nothing is left to make. Known
  to the process (and the task processes it forks), not to one file system instance: each task's own instance
  asked again (``check_store``'s listing counts too).
- ``isfile`` / ``size`` of a key that does not exist (a completion marker not yet written, an output about
  to be computed) go through ``info``, which after the HEAD's 404 lists the prefix to find a "directory":
  a folder is never a file and has no size, so one HEAD answers both.
- opening a file to read sends a HEAD for its ETag (s3fs pins each range read to it) even when the caller
  knows the size: a caller whose files check themselves (the dedup record files: header, footer, size and
  a checksum of the records) passes ``details={"size": ...}`` and the file opens without it.
- reading a small object whole (``cat_file``) sends a HEAD for its size first (s3fs would split a big one
  into concurrent range reads): ``small_read_options`` make it one GET (``common.storage.read_matching``).
- botocore sends every PUT with a body as ``Expect: 100-continue``: the headers, then the body only once the
  store answered ``100 Continue``, a second round trip for each PUT (measured with ``bench.object_store
  --latency-ms``: at 30 ms a stats file took ~70 ms). A body of at most ``SMALL_BODY`` goes with its headers;
  the store refusing it (rare: credentials, a redirect) costs sending it once in vain, not a round trip each.

Reads, writes, listings and their consistency are s3fs's own; only these answers skip requests. And the
file systems of one process (and of the task processes it forks) share one botocore session, and the TLS
contexts of their HTTP sessions: aiobotocore builds one for each client and loads the CA bundle into it, ~25 ms
of CPU a client (a run makes 7: the driver's checks and file system, each pool worker's), measured.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import aiobotocore.session
from aiobotocore.httpsession import AIOHTTPSession
from botocore.utils import determine_content_length
from s3fs import S3FileSystem

_SHARED: list[aiobotocore.session.AioSession] = []
# (endpoint, bucket) of the buckets this process (or the one that forked it) found or made: a bucket does not
# go away during a run, and each new file system instance (a task's, a forked worker's) asked again
_BUCKETS_SEEN: set[tuple[str, str]] = set()
_TLS: dict[tuple, tuple] = {}  # (verify, client certificate, key) -> aiobotocore's (TLS context, proxy's: None)
_TLS_LOCK = threading.Lock()
SMALL_BODY = 8 << 20  # a PUT body sent without waiting for "100 Continue" (bytes)


def send_small_bodies_at_once(params: dict, **_: Any) -> None:
    """A botocore ``before-call`` handler, after botocore's own: drop ``Expect: 100-continue`` from a request
    whose body is at most ``SMALL_BODY`` bytes."""
    headers = params.get("headers", {})
    if headers.get("Expect") == "100-continue":
        size = determine_content_length(params.get("body"))
        if size is not None and size <= SMALL_BODY:
            del headers["Expect"]


def shared_session() -> aiobotocore.session.AioSession:
    """One botocore session per process, and inherited by the processes it forks: a client made from it
    reuses the S3 service model and endpoint rules the session already loaded (a fresh session reads and
    parses them again: 0.2 to 0.4 s of CPU for each task process's first request, measured)."""
    if not _SHARED:
        _SHARED.append(aiobotocore.session.AioSession())
    return _SHARED[0]


def reset_shared_session() -> None:
    """Forget the shared session (its credentials and endpoint came from the environment of its time), and the
    buckets seen (a store emptied since)."""
    _SHARED.clear()
    _BUCKETS_SEEN.clear()


class SharedTLSSession(AIOHTTPSession):
    """aiobotocore's HTTP session, with its TLS context built once per process for the same verify and client
    certificate settings (and inherited by the processes it forks): an ``ssl.SSLContext`` serves any number
    of connections. Built as aiobotocore builds it; a proxy's is built each time, as before."""

    def _build_ssl_contexts(self, proxy_url: str | None) -> tuple:
        if proxy_url:
            return super()._build_ssl_contexts(proxy_url)
        key = (self._verify, self._cert_file, self._key_file)
        with _TLS_LOCK:
            if key not in _TLS:
                _TLS[key] = super()._build_ssl_contexts(proxy_url)
            return _TLS[key]


class RunStoreS3FileSystem(S3FileSystem):
    """``S3FileSystem`` that remembers the buckets it saw, answers ``isfile`` / ``size`` with one HEAD, and
    opens a file to read with the ``details`` its caller already has."""

    accepts_open_details = True  # ``open(path, "rb", details={"name": ..., "size": ...})``
    # ``cat_file`` options for a small object read whole (stats, markers): one GET; s3fs's default first asks
    # the size (a HEAD) to decide on a concurrent download of a big one
    small_read_options = {"max_concurrency": 1}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.session is None and not self.kwargs:  # no session or profile of the caller's
            self.session, self._session_is_owned = shared_session(), False

    def _prepare_config_kwargs(self) -> dict:
        """s3fs's client settings, the HTTP session ``SharedTLSSession`` unless the caller named one."""
        return {"http_session_cls": SharedTLSSession, **super()._prepare_config_kwargs()}

    async def set_session(self, refresh: bool = False, kwargs: dict | None = None) -> Any:
        client = await super().set_session(refresh, kwargs or {})
        client.meta.events.register_last(
            "before-call.s3", send_small_bodies_at_once, unique_id="run-store-small-bodies"
        )  # once per client (the id), after botocore's handler that adds the header
        return client

    def _seen(self, bucket: str) -> tuple[str, str]:
        """``bucket`` as ``_BUCKETS_SEEN`` names it: with the endpoint this file system sends its requests to."""
        endpoint = self.endpoint_url or self.client_kwargs.get("endpoint_url")
        return str(endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")), bucket

    def saw_bucket(self, bucket: str) -> None:
        """``bucket`` answered (``common.storage.check_store`` listed it): no file written into it asks again."""
        _BUCKETS_SEEN.add(self._seen(bucket))

    async def _mkdir(self, path: str, acl: Any = False, create_parents: bool = True, **kwargs: Any) -> None:
        bucket, key, _ = self.split_path(self._strip_protocol(path).rstrip("/"))
        if key and self._seen(bucket) in _BUCKETS_SEEN:
            return  # a "folder" in a bucket that exists: nothing to create on S3
        await super()._mkdir(path, acl=acl, create_parents=create_parents, **kwargs)
        _BUCKETS_SEEN.add(self._seen(bucket))

    async def _makedirs(self, path: str, exist_ok: bool = False) -> None:
        try:
            await self._mkdir(path, create_parents=True)
        except FileExistsError:
            _BUCKETS_SEEN.add(self._seen(self.split_path(self._strip_protocol(path))[0]))
            if not exist_ok:
                raise

    async def _object_info(self, path: str) -> dict:
        """The object's ``info`` by one HEAD; FileNotFoundError when there is no object at that key (a
        prefix of other keys included: that is a folder, not a file)."""
        bucket, key, version_id = self.split_path(self._strip_protocol(path))
        if not key:
            raise FileNotFoundError(path)
        if self.version_aware or version_id:
            return await self._info(path)
        out = await self._call_s3("head_object", self.kwargs, Bucket=bucket, Key=key)
        return {"name": f"{bucket}/{key}", "size": out["ContentLength"], "type": "file", "ETag": out.get("ETag", "")}

    async def _isfile(self, path: str) -> bool:
        try:
            return (await self._object_info(path))["type"] == "file"
        except FileNotFoundError:
            return False

    async def _size(self, path: str) -> int:
        return (await self._object_info(path))["size"]

    def files_under(self, path: str, detail: bool = False) -> Any:
        """The keys below the folder ``path`` (full names, sorted) by one listing; none when there are none;
        ``detail``: by name, with the listing's details (size, ETag). ``find`` lists the same, then, finding
        nothing, asks whether ``path`` is itself a file (a HEAD and another listing): the run asks it of every
        stage's completions, which a first run finds empty."""
        parent, _, name = self._strip_protocol(path).rstrip("/").rpartition("/")
        found = self.find(parent, prefix=f"{name}/", detail=detail) if parent else self.find(name, detail=detail)
        return dict(sorted(found.items())) if detail else sorted(found)

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        details = kwargs.pop("details", None)
        handle = super()._open(path, mode=mode, **kwargs)
        if details is not None and "r" in mode:
            handle.details = {"name": handle.path, **details}  # no HEAD for it (s3fs asks on the first read)
        return handle
