"""A live move left behind by a post-copy, as the next round finds it: settled by libvirt after
the call failed (a move), or split between the hosts (left alone, with what to do)."""

from __future__ import annotations

from datetime import timedelta

from reconciler.core.intents import FOREIGN_LIVE, post_copy_failures, resolved
from reconciler.core.planner import plan
from reconciler.model.history import History
from reconciler.model.plan import UnsatisfiableCode
from reconciler.model.snapshot import InFlight, MoveIntent, ReconcilerState, VmRunState, VmState
from tests.core.builders import NOW, desired, host, host_state, snapshot, vm

INTENT = MoveIntent(plan_id="p", source="h0", target="h1", started_at=NOW)
HOSTS = [host_state("h0"), host_state("h1")]


def seen(
    on: str, state: VmRunState, reason: str = "", intent: MoveIntent | None = INTENT
) -> VmState:
    return vm("a", on).model_copy(
        update={
            "state": state,
            "state_reason": reason,
            "reconciler": ReconcilerState(intent=intent),
        }
    )


def flying(*vms: VmState) -> list[InFlight]:
    return [InFlight(name="a", uuid="uuid-a", hosts=sorted(v.host for v in vms))]


def test_running_on_the_target_and_left_shut_off_on_the_source_is_a_move() -> None:
    vms = [seen("h0", VmRunState.SHUTOFF, "migrated"), seen("h1", VmRunState.RUNNING, "migrated")]
    after, [r] = resolved(snapshot(HOSTS, vms, flying(*vms)), NOW)
    assert (r.host, r.discard_on) == ("h1", "h0")
    assert r.state.intent is None
    assert (r.state.last_moved_from, r.state.last_moved_to) == ("h0", "h1")
    assert [v.host for v in after.vms] == ["h1"]
    assert after.in_flight == []


def test_a_vm_held_by_a_post_copy_is_left_alone() -> None:
    going = [
        seen("h0", VmRunState.PAUSED, "post-copy"),
        seen("h1", VmRunState.RUNNING, "post-copy"),
    ]
    assert resolved(snapshot(HOSTS, going, flying(*going)), NOW)[1] == []
    failed = [seen("h0", VmRunState.PAUSED, "post-copy failed")]
    assert resolved(snapshot(HOSTS, failed), NOW)[1] == [], "not a failure on the source"
    assert post_copy_failures(snapshot(HOSTS, going, flying(*going))) == []


def test_a_split_vm_is_reported_with_the_command_that_resumes_it() -> None:
    vms = [
        seen("h0", VmRunState.PAUSED, "post-copy failed"),
        seen("h1", VmRunState.PAUSED, "post-copy failed"),
    ]
    [problem] = post_copy_failures(snapshot(HOSTS, vms, flying(*vms)))
    assert problem.code is UnsatisfiableCode.POST_COPY_FAILED
    assert problem.vms == ["a"]
    assert "do not resume or start it on h0" in problem.message
    assert (
        "virsh -c qemu+ssh://root@h0/system migrate --live --p2p --persistent --undefinesource "
        "--postcopy --postcopy-resume a qemu+ssh://root@h1/system" in problem.message
    )


def test_a_vm_paused_on_its_source_whose_target_lost_it_must_be_restarted() -> None:
    vms = [seen("h0", VmRunState.PAUSED, "post-copy failed")]
    [problem] = post_copy_failures(snapshot(HOSTS, vms))
    assert "h1 no longer holds it" in problem.message
    assert "never resume it" in problem.message
    down = [HOSTS[0], host_state("h1", reachable=False)]
    [waiting] = post_copy_failures(snapshot(down, vms))
    assert "once both hosts answer, resume the migration" in waiting.message


def test_the_plan_names_a_split_vm_and_moves_nothing_of_it() -> None:
    vms = [
        seen("h0", VmRunState.PAUSED, "post-copy failed"),
        seen("h1", VmRunState.RUNNING, "post-copy failed"),
    ]
    d = desired([host("h0", maintenance=True), host("h1")])
    p = plan(d, snapshot(HOSTS, vms, flying(*vms)), History(), now=NOW)
    assert UnsatisfiableCode.POST_COPY_FAILED in [u.code for u in p.unsatisfiable]
    assert p.moves == []


