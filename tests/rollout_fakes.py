"""In-memory rollout ports over a ``FakeCluster``: records, commands, the hosts' libvirt.

``FakeRolloutCommands`` logs every command with the VMs running on its host at that moment
(judged from the fake cluster, not from the rollout's words); commands can be made to fail
(``fail``) or to run a hook (``on_run``, e.g. to reboot a host or kill the reconciler).
``FakeRolloutRecords`` keeps the records in memory; ``fail_appends`` makes writes fail.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from reconciler.errors import GitError
from reconciler.model.rollout import Command
from reconciler.model.rollout_progress import CommandOutcome, RolloutProgress, StepRecord, Target
from reconciler.model.snapshot import LibvirtAnswer, VmRunState
from tests.fakes import FakeCluster


@dataclass
class Ran:
    rollout: str
    step: str
    host: str | None
    at: datetime
    running_on_host: tuple[str, ...]


class FakeRolloutRecords:
    def __init__(self, cluster: str = "test") -> None:
        self.cluster = cluster
        self.stored: dict[str, RolloutProgress] = {}
        self.outputs: list[tuple[StepRecord, str]] = []
        self.fail_appends = False
        self.on_append: Callable[[StepRecord], None] | None = None

    def load(self, rollout: str) -> RolloutProgress:
        return self.stored.get(rollout, RolloutProgress(cluster=self.cluster, rollout=rollout))

    def append(
        self, progress: RolloutProgress, record: StepRecord, *, output: str = ""
    ) -> RolloutProgress:
        if self.fail_appends:
            raise GitError("the state repository does not answer")
        if self.load(progress.rollout) != progress:
            raise GitError("the records changed meanwhile")
        new = progress.add(record)
        self.stored[progress.rollout] = new
        self.outputs.append((record, output))
        if self.on_append is not None:
            self.on_append(record)
        return new


@dataclass
class FakeRolloutCommands:
    cluster: FakeCluster
    ran: list[Ran] = field(default_factory=list)
    fail: set[tuple[str | None, str]] = field(default_factory=set)
    """(host, step) whose command exits 1."""
    on_run: Callable[[str | None, str], None] | None = None

    def run(
        self, rollout: str, step: str, command: Command, *, target: Target | None
    ) -> CommandOutcome:
        host = target.host if target is not None else None
        running = tuple(
            sorted(
                v.name
                for v in self.cluster.vms.values()
                if v.host == host and v.state is not VmRunState.SHUTOFF
            )
        )
        self.ran.append(Ran(rollout, step, host, self.cluster.clock.now(), running))
        if self.on_run is not None:
            self.on_run(host, step)
        if (host, step) in self.fail:
            return CommandOutcome(
                ok=False, detail="exit 1", output="E: failed", log=f"/logs/{host}-{step}.log"
            )
        return CommandOutcome(
            ok=True, detail="exit 0", output="done", log=f"/logs/{host}-{step}.log"
        )


@dataclass
class FakeHostControl:
    cluster: FakeCluster
    not_ready: set[str] = field(default_factory=set)
    shut: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    started: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)

    def answers(self, host: str) -> LibvirtAnswer:
        h = self.cluster.hosts[host]
        if not h.reachable or host in self.not_ready:
            return LibvirtAnswer(why="does not answer")
        return LibvirtAnswer(version="libvirt 10.0.0")

    def shut_down(self, host: str, vms: Sequence[str], timeout: timedelta) -> dict[str, str]:
        self.shut.append((host, tuple(vms)))
        for name in vms:
            self.cluster.vms[name].state = VmRunState.SHUTOFF
        return {}

    def start(self, host: str, vms: Sequence[str]) -> dict[str, str]:
        self.started.append((host, tuple(vms)))
        for name in vms:
            self.cluster.vms[name].state = VmRunState.RUNNING
        return {}
