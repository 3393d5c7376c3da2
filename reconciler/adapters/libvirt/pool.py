"""One libvirt connection per host, kept open for a whole command and shared by its adapters.

The observer, the migrator and the recorder of one command (``apply``, ``drain --apply``, a
round of ``run``) ask the pool for a host's connection instead of opening their own: it is
opened on first use (``open_connection``: bounded by the connect timeout, with keepalive on the
process's libvirt event loop), reused by every later call, reopened once when libvirt says it
broke, and closed when the command ends (``close()``, or leaving ``with``).

libvirt connections may be used from several threads at once (the remote driver multiplexes
calls over one socket), so the observer, the recorder and the migrator's checks share a host's
connection; the pool only serialises opening it. A migration and its watcher take a connection
of their own (``dedicated``): on a connection where a migration's job is being read, libvirt
holds other calls until that reading returns, which near a migration's end is 100-250 ms, and
those calls are the next move's intent and the looks admission waits for. Dedicated
connections are kept for the next migration from that host and closed with the pool.
Keepalive bounds every call on an open connection: a host that stops answering fails its
calls within ``keepalive_interval x keepalive_count`` seconds, and its connection is reopened
on the next use.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, TypeVar

import libvirt

from reconciler.adapters.libvirt.connection import (
    ConnectionSettings,
    close_connection,
    is_broken,
    open_connection,
)
from reconciler.errors import ConfigError

T = TypeVar("T")


class ConnectionPool:
    """Open connections by host name; ``uris`` maps each host to its libvirt URI."""

    def __init__(self, uris: Mapping[str, str], settings: ConnectionSettings | None = None) -> None:
        self.uris = dict(uris)
        self.settings = settings or ConnectionSettings()
        self._lock = threading.Lock()
        self._host_locks: dict[str, threading.Lock] = {}
        self._conns: dict[str, Any] = {}
        self._idle: dict[str, list[Any]] = {}
        """Dedicated connections no migration uses now, by host."""
        self._retired: list[Any] = []
        """Dedicated connections a call may still be using: closed with the pool."""
        self._closed = False
        self.opened = 0
        """Connections opened so far (reopenings included): for tests and benchmarks."""

    def uri(self, host: str) -> str:
        try:
            return self.uris[host]
        except KeyError:
            raise ConfigError(
                f"host {host} is not in the cluster",
                hint="observe and plan again against the current cluster.yaml",
            ) from None

    def _host_lock(self, host: str) -> threading.Lock:
        with self._lock:
            return self._host_locks.setdefault(host, threading.Lock())

    def get(self, host: str) -> Any:
        """The open connection to ``host``, opened now if there is none or it is no longer
        alive; HostUnreachable/HostTimeout when it cannot be opened."""
        uri = self.uri(host)
        with self._host_lock(host):
            conn = self._conns.get(host)
            if conn is not None and _alive(conn):
                return conn
            if conn is not None:
                self._drop(host, conn)
            if self._closed:
                raise RuntimeError("the connection pool is closed")
            conn = open_connection(uri, self.settings)
            self._conns[host] = conn
            self.opened += 1
            return conn

    @staticmethod
    def alive(conn: Any) -> bool:
        return _alive(conn)

    def broken(self, host: str, conn: Any) -> None:
        """Forget ``conn`` (it failed): the next ``get`` opens a new one."""
        with self._host_lock(host):
            if self._conns.get(host) is conn:
                self._drop(host, conn)

    def _drop(self, host: str, conn: Any) -> None:
        self._conns.pop(host, None)
        close_connection(conn)

    def call(self, host: str, fn: Callable[[Any], T]) -> T:
        """``fn(conn)`` on the host's connection; when the connection turns out broken, once
        more on a new one. Only for calls that may be repeated (lookups, metadata writes)."""
        conn = self.get(host)
        try:
            return fn(conn)
        except libvirt.libvirtError as err:
            if _alive(conn) and not is_broken(err):
                raise
            self.broken(host, conn)
        return fn(self.get(host))

    @contextlib.contextmanager
    def dedicated(self, host: str) -> Iterator[Any]:
        """A connection to ``host`` that no other caller uses until the block ends: an idle
        one kept from an earlier block, or a new one (HostUnreachable/HostTimeout when it
        cannot be opened). It is kept for the next block unless it broke or the pool closed."""
        uri = self.uri(host)
        conn = None
        stale: list[Any] = []
        with self._lock:
            if self._closed:
                raise RuntimeError("the connection pool is closed")
            idle = self._idle.get(host, [])
            while idle and conn is None:
                candidate = idle.pop()
                if _alive(candidate):
                    conn = candidate
                else:
                    stale.append(candidate)
        for broken in stale:  # outside the lock: closing may wait on the host
            close_connection(broken)
        if conn is None:
            conn = open_connection(uri, self.settings)
            with self._lock:
                self.opened += 1
        try:
            yield conn
        finally:
            with self._lock:
                retired = any(c is conn for c in self._retired)
                keep = not retired and not self._closed and _alive(conn)
                if keep:
                    self._idle.setdefault(host, []).append(conn)
            if not keep and not retired:
                close_connection(conn)

    def retire(self, conn: Any) -> None:
        """``conn``, a dedicated connection, is not lent again: a call on it has not returned
        (a migration libvirt did not end). It is closed with the pool, not before, so that
        call is not cut off."""
        with self._lock:
            self._retired.append(conn)

    def close(self) -> None:
        """Close every connection; later ``get`` calls fail. A dedicated connection still in
        use is closed when its block ends."""
        with self._lock:
            self._closed = True
            conns, self._conns = self._conns, {}
            idle, self._idle = self._idle, {}
            retired, self._retired = self._retired, []
        for conn in [*conns.values(), *(c for cs in idle.values() for c in cs), *retired]:
            close_connection(conn)

    def __enter__(self) -> ConnectionPool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _alive(conn: Any) -> bool:
    """libvirt's own idea of the connection (local, no call to the host)."""
    with contextlib.suppress(libvirt.libvirtError):
        return bool(conn.isAlive())
    return False