def test_a_vm_whose_post_copy_ended_out_of_sight_is_neither_a_failure_nor_moved() -> None:
    # its source shut off as migrated, its target (its daemon killed meanwhile) without it
    lost = seen("h0", VmRunState.SHUTOFF, "migrated")
    snap, resolutions = resolved(snapshot(HOSTS, [lost]), NOW)
    assert resolutions == []
    (kept,) = snap.vms
    assert kept.reconciler.intent == INTENT
    assert not kept.migratable
    [problem] = post_copy_failures(snap)
    assert "h1 does not run it: it was lost with its post-copy" in problem.message
    assert "virsh -c qemu+ssh://root@h0/system start a" in problem.message
    down = [HOSTS[0], host_state("h1", reachable=False)]
    [waiting] = post_copy_failures(snapshot(down, [lost]))
    assert "do not start it on h0 before" in waiting.message
    d = desired([host("h0"), host("h1")], placement={"a": "h1"})
    p = plan(d, snap, History(), now=NOW)  # a round plans on the snapshot resolved
    assert p.moves == []
    p = plan(d, snapshot(HOSTS, [lost]), History(), now=NOW)  # `plan` on one not resolved
    assert p.moves == []
    assert UnsatisfiableCode.POST_COPY_FAILED in [u.code for u in p.unsatisfiable]
    plain = seen("h0", VmRunState.SHUTOFF, "shutdown")
    assert resolved(snapshot(HOSTS, [plain]), NOW)[1], "shut down by a person: a failure"


def test_a_lost_vm_whose_target_kept_a_shut_off_copy_loses_the_copy_and_is_reported() -> None:
    # the target's restarted daemon ended its incoming copy but left it defined, shut off
    lost = seen("h0", VmRunState.SHUTOFF, "migrated")
    left = seen("h1", VmRunState.SHUTOFF, "failed")
    snap, [r] = resolved(snapshot(HOSTS, [lost, left], flying(lost, left)), NOW)
    assert (r.host, r.discard_on) == ("h0", "h1")
    assert r.state.intent == INTENT, "no failure on the source: it was lost, not stopped"
    assert r.state.last_failure is None
    (kept,) = snap.vms
    assert (kept.host, kept.reconciler.intent, kept.migratable) == ("h0", INTENT, False)
    assert snap.in_flight == []
    [problem] = post_copy_failures(snap)
    assert "it was lost with its post-copy; start it again on h0" in problem.message
    # `plan`, which resolves nothing, says the same, names the copy, and moves neither sighting
    unresolved = snapshot(HOSTS, [lost, left], flying(lost, left))
    [said] = post_copy_failures(unresolved)
    assert "start it again on h0" in said.message
    assert "the copy h1 left defined, shut off, is removed by the next round" in said.message
    d = desired([host("h0"), host("h1")], placement={"a": "h1"})
    p = plan(d, unresolved, History(), now=NOW)
    assert p.moves == []
    assert UnsatisfiableCode.POST_COPY_FAILED in [u.code for u in p.unsatisfiable]


def test_a_shut_off_copy_elsewhere_than_the_target_or_running_is_no_lost_post_copy() -> None:
    lost = seen("h0", VmRunState.SHUTOFF, "migrated")
    running = seen("h1", VmRunState.RUNNING, "migrated")
    _, [r] = resolved(snapshot(HOSTS, [lost, running], flying(lost, running)), NOW)
    assert r.state.intent is None, "running on its target: a move"
    third = [*HOSTS, host_state("h2")]
    elsewhere = seen("h2", VmRunState.SHUTOFF, "failed")
    snap = snapshot(third, [lost, elsewhere], flying(lost, elsewhere))
    assert post_copy_failures(snap) == []
    assert all(r.discard_on != "h2" for r in resolved(snap, NOW)[1])


def test_a_lost_vm_started_again_on_its_source_before_a_round_loses_the_targets_copy() -> None:
    # the plan said to start it on h0; a person did, before any round removed h1's copy
    started = seen("h0", VmRunState.RUNNING, "booted")
    left = seen("h1", VmRunState.SHUTOFF, "failed")
    snap, [r] = resolved(snapshot(HOSTS, [started, left], flying(started, left)), NOW)
    assert (r.host, r.discard_on) == ("h0", "h1")
    assert r.state.intent is None
    assert r.state.last_failure is not None
    assert (r.state.last_failure.source, r.state.last_failure.target) == ("h0", "h1")
    assert "started again on h0" in r.summary
    (kept,) = snap.vms
    assert (kept.host, kept.state, kept.reconciler.intent) == ("h0", VmRunState.RUNNING, None)
    assert snap.in_flight == []
    assert post_copy_failures(snap) == []


