"""The live instances of a fleet: a tooz group in etcd (``tooz/groups/<group>/<member>``).

Each instance joins the group with its identity; its member key is attached to an etcd lease
of ``ttl`` seconds that ``beat()`` keeps alive, so a member that dies (or loses etcd for longer
than that) leaves the group by itself. ``beat()`` joins again when the key is gone (after
etcd lost the member's lease) and returns the members it read. Every call has a deadline:
``beat()`` returns or raises ``TransientError`` within ``timeout`` seconds per step.
"""

from __future__ import annotations

import contextlib
import math
import urllib.parse

from tooz import ToozError, coordination

from reconciler.adapters.etcd.lease import SCHEMES, TIMEOUT
from reconciler.errors import TerminalError, TransientError

GROUP = "reconciler-fleet"


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
            if self.me not in members:
                with contextlib.suppress(coordination.MemberAlreadyExist):
                    self._coordinator.join_group(self.group).get(timeout=self.timeout)
                members = self._members()
        except (ToozError, OSError) as err:
            raise TransientError(f"{self.where}: the fleet's group: {err}") from err
        except Exception as err:  # etcd3gw and requests raise their own; all mean "no answer"
            raise TransientError(
                f"{self.where}: the fleet's group: {type(err).__name__}: {err}"
            ) from err
        return members

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
