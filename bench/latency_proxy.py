"""A TCP proxy on 127.0.0.1 that gives each HTTP request a round trip of N ms: a remote store, seen from here.

The S3 server of the benches (moto on 127.0.0.1) answers in 1-2 ms and costs the client no network time; a
real bucket is 10-30 ms away. ``LatencyProxy`` sits between the client and the server and forwards every byte
unchanged, holding back the first bytes of each request for ``latency_ms`` (a request begins when the client
sends after the server's last answer on that connection: HTTP/1.1 clients do not pipeline; a PUT's body sent
after the server's ``100 Continue`` is one more round trip, as on a real store). So a run's serial requests wait
N ms each, concurrent ones overlap, as against a far store; bandwidth is not limited. Connection set-up is not
charged: the S3 server keeps a connection open for the client's next request, as a real store does, and a real
store's first TCP + TLS handshakes (2-3 round trips per connection of a client's pool) are left out. It also
records each request's first line and the time it left, to see which ones a run sends one after another. It runs
its own event loop in a thread and stops what it started.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time

REQUEST_LINE = re.compile(rb"[A-Z]+ \S+ HTTP/1\.[01]\r\n")


class LatencyProxy:
    """Forward 127.0.0.1:``port`` to 127.0.0.1:``upstream``, each request ``latency_ms`` later."""

    def __init__(self, upstream: int, latency_ms: float) -> None:
        self.upstream, self.delay = upstream, latency_ms / 1000.0
        self.port = 0  # chosen by the system when it starts
        self.sent: list[tuple[float, int, str]] = []  # (time.monotonic() it left, connection, request line)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="latency-proxy")
        self._server: asyncio.base_events.Server | None = None
        self._connections = 0
        self._live: set[asyncio.Task] = set()  # the connections' tasks (the loop holds tasks only weakly)

    def start(self) -> LatencyProxy:
        self._thread.start()
        start = asyncio.start_server(self._serve, "127.0.0.1", 0)
        self._server = asyncio.run_coroutine_threadsafe(start, self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Close the listener and every connection, then end the loop's thread."""
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
            self._server = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> LatencyProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _close(self) -> None:
        assert self._server is not None
        self._server.close()
        while tasks := [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _serve(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        self._connections += 1
        connection, task = self._connections, asyncio.current_task()
        if task is not None:
            self._live.add(task)
            task.add_done_callback(self._live.discard)
        try:
            server_in, server_out = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            client_out.close()
            return
        answered = asyncio.Event()  # the server answered since the client last sent: its next bytes are a request
        answered.set()
        try:
            await asyncio.gather(
                self._requests(client_in, server_out, answered, connection),
                self._answers(server_in, client_out, answered),
            )
        except asyncio.CancelledError:
            pass  # stopped
        finally:
            for writer in (client_out, server_out):
                writer.close()

    async def _requests(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, answered: asyncio.Event, connection: int
    ) -> None:
        try:
            while data := await source.read(65536):
                if answered.is_set():  # a new request: its round trip
                    answered.clear()
                    await asyncio.sleep(self.delay)
                    line = data.split(b"\r\n", 1)[0] if REQUEST_LINE.match(data) else b"(body after 100 Continue)"
                    self.sent.append((time.monotonic(), connection, line.decode("latin-1")))
                sink.write(data)
                await sink.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            if sink.can_write_eof():
                sink.write_eof()

    @staticmethod
    async def _answers(source: asyncio.StreamReader, sink: asyncio.StreamWriter, answered: asyncio.Event) -> None:
        try:
            while data := await source.read(65536):
                answered.set()
                sink.write(data)
                await sink.drain()
        except OSError:
            pass
        finally:
            sink.close()


def main(argv: list[str] | None = None) -> None:
    """``python -m bench.latency_proxy UPSTREAM_PORT LATENCY_MS``: the proxy in a process of its own (its work
    off the process it measures, as moto's is), its port printed on a line; it stops when its stdin closes."""
    import sys

    from common.cli import ArgumentParser, integer, real

    parser = ArgumentParser(prog="python -m bench.latency_proxy", description=__doc__.splitlines()[0])
    parser.add_argument("upstream_port", type=integer(1, 65535), help="the S3 server's port on 127.0.0.1")
    parser.add_argument("latency_ms", type=real(0, 10_000), help="the round trip each request is given")
    args = parser.parse_args(argv)
    with LatencyProxy(args.upstream_port, args.latency_ms) as proxy:
        print(proxy.port, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
