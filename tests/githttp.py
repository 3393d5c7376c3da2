"""Real git over HTTP for tests: ``git http-backend`` behind Basic auth on loopback.

``GitHttpServer`` serves the bare repositories under ``root`` with git's own smart-HTTP CGI
program, answers 401 to any request without the right user name and password (so a
credential is really needed), and can be told to ``hang``: it then accepts connections and
never answers, as a remote that stopped responding does. ``CmdlineWatch`` polls every
process's ``/proc/<pid>/cmdline`` while a test runs, to show a secret never reaches one.
"""

from __future__ import annotations

import base64
import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

USER = "alice"
PASSWORD = "s3cr3t-Pa55w0rd-for-tests"


class GitHttpServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path, *, user: str = USER, password: str = PASSWORD) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root
        self.user, self.password = user, password
        self.hang = threading.Event()
        """Set: accept every connection and never answer."""
        self._released = threading.Event()
        self.requests: list[tuple[str, bool]] = []
        """(path, authorized) of every request answered."""
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def url(self, repo: str = "state.git", *, credentials: bool = True) -> str:
        """``http://user:password@127.0.0.1:port/repo`` (or without the userinfo)."""
        host = self.base.removeprefix("http://")
        auth = f"{self.user}:{self.password}@" if credentials else ""
        return f"http://{auth}{host}/{repo}"

    def authorized(self, header: str | None) -> bool:
        expected = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        return header == f"Basic {expected}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._released.set()  # handlers held by ``hang`` return and close
        self.shutdown()
        self.server_close()
        self._thread.join(10)


class _Handler(BaseHTTPRequestHandler):
    server: GitHttpServer

    def log_message(self, format: str, *args: object) -> None:  # quiet tests
        del format, args

    def handle(self) -> None:
        if self.server.hang.is_set():
            self.server._released.wait()  # connection accepted, never a byte back
            return
        super().handle()

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self._serve()

    def do_POST(self) -> None:  # noqa: N802
        self._serve()

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _serve(self) -> None:
        ok = self.server.authorized(self.headers.get("Authorization"))
        self.server.requests.append((self.path, ok))
        if not ok:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = self._body()
        parts = urlsplit(self.path)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.server.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": parts.path,
            "QUERY_STRING": parts.query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": self.server.user,  # enables receive-pack (push)
            "REMOTE_ADDR": self.client_address[0],
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
        }
        out = subprocess.run(
            ["git", "http-backend"],
            input=body,
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        ).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = out.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.split()[0])
            elif key:
                headers.append((key, value.strip()))
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@contextmanager
def git_http(root: Path, *, user: str = USER, password: str = PASSWORD) -> Iterator[GitHttpServer]:
    """A running server for the bare repositories under ``root``."""
    server = GitHttpServer(root, user=user, password=password)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class CmdlineWatch:
    """Polls every process's command line in a thread; ``hits`` are those holding a secret,
    ``seen`` those holding ``marker`` (proof the watch saw the processes of interest)."""

    def __init__(self, secrets: list[str], marker: str) -> None:
        self.secrets, self.marker = secrets, marker
        self.hits: list[str] = []
        self.seen: set[str] = set()
        self.polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.polls += 1
            for proc in Path("/proc").iterdir():  # this process too
                if not proc.name.isdigit():
                    continue
                try:
                    raw = (proc / "cmdline").read_bytes()
                except OSError:
                    continue
                line = raw.replace(b"\0", b" ").decode(errors="replace")
                if any(s in line for s in self.secrets):
                    self.hits.append(line)
                if self.marker in line:
                    self.seen.add(line)

    def __enter__(self) -> CmdlineWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
