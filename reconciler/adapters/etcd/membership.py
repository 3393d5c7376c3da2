"""The live instances of a fleet: a tooz group in etcd (``tooz/groups/<group>/<member>``).

Each instance joins the group with its identity; its member key is attached to an etcd lease
of ``ttl`` seconds that ``beat()`` keeps alive, so a member that dies (or loses etcd for longer
than that) leaves the group by itself. ``beat()`` joins again when the key is gone (after
etcd lost the member's lease) and returns the members it read. Every call has a deadline:
``beat()`` returns or raises ``TransientError`` within ``timeout`` seconds per step.

Each member's key holds where it runs (host and pid). An instance that finds its identity
already a live member at its first beat logs a warning naming that member: two instances with
one ``--identity`` share one member key and one place in the assignment (both try the same
clusters, the others' share grows), which no lease would ever show.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import urllib.parse
from typing import Any

from tooz import ToozError, coordination

from reconciler.adapters.etcd.lease import SCHEMES, TIMEOUT
from reconciler.errors import TerminalError, TransientError

GROUP = "reconciler-fleet"

log = logging.getLogger(__name__)


class ToozMembership:
    """This instance's membership of the fleet's group at ``url``."""

    def __init__(
        self,
        url: str,
        me: str,
        *,
        group: str = GROUP,
        ttl: float = 15.0,
        timeout: float = TIMEOUT,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in SCHEMES:
            raise TerminalError(
                f"unsupported coordination URL {url!r}",
                hint="use etcd3+http://HOST:2379 or etcd3+https://HOST:2379",
            )
        self.me = me
        self.group = group.encode()
        self.timeout = timeout
        self.where = f"etcd at {parts.hostname or 'localhost'}:{parts.port or 2379}"
        query = urllib.parse.parse_qs(parts.query)
        seconds = max(1, math.ceil(ttl))
        try:
            self._coordinator = coordination.get_coordinator(
                url,
                me.encode(),
                timeout=max(1, math.ceil(timeout)),
                membership_timeout=seconds,
                lock_timeout=seconds,
                api_version=query.get("api_version", ["v3"])[-1],
            )
        except (ToozError, RuntimeError, ValueError) as err:
            raise TerminalError(f"cannot use coordination URL {url!r}: {err}") from err
        self._started = False
        self._seen = False
        """The members were read once (the look for a live member with this identity)."""
        self.ttl = seconds

    def _start(self) -> None:
        if self._started:
            return
        self._coordinator.start(start_heart=False)
        self._started = True
        with contextlib.suppress(coordination.GroupAlreadyExist):
            self._coordinator.create_group(self.group).get(timeout=self.timeout)

    def beat(self) -> frozenset[str]:
        """Keep this member alive (joining again if etcd dropped it); the members now."""
        try:
            self._start()
            self._coordinator.heartbeat()
            members = self._members()
            if not self._seen and self.me in members:
                self._warn_taken()
            self._seen = True
            if self.me not in members:
                here = {"host": socket.gethostname(), "pid": os.getpid()}
                with contextlib.suppress(coordination.MemberAlreadyExist):
                    self._coordinator.join_group(self.group, here).get(timeout=self.timeout)
                members = self._members()
        except (ToozError, OSError) as err:
            raise TransientError(f"{self.where}: the fleet's group: {err}") from err
        except Exception as err:  # etcd3gw and requests raise their own; all mean "no answer"
            raise TransientError(
                f"{self.where}: the fleet's group: {type(err).__name__}: {err}"
            ) from err
        return members

    def _warn_taken(self) -> None:
        """Another live member has this identity (this process has not joined yet)."""
        where = ""
        with contextlib.suppress(Exception):  # who it is only adds to the warning
            got: Any = self._coordinator.get_member_capabilities(self.group, self.me.encode()).get(
                timeout=self.timeout
            )
            if isinstance(got, dict) and got.get("host"):
                where = f" (on {got['host']}, pid {got.get('pid')})"
        log.warning(
            "identity %r is already a live member of the fleet's group in %s%s: two instances "
            "with one identity share one place in the assignment, so both try the same "
            "clusters; give each instance its own --identity (if this is that instance "
            "restarted, its old membership ends within %d s)",
            self.me,
            self.where,
            where,
            self.ttl,
        )

    def _members(self) -> frozenset[str]:
        got = self._coordinator.get_members(self.group).get(timeout=self.timeout)
        return frozenset(m.decode() for m in got)

    def leave(self) -> None:
        """Leave the group (the others take this member's clusters at once) and disconnect."""
        if not self._started:
            return
        # best effort: the member's etcd lease ends its membership anyway
        with contextlib.suppress(Exception):
            self._coordinator.leave_group(self.group).get(timeout=self.timeout)
        with contextlib.suppress(Exception):
            self._coordinator.stop()
        self._started = False
