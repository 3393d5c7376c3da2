"""A small HTTP server on loopback that answers as Prometheus's HTTP API does
(``/api/v1/query_range`` and ``/api/v1/query``, JSON), and as a broken one may.

``FakePrometheus`` answers every query with what ``answer(query)`` returns (a JSON object);
set ``trickle`` to send the whole answer (status line, headers and body) one byte every
``trickle`` seconds, ``trickle_body`` to send the headers at once and then the body so, or
``flood`` to answer an endless matrix of that many bytes at most. ``sent`` counts the bytes of
bodies the clients took, ``queries`` the queries asked.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

Answer = Callable[[str], dict[str, Any]]


def matrix(*series: tuple[dict[str, str], Sequence[tuple[float, object]]]) -> dict[str, Any]:
    """A successful range query's answer: ``(labels, [(time, value), ...])`` per series."""
    return {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {"metric": labels, "values": [[t, str(v)] for t, v in points]}
                for labels, points in series
            ],
        },
    }


def _empty(query: str) -> dict[str, Any]:
    return matrix()


class FakePrometheus(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, answer: Answer = _empty) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answer = answer
        self.trickle: float | None = None
        """Seconds between the bytes of the whole answer, headers included."""
        self.trickle_body: float | None = None
        """Seconds between the bytes of the body (the headers come at once)."""
        self.flood: int | None = None
        """Answer an endless matrix, stopping after this many bytes."""
        self.lasting = 30.0
        """No answer is sent for longer than this (so a test that fails ends)."""
        self.sent = 0
        self.queries: list[dict[str, list[str]]] = []
        self.stopped = threading.Event()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.stopped.set()
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: FakePrometheus

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        url = urlsplit(self.path)
        params = parse_qs(url.query)
        self.server.queries.append(params)
        if url.path not in ("/api/v1/query_range", "/api/v1/query"):
            self.send_error(404)
            return
        if self.server.flood is not None:
            self._flood(self.server.flood)
            return
        body = json.dumps(self.server.answer(params.get("query", [""])[0])).encode()
        head = (
            f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        try:
            if self.server.trickle is not None:
                self._slowly(head + body, self.server.trickle)
            elif self.server.trickle_body is not None:
                self.wfile.write(head)
                self.wfile.flush()
                self._slowly(body, self.server.trickle_body)
            else:
                self.wfile.write(head + body)
                self.server.sent += len(body)
        except OSError:
            pass
        self.close_connection = True

    def _slowly(self, data: bytes, every: float) -> None:
        ends = time.monotonic() + self.server.lasting
        for i in range(len(data)):
            if self.server.stopped.is_set() or time.monotonic() > ends:
                return
            self.wfile.write(data[i : i + 1])
            self.wfile.flush()
            self.server.sent += 1
            time.sleep(every)

    def _flood(self, limit: int) -> None:
        head = b'{"status":"success","data":{"resultType":"matrix","result":['
        series = b'{"metric":{"domain":"vm"},"values":[[1,"1"]]},' * 1024
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Connection", "close")
        self.end_headers()
        ends = time.monotonic() + self.server.lasting
        try:
            self.wfile.write(head)
            while self.server.sent < limit and time.monotonic() < ends:
                if self.server.stopped.is_set():
                    return
                self.wfile.write(series)
                self.server.sent += len(series)
        except OSError:
            pass
        self.close_connection = True


@contextmanager
def fake_prometheus(answer: Answer = _empty) -> Iterator[FakePrometheus]:
    server = FakePrometheus(answer)
    server.start()
    try:
        yield server
    finally:
        server.stop()
