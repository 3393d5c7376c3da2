"""``admit`` on fixed examples: the members of a required group moving together, and each
limit at its boundary (one below it admits, at it waits), so a limit bug fails on every run."""

from __future__ import annotations

from reconciler.core.admission import AdmitCode, Verdict, admit
from reconciler.model.plan import Move, Reason
from tests.core.builders import NOW, desired, host, host_state, rule, snapshot, vm
from tests.core.test_admission import move

TOGETHER = rule(name="together", type="affinity", vms={"names": ["x", "y", "z"]})


def group_moves(wave: int = 0) -> list[Move]:
    return [
        move(n, "a", "b", reason=Reason.AFFINITY).model_copy(
            update={"rule": "together", "wave": wave}
        )
        for n in ("x", "y", "z")
    ]


def test_the_first_member_of_a_required_group_moving_together_is_admitted() -> None:
    # alone, x leaving a would split the group; with y and z following in the same wave the
    # group ends up whole on b, so x starts and the others wait for it
    d = desired([host("a"), host("b")], rules=[TOGETHER], hostLimit=100)
    snap = snapshot([host_state("a"), host_state("b")], [vm(n, "a") for n in ("x", "y", "z")])
    verdicts = admit(d, snap, group_moves(), [], NOW)
    assert [(a.move.vm, a.verdict, a.code) for a in verdicts] == [
        ("x", Verdict.ADMIT, AdmitCode.ADMITTED),
        ("y", Verdict.WAIT, AdmitCode.DEPENDS_ON_RUNNING),
        ("z", Verdict.WAIT, AdmitCode.DEPENDS_ON_RUNNING),
    ]


def test_members_of_a_group_in_different_waves_are_judged_alone() -> None:
    d = desired([host("a"), host("b")], rules=[TOGETHER], hostLimit=100)
    snap = snapshot([host_state("a"), host_state("b")], [vm(n, "a") for n in ("x", "y", "z")])
    moves = [m.model_copy(update={"wave": i}) for i, m in enumerate(group_moves())]
    verdicts = admit(d, snap, moves, [], NOW)
    assert [(a.verdict, a.code) for a in verdicts] == [(Verdict.SKIP, AdmitCode.RULE_BROKEN)] * 3
    assert verdicts[0].message == "affinity together would be broken on b"


def test_a_group_member_moved_for_another_reason_or_rule_is_not_part_of_the_group() -> None:
    d = desired([host("a"), host("b")], rules=[TOGETHER], hostLimit=100)
    snap = snapshot([host_state("a"), host_state("b")], [vm(n, "a") for n in ("x", "y", "z")])
    x, y, z = group_moves()
    for other in (
        y.model_copy(update={"reason": Reason.DRIFT}),
        y.model_copy(update={"rule": "another"}),
    ):
        verdicts = admit(d, snap, [x, other], [], NOW)
        assert verdicts[0].verdict is Verdict.SKIP, other
    assert admit(d, snap, [x, y, z], [], NOW)[0].verdict is Verdict.ADMIT
    # a group move without its rule's name is judged alone
    nameless = [m.model_copy(update={"rule": None}) for m in (x, y, z)]
    assert admit(d, snap, nameless, [], NOW)[0].verdict is Verdict.SKIP


def test_a_group_that_would_still_be_split_after_its_moves_is_refused() -> None:
    # only x and y move: z stays on a, so the group is split whatever they do
    d = desired([host("a"), host("b")], rules=[TOGETHER], hostLimit=100)
    snap = snapshot([host_state("a"), host_state("b")], [vm(n, "a") for n in ("x", "y", "z")])
    x, y, _ = group_moves()
    verdicts = admit(d, snap, [x, y], [], NOW)
    assert verdicts[0].verdict is Verdict.SKIP
    assert verdicts[0].code is AdmitCode.RULE_BROKEN


def _limit_verdict(running: int, **limits: int) -> tuple[Verdict, str]:
    """The verdict on one more move a -> b while ``running`` moves a -> b run; every limit
    not given is far away."""
    hosts = [
        host("a", max_outbound=limits.get("out", 8)),
        host("b", max_inbound=limits.get("into", 8)),
    ]
    rules = []
    if "budget" in limits:
        rules = [
            rule(
                name="web-budget",
                type="disruptionBudget",
                vms={"labels": {"app": "web"}},
                maxConcurrent=limits["budget"],
            )
        ]
    d = desired(hosts, rules=rules, parallel={"cluster": limits.get("parallel", 8)}, hostLimit=100)
    names = [f"r{i}" for i in range(running)] + ["next"]
    snap = snapshot(
        [host_state("a"), host_state("b")],
        [vm(n, "a", memory_gib=1, labels={"app": "web"}) for n in names],
    )
    started = [move(n, "a", "b", 1) for n in names[:-1]]
    (verdict,) = admit(d, snap, [move("next", "a", "b", 1)], started, NOW)
    return verdict.verdict, verdict.message


def test_each_limit_admits_one_below_it_and_waits_at_it() -> None:
    for limit, text in (
        ({"parallel": 3}, "parallel.cluster 3 migrations already run"),
        ({"out": 3}, "maxOutbound 3 of a reached"),
        ({"into": 3}, "maxInbound 3 of b reached"),
        ({"budget": 3}, "disruptionBudget web-budget allows 3 at once"),
    ):
        assert _limit_verdict(2, **limit) == (Verdict.ADMIT, "admitted"), limit
        assert _limit_verdict(3, **limit) == (Verdict.WAIT, text), limit


def test_moves_admitted_in_one_pass_count_against_the_limits_of_the_next() -> None:
    d = desired([host("a", max_outbound=2), host("b")], parallel={"cluster": 8}, hostLimit=100)
    names = ["v1", "v2", "v3"]
    snap = snapshot([host_state("a"), host_state("b")], [vm(n, "a", memory_gib=1) for n in names])
    verdicts = admit(d, snap, [move(n, "a", "b", 1) for n in names], [], NOW)
    assert [a.verdict for a in verdicts] == [Verdict.ADMIT, Verdict.ADMIT, Verdict.WAIT]
    assert verdicts[2].code is AdmitCode.LIMIT


def test_a_group_whose_last_member_would_not_fit_does_not_start_its_first() -> None:
    # b holds x and y but not z as well: starting x would leave the group split on a and b
    d = desired([host("a"), host("b")], rules=[TOGETHER], hostLimit=100)
    snap = snapshot(
        [host_state("a"), host_state("b", memory_gib=16)],
        [vm("x", "a"), vm("y", "a"), vm("z", "a", memory_gib=12)],
    )
    verdicts = admit(d, snap, group_moves(), [], NOW)
    assert verdicts[0].verdict is not Verdict.ADMIT, verdicts[0]
    assert verdicts[0].code is AdmitCode.RULE_BROKEN
