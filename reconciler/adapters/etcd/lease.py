"""The lease of a cluster in etcd, reached through OpenStack's ``tooz`` (its ``etcd3gw`` driver).

For sites that already run etcd: ``etcd3+http://host:2379`` (or ``etcd3+https://...`` with
tooz's ``ca_cert``, ``cert_key`` and ``cert_cert`` query options). The key
``reconciler/lease/<cluster>`` holds the lease record (holder, acquire time, duration) and is
attached to an etcd lease of ``lease_duration`` seconds, so etcd itself deletes it when its
holder stops renewing. Taking it is a transaction that creates the key only if it does not
exist; renewing is a keep-alive of the etcd lease followed by a read of the key; releasing
revokes the etcd lease, which deletes the key at once, so a standby takes over on its next try.

tooz builds the client from the URL (driver, TLS options, API path; etcd 3.4 and later serve
``/v3/``) and its driver's client makes the calls. tooz's own lock is not used: its
``heartbeat()`` reports success even when etcd answers that the lease has expired, and its
value is a random token, so it could neither tell a lapsed lock from a held one nor name the
holder.

Every call to etcd has a deadline: a public method returns or raises ``TransientError`` within
``timeout`` seconds whatever etcd does (dead, paused, or answering slowly), waiting for another
thread's call included. While the lease is held, calls also end by the renew deadline, counted
on this process's monotonic clock from the moment the last successful renewal was *sent*, so
the lease is never taken for "still ours" past it: ``confirm()`` is False from then on until a
renewal succeeds again. The renew deadline (10 s) is shorter than the etcd lease (15 s), so
the holder stops before etcd may hand the lease to anyone else.
"""

from __future__ import annotations

import base64
import json
import math
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import requests
from etcd3gw import exceptions as etcd_errors
from etcd3gw.client import Etcd3Client
from etcd3gw.lease import Lease as EtcdLease
from tooz import ToozError, coordination

from reconciler.adapters.git.lease import LEASE_DURATION, RENEW_DEADLINE, default_identity
from reconciler.errors import TerminalError, TransientError

TIMEOUT = 5.0
"""The longest any call waits for etcd, in seconds."""

SCHEMES = ("etcd3+http", "etcd3+https")

RENEW_SLACK = 0.25
"""A renewal still unanswered at the renew deadline is given up this long after it: the
LeaseKeeper stamps a renewal a moment after this lease does, and must see its own deadline
passed when the call comes back."""


def lease_key(cluster: str) -> str:
    return f"reconciler/lease/{cluster}"


