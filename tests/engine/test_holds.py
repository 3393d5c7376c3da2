"""The hold of a cluster made of this machine's lock and the lease the cluster declares: taken
together, given back together, and never one kept for a command that cannot have the other."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from reconciler.engine.holds import JointLease
from reconciler.errors import TransientError


@dataclass
class Fake:
    """A lease another holder may have (``other``) or that cannot be asked (``down``)."""

    name: str
    other: str | None = None
    down: bool = False
    held: bool = False

    def acquire(self) -> bool:
        if self.down:
            raise TransientError(f"{self.name} does not answer")
        if self.other is not None:
            return False
        self.held = True
        return True

    def confirm(self) -> bool:
        return self.held and self.other is None

    def holder(self) -> str | None:
        return self.other or ("me" if self.held else None)

    def release(self) -> None:
        self.held = False


def joint() -> tuple[Fake, Fake, JointLease]:
    local, declared = Fake("lock"), Fake("git")
    return local, declared, JointLease(local, declared, "the git lease of x")


def test_both_are_taken_and_given_back_together() -> None:
    local, declared, hold = joint()
    assert hold.acquire()
    assert (local.held, declared.held) == (True, True)
    assert hold.confirm()
    hold.release()
    assert (local.held, declared.held) == (False, False)


def test_a_declared_lease_held_elsewhere_gives_the_lock_back_and_is_named() -> None:
    local, declared, hold = joint()
    declared.other = "run@kvm-admin-1"
    assert not hold.acquire()
    assert not local.held
    assert hold.holder() == "run@kvm-admin-1, through the git lease of x"


def test_the_lock_of_this_machine_held_keeps_the_declared_lease_unasked() -> None:
    local, declared, hold = joint()
    local.other = "apply (pid 7)"
    assert not hold.acquire()
    assert not declared.held
    assert hold.holder() == "apply (pid 7), through this machine's lock"


def test_a_declared_lease_that_cannot_be_asked_says_why_and_gives_the_lock_back() -> None:
    local, declared, hold = joint()
    declared.down = True
    with pytest.raises(TransientError):
        hold.acquire()
    assert not local.held
    assert hold.why == "git does not answer"


def test_a_renewal_that_cannot_reach_the_declared_lease_keeps_the_lock() -> None:
    local, declared, hold = joint()
    assert hold.acquire()
    declared.down = True
    with pytest.raises(TransientError):
        hold.acquire()
    assert local.held, "the keeper decides when the hold is lost, not one failed renewal"
    declared.down = False
    assert hold.acquire()
    assert hold.why is None