def test_a_stopped_cold_move_started_again_on_its_source_loses_the_targets_copy() -> None:
    # shut off on both hosts with the same intent, then started on its source by a person
    started = seen("h0", VmRunState.RUNNING, "booted")
    copy = seen("h1", VmRunState.SHUTOFF, "shutdown")
    for vms in ([started, copy], [copy, started]):  # in either order of sightings
        snap, [r] = resolved(snapshot(HOSTS, vms, flying(started, copy)), NOW)
        assert (r.host, r.discard_on, r.state.intent) == ("h0", "h1", None)
        assert [v.host for v in snap.vms] == ["h0"]


def test_a_vm_running_on_its_source_beside_another_copy_is_not_settled_by_it() -> None:
    started = seen("h0", VmRunState.RUNNING, "booted")
    third = [*HOSTS, host_state("h2")]
    for other in (
        seen("h1", VmRunState.RUNNING, "booted"),  # running twice: never settled here
        seen("h1", VmRunState.PAUSED, "migration"),  # an incoming copy: in flight
        seen("h2", VmRunState.SHUTOFF, "shutdown"),  # not the move's target
        seen(
            "h1",
            VmRunState.SHUTOFF,
            "shutdown",
            MoveIntent(source="h1", target="h0", started_at=NOW),
        ),
    ):
        snap = snapshot(third, [started, other], flying(started, other))
        assert all(r.discard_on is None for r in resolved(snap, NOW)[1]), other
    # another actor's move, written a moment ago, is that actor's to settle
    theirs = INTENT.model_copy(update={"actor": "run@elsewhere"})
    mine = seen("h0", VmRunState.RUNNING, "booted", theirs)
    copy = seen("h1", VmRunState.SHUTOFF, "shutdown", theirs)
    snap = snapshot(HOSTS, [mine, copy], flying(mine, copy))
    assert resolved(snap, NOW, actor="apply@here")[1] == []


def test_another_actors_move_under_way_is_not_settled_whatever_its_shape() -> None:
    """A cold move of another actor between defining its copy and undefining the source is
    shut off on both hosts with one intent, the shape of a stopped one: removing that copy
    while its actor verifies it would lose the VM once the actor undefines the source."""
    theirs = INTENT.model_copy(update={"actor": "run@elsewhere"})
    shapes = [
        (VmRunState.SHUTOFF, "shutdown", VmRunState.SHUTOFF, "shutdown"),  # a cold move
        (VmRunState.SHUTOFF, "migrated", VmRunState.SHUTOFF, "failed"),  # a lost post-copy
        (VmRunState.SHUTOFF, "migrated", VmRunState.RUNNING, "migrated"),  # a live move's end
        (VmRunState.RUNNING, "booted", VmRunState.SHUTOFF, "shutdown"),  # started again
    ]
    for s_state, s_reason, t_state, t_reason in shapes:
        on_source = seen("h0", s_state, s_reason, theirs)
        on_target = seen("h1", t_state, t_reason, theirs)
        snap = snapshot(HOSTS, [on_source, on_target], flying(on_source, on_target))
        after, done = resolved(snap, NOW, actor="apply@here")
        assert (after, done) == (snap, []), (s_state, t_state)
        # the actor's own round, or any once no actor is named, settles it
        assert resolved(snap, NOW, actor="run@elsewhere")[1], (s_state, t_state)
        unnamed = snapshot(
            HOSTS,
            [seen("h0", s_state, s_reason), seen("h1", t_state, t_reason)],
            flying(on_source, on_target),
        )
        assert resolved(unnamed, NOW, actor="apply@here")[1], (s_state, t_state)
        # an actor gone (its intent older than FOREIGN_LIVE) holds nothing for good
        gone = theirs.model_copy(update={"started_at": NOW - FOREIGN_LIVE - timedelta(seconds=1)})
        left = snapshot(
            HOSTS,
            [seen("h0", s_state, s_reason, gone), seen("h1", t_state, t_reason, gone)],
            flying(on_source, on_target),
        )
        assert resolved(left, NOW, actor="apply@here")[1], (s_state, t_state)