class ToozLease:
    """A Lease on ``cluster`` in the etcd cluster at ``url`` (``etcd3+http://host:2379``)."""

    def __init__(
        self,
        url: str,
        cluster: str,
        *,
        identity: str | None = None,
        lease_duration: float = LEASE_DURATION,
        renew_deadline: float = RENEW_DEADLINE,
        timeout: float = TIMEOUT,
    ) -> None:
        if renew_deadline >= lease_duration:
            raise TerminalError(
                f"renew deadline {renew_deadline}s must be shorter than the lease {lease_duration}s"
            )
        if timeout <= 0:
            raise TerminalError(f"the etcd timeout must be positive, not {timeout}s")
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in SCHEMES:
            raise TerminalError(
                f"unsupported coordination URL {url!r}",
                hint="use etcd3+http://HOST:2379 or etcd3+https://HOST:2379",
            )
        self.url = url
        self.where = f"etcd at {parts.hostname or 'localhost'}:{parts.port or 2379}"
        self.key = lease_key(cluster)
        self.me = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.timeout = timeout
        self.ttl = math.ceil(lease_duration)  # etcd counts whole seconds
        query = urllib.parse.parse_qs(parts.query)
        try:
            driver = coordination.get_coordinator(
                url,
                self.me.encode(),
                # whole seconds for tooz; each request below gets the time left instead
                timeout=max(1, math.ceil(timeout)),
                lock_timeout=self.ttl,
                membership_timeout=self.ttl,
                # etcd 3.4+ serves /v3/; naming it spares a discovery request
                api_version=query.get("api_version", ["v3"])[-1],
            )
        except (ToozError, RuntimeError, ValueError) as err:
            raise TerminalError(f"cannot use coordination URL {url!r}: {err}") from err
        client = getattr(driver, "client", None)
        if not isinstance(client, Etcd3Client):
            raise TerminalError(f"coordination URL {url!r} did not give an etcd client")
        self._client = client
        self._mutex = threading.Lock()
        self._deadline = 0.0
        self._lease_id: int | None = None
        self._record: bytes | None = None
        self._held = False
        self._renewed_at = 0.0

    # -- calls with a deadline -------------------------------------------------------------------

    @contextmanager
    def _call(self, what: str, *, until: float | None = None) -> Iterator[None]:
        """Hold the client for one method; every request inside gets only the time left."""
        start = time.monotonic()
        deadline = start + self.timeout
        if until is not None:
            deadline = min(deadline, until)
        if not self._mutex.acquire(timeout=max(0.0, deadline - start)):
            raise TransientError(
                f"{self.where}: {what}: another call held the client for {deadline - start:.1f}s"
            )
        try:
            self._deadline = deadline
            yield
        except etcd_errors.ConnectionTimeoutError as err:
            raise TransientError(
                f"{self.where}: {what}: no answer within {deadline - start:.1f}s"
            ) from err
        except etcd_errors.ConnectionFailedError as err:
            raise TransientError(f"{self.where}: {what}: unreachable ({_short(err)})") from err
        except (ToozError, etcd_errors.Etcd3Exception, requests.RequestException) as err:
            raise TransientError(f"{self.where}: {what} failed: {_short(err)}") from err
        except (KeyError, ValueError) as err:
            raise TransientError(f"{self.where}: {what}: unexpected answer ({err!r})") from err
        finally:
            self._mutex.release()

    def _budget(self, what: str) -> None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TransientError(f"{self.where}: {what} did not answer in time")
        self._client.timeout = left

    def _read(self) -> tuple[bytes, int] | None:
        """The key's value and the id of its etcd lease, or None when nobody holds it."""
        self._budget("read")
        got = self._client.get(self.key, metadata=True)
        if not got:
            return None
        value, meta = got[0]
        return value, int(meta.get("lease", 0))

    def _revoke(self, lease_id: int) -> None:
        self._budget("revoke")
        EtcdLease(lease_id, self._client).revoke()

    def _forget(self) -> None:
        self._lease_id = self._record = None
        self._held = False

    # -- the Lease port ------------------------------------------------------------------------

    def acquire(self) -> bool:
        until = None
        if self._held:
            until = self._renewed_at + self.renew_deadline + RENEW_SLACK
            if time.monotonic() >= until:  # lapsed on our clock: renew it only if etcd agrees
                self._held = False
                until = None
        with self._call("renewing the lease" if self._held else "taking the lease", until=until):
            if self._lease_id is not None and self._renew():
                return True
            return self._take()

    def _renew(self) -> bool:
        """Keep our etcd lease alive and check the key is still ours; False when lost."""
        assert self._lease_id is not None
        sent = time.monotonic()
        self._budget("keep-alive")
        ttl = EtcdLease(self._lease_id, self._client).refresh()
        if ttl <= 0:  # expired: etcd has deleted the key with it
            self._forget()
            return False
        got = self._read()
        if got is None or got != (self._record, self._lease_id):
            lease_id = self._lease_id
            self._forget()
            self._revoke(lease_id)
            return False
        self._held = True
        self._renewed_at = sent
        return True

    def _take(self) -> bool:
        if self._read() is not None:
            self._held = False
            return False
        sent = time.monotonic()
        self._budget("lease grant")
        lease = self._client.lease(self.ttl)
        record = json.dumps(
            {
                "holder": self.me,
                "acquireTime": datetime.now(UTC).isoformat(timespec="milliseconds"),
                "leaseDurationSeconds": self.ttl,
            },
            sort_keys=True,
        ).encode()
        key = _b64(self.key.encode())
        self._budget("transaction")
        result = self._client.transaction(
            {
                "compare": [
                    {"key": key, "result": "EQUAL", "target": "CREATE", "create_revision": 0}
                ],
                "success": [
                    {"request_put": {"key": key, "value": _b64(record), "lease": lease.id}}
                ],
                "failure": [],
            }
        )
        if result.get("succeeded") is not True:
            self._held = False
            self._revoke(lease.id)  # another instance created the key first
            return False
        self._lease_id, self._record = lease.id, record
        self._held = True
        self._renewed_at = sent
        return True

    def confirm(self) -> bool:
        """Renewed within the renew deadline and the key in etcd is still ours."""
        if not self._held:
            return False
        until = self._renewed_at + self.renew_deadline
        if time.monotonic() >= until:
            self._held = False
            return False
        with self._call("re-reading the lease", until=until):
            if self._read() == (self._record, self._lease_id):
                return True
        self._held = False
        return False

    def holder(self) -> str | None:
        with self._call("reading the lease holder"):
            got = self._read()
        if got is None:
            return None
        try:
            record: Any = json.loads(got[0])
        except json.JSONDecodeError:
            return "an unknown holder (the lease record is not JSON)"
        if not isinstance(record, dict) or not record.get("holder"):
            return "an unknown holder"
        return f"{record['holder']} (since {record.get('acquireTime')})"

    def release(self) -> None:
        """Revoke our etcd lease: etcd deletes the key with it, so a standby takes over at once."""
        lease_id = self._lease_id
        self._forget()
        if lease_id is None:
            return
        with self._call("releasing the lease"):
            self._revoke(lease_id)

    def close(self) -> None:
        """Close the client's connections (the lease itself is left as it is)."""
        with self._mutex:
            self._client.session.close()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _short(err: BaseException) -> str:
    detail = getattr(err, "detail_text", None)  # etcd3gw puts etcd's answer there
    text = str(detail or err).strip().splitlines()
    return text[0][:200] if text else type(err).__name__
