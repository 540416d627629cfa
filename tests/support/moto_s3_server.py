"""moto's S3 service over HTTP with keep-alive: the S3 server ``tests/support/s3_server.py`` starts.

    python -m tests.support.moto_s3_server -p PORT [-H 127.0.0.1] [--threads 16]   (from the repository root)

``python -m moto.server`` serves every moto service through werkzeug's development server, which about doubled
the CPU of a request, client and server together, on this machine's cores (``bench.object_store`` runs the
server beside the run it times; measured on 900 small requests, client and server CPU per request):

- werkzeug answers every request with ``Connection: close``, so the client opens a TCP connection for each one
  (~0.9 ms of the client's CPU, and a thread on the server), where a real store keeps the connections of a
  client's pool open;
- moto's all-services dispatcher finds the service of each request by listing moto's package folder and
  matching the host against every service's patterns, under one lock (~1 ms).

Here moto's own S3 app (``create_backend_app("s3")``: the same backend, routes and responses) and its
``/moto-api`` app (reset, the readiness check) are served by waitress, a threaded WSGI server that keeps
connections open and answers ``Expect: 100-continue``; bodies stay in memory (waitress and moto spool big
ones to temporary files). Each request is logged to stderr as werkzeug logs it
(``127.0.0.1 - - [date] "GET /bucket/key?query HTTP/1.1" 200 -``): the line the benches count requests by.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

WSGIApp = Callable[[dict, Callable], Iterable[bytes]]
BUFFER = 256 << 10  # bytes read from a socket at once (waitress: 8 KB)
BODY_IN_MEMORY = 256 << 20  # request and response bodies up to this size stay in memory (moto keeps them there too)


def logged(app: WSGIApp, stream: Any) -> WSGIApp:
    """``app``, each request written to ``stream`` as one werkzeug-style access line once it is answered (its
    target as werkzeug writes it: percent-escapes decoded, control characters escaped)."""
    from werkzeug.urls import uri_to_iri

    lock = threading.Lock()
    control = {c: f"\\x{c:02x}" for c in (*range(32), 127)}

    def wrapper(environ: dict, start_response: Callable) -> Iterable[bytes]:
        status: list[str] = []

        def recording(code: str, headers: list, exc_info: Any = None) -> Any:
            status.append(code.split(" ", 1)[0])
            return start_response(code, headers, exc_info)

        body = app(environ, recording)
        when = time.strftime("%d/%b/%Y %H:%M:%S")
        target = uri_to_iri(environ.get("REQUEST_URI", "")).translate(control)
        request = f"{environ['REQUEST_METHOD']} {target} {environ['SERVER_PROTOCOL']}"
        line = f'{environ.get("REMOTE_ADDR", "-")} - - [{when}] "{request}" {status[-1] if status else "-"} -\n'
        with lock:
            stream.write(line)
            stream.flush()
        return body

    return wrapper


def s3_app() -> WSGIApp:
    """moto's S3 app, with its ``/moto-api`` app beside it (moto's dispatcher sends that path there too)."""
    from moto.moto_server.werkzeug_app import create_backend_app

    s3, api = create_backend_app("s3"), create_backend_app("moto_api")
    s3.debug = api.debug = False  # moto turns Flask's debug checks on for every request

    def dispatch(environ: dict, start_response: Callable) -> Iterable[bytes]:
        return (api if environ.get("PATH_INFO", "").startswith("/moto-api") else s3)(environ, start_response)

    return dispatch


def main(argv: list[str] | None = None) -> None:
    from common.cli import ArgumentParser, errors_as_one_line, integer

    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=integer(1, 65535), required=True)
    parser.add_argument("--threads", type=integer(1, 1024), default=16, help="requests served at once (waitress's)")
    args = parser.parse_args(argv)
    # moto keeps an object's bytes in a temporary file past 5 MB: a shard's PUT then costs a disk write and a read
    os.environ.setdefault("MOTO_S3_DEFAULT_KEY_BUFFER_SIZE", str(BODY_IN_MEMORY))
    import waitress

    with errors_as_one_line(OSError, ValueError):  # a host that does not resolve, a port in use
        waitress.serve(
            logged(s3_app(), sys.stderr),
            host=args.host,
            port=args.port,
            threads=args.threads,
            recv_bytes=BUFFER,
            inbuf_overflow=BODY_IN_MEMORY,  # waitress's defaults spool a body over 512 KB / 1 MB to a temporary file
            outbuf_overflow=BODY_IN_MEMORY,
            _quiet=True,
        )


if __name__ == "__main__":
    main()
