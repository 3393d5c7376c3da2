"""The executor on fixed examples: what it says of moves that can never start."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from reconciler.engine.execute import Execution, Ports
from reconciler.model.base import HostName
from reconciler.model.snapshot import Snapshot, VmRunState
from reconciler.model.status import MoveOutcome
from tests.core.builders import desired, host
from tests.engine.test_safety_examples import mv
from tests.fakes import FakeCluster, FakeHost, FakeVm


class TheirMigration(FakeCluster):
    """``theirs`` is being migrated from a to b by someone else, in every look."""

    def observe_hosts(self, hosts: Sequence[str]) -> Snapshot:
        snap = super().observe_hosts(hosts)
        if "b" not in hosts:
            return snap
        copy = self._vm_state(self.vms["theirs"]).model_copy(
            update={"host": HostName("b"), "state": VmRunState.PAUSED}
        )
        return snap.model_copy(update={"vms": [*snap.vms, copy]})


def test_a_move_held_by_a_limit_nothing_of_ours_frees_is_skipped_as_blocked_saying_why() -> None:
    fake = TheirMigration(
        "t",
        [FakeHost("a"), FakeHost("b"), FakeHost("c")],
        [FakeVm("theirs", "a"), FakeVm("x", "c")],
    )
    d = desired(
        [host("a"), host("b", max_inbound=1), host("c")], hostLimit=100, parallel={"cluster": 4}
    )
    execution = Execution(
        d,
        fake.observe(),
        [mv("x", "c", "b")],
        Ports(fake, fake, fake, fake.clock),
        plan_id="p",
        stop=threading.Event(),
        abort=threading.Event(),
    )
    (result,) = execution.run()
    assert fake.migrations == []
    assert result.outcome is MoveOutcome.SKIPPED
    assert result.reason == "Blocked"
    assert result.detail == "could not start: maxInbound 1 of b reached"
