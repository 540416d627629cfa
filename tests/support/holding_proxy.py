"""A TCP proxy on 127.0.0.1 that freezes one chosen request in flight, for kill tests at a deterministic point.

Catching "a checkpoint uploaded without its manifest" by polling a listing is a race: on a loaded machine the
window between the last data object and the manifest can pass between two polls, every time. This proxy sits
between a client and the S3 server and forwards every byte unchanged, except that the request whose request
line is the ``let_through + 1``-th to match ``pattern`` is held: its bytes from the request line on are never
forwarded, so the server never sees it and the client waits. ``held`` is set then, and the test kills the
client at exactly that point. The proxy stops what it started: its listening socket, connections and threads.
"""

from __future__ import annotations

import re
import socket
import threading

from tests.support.s3_server import free_port

_TAIL = 1024  # bytes kept from the previous read, so that a request line split over two reads still matches


class HoldingProxy:
    """Forward 127.0.0.1:``port`` to 127.0.0.1:``upstream``, holding the (``let_through`` + 1)-th request whose
    request line matches ``pattern`` (bytes, e.g. ``rb"PUT /[^ ]*/checksums\\.json "``) and all after it."""

    def __init__(self, upstream: int, pattern: bytes, let_through: int) -> None:
        self.upstream, self.pattern, self.let_through = upstream, re.compile(pattern), let_through
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.held = threading.Event()
        self.matched: list[bytes] = []  # every matching request line, in order, forwarded or held
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self._stopped = threading.Event()

    def start(self) -> HoldingProxy:
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            sockets = [*self._sockets, *([self._listener] if self._listener else [])]
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def __enter__(self) -> HoldingProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._client_to_server, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            self._close_write(sink)

    def _client_to_server(self, client: socket.socket, server: socket.socket) -> None:
        tail = b""
        try:
            while data := client.recv(65536):
                hold_at = self._hold_offset(tail, data)
                if hold_at is not None:
                    server.sendall(data[:hold_at])  # the end of an earlier request; the held one never leaves
                    self.held.set()
                    while client.recv(65536):  # keep the connection open, forward nothing more
                        pass
                    return
                server.sendall(data)
                tail = (tail + data)[-_TAIL:]
        except OSError:
            pass
        finally:
            self._close_write(server)

    def _hold_offset(self, tail: bytes, data: bytes) -> int | None:
        """Where in ``data`` the request to hold begins, counting only matches that end in ``data``."""
        for match in self.pattern.finditer(tail + data):
            if match.end() <= len(tail):
                continue  # counted with the previous read
            with self._lock:
                self.matched.append(match.group(0))
                if len(self.matched) > self.let_through:
                    return max(0, match.start() - len(tail))
        return None

    @staticmethod
    def _close_write(sock: socket.socket) -> None:
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
