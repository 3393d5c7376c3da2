"""Plans as Markdown and the proposal's pull-request body within a forge's limit."""

from __future__ import annotations

from reconciler.report.plan_markdown import plan_markdown, plan_marker, pr_body
from tests.report.plans import busy_plan, move, placement


def test_markdown_lists_every_move_and_host() -> None:
    plan = busy_plan()
    text = plan_markdown(plan, {})
    for m in plan.moves:
        assert f"`{m.vm}` | {m.source} → {m.target}" in text
    for h in plan.hosts:
        assert f"| {h.host} |" in text


def test_body_keeps_the_marker_and_fits_any_limit() -> None:
    base = busy_plan()
    many = [move(f"vm-{i:04d}", "kvm-01", "kvm-02") for i in range(2000)]
    plan = base.model_copy(update={"moves": many, "placement": {m.vm: "kvm-02" for m in many}})
    current = placement({m.vm: "kvm-01" for m in many})
    full = pr_body(plan, current, source="c" * 40, limit=10_000_000)
    assert "```json" in full
    for limit in (65_536, 20_000, 5_000):
        body = pr_body(plan, current, source="c" * 40, limit=limit)
        assert len(body) <= limit
        assert plan_marker(plan.plan_id) in body
        assert "```json" not in body
    assert "more (see the commit message)" in pr_body(plan, current, source="c", limit=65_536)


def test_adopted_drift_without_a_move_is_named_in_the_body_and_the_commit_message() -> None:
    from reconciler.cli.history import parse_moves
    from reconciler.engine.propose import commit_message

    base = busy_plan()
    moving = {m.vm for m in base.moves}
    current = {**base.placement, "quiet-vm": "kvm-01"}
    plan = base.model_copy(update={"placement": {**base.placement, "quiet-vm": "kvm-03"}})
    assert "quiet-vm" not in moving
    body = pr_body(plan, placement(current), source="c" * 40, limit=65_536)
    assert "`quiet-vm`: kvm-01 → kvm-03" in body
    message = commit_message("lab", plan, placement(current))
    assert "entry adopted" in message.splitlines()[0]
    parsed = {m.vm: (m.source, m.target, m.reason) for m in parse_moves(message)}
    assert parsed["quiet-vm"] == ("kvm-01", "kvm-03", "Adopted"), "history reads it too"
