from __future__ import annotations

import pytest

from reconciler.model.plan import Candidate, PlaceResult, Unsatisfiable, UnsatisfiableCode
from reconciler.report.plan_table import (
    WIDTH,
    place_table,
    placement_updates,
    plan_table,
    summary_line,
)
from tests.report.plans import busy_plan, empty_plan


def _section(text: str, title: str) -> list[str]:
    """The lines of one section: from its title to the next blank line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start, len(lines)) if not lines[i]), len(lines))
    return lines[start + 1 : end]


def test_header_names_cluster_plan_and_spread_against_threshold_and_hold_rounds() -> None:
    text = plan_table(busy_plan())
    first, second = text.splitlines()[:2]
    assert first == "Plan for cluster lab at 2025-03-01T12:00:00Z"
    assert second == "  id 3f2a9c1d"
    spread = _section(text, "Spread")
    assert len(spread) == 1
    assert spread[0].split() == [
        "x86_64",
        "60.0",
        "->",
        "2.5",
        "threshold",
        "20",
        "rounds",
        "over",
        "2/2",
        "holdRounds",
        "balancing",
    ]


def test_moves_are_grouped_by_wave_in_wave_order() -> None:
    lines = _section(plan_table(busy_plan()), "Moves")
    assert lines[0].strip() == "wave 0"
    wave1 = lines.index("  wave 1")
    wave0_block = "\n".join(lines[1:wave1])
    assert "web-1" in wave0_block
    assert "db-1" in wave0_block
    assert "web-2" not in wave0_block
    assert "web-2" in "\n".join(lines[wave1:])


def test_a_move_line_has_vm_route_size_reason_rule_and_detail() -> None:
    lines = _section(plan_table(busy_plan()), "Moves")
    web1 = next(line for line in lines if line.strip().startswith("web-1"))
    assert "kvm-01 -> kvm-02" in web1
    assert "4GiB 2 vCPUs" in web1
    assert "Drift" in web1
    assert web1.endswith("back home")
    db1 = lines.index(next(line for line in lines if line.strip().startswith("db-1")))
    assert "16GiB 8 vCPUs" in lines[db1]
    assert "AntiAffinity (db-apart)" in lines[db1]
    # The long detail wraps onto indented lines below its move.
    assert lines[db1 + 1].startswith("        db-1 and db-2 share kvm-01")


def test_no_line_is_wider_than_100_columns_and_there_is_no_colour() -> None:
    text = plan_table(busy_plan())
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    assert "\x1b" not in text


def test_host_bars_show_before_and_after_and_mark_unknown_hosts() -> None:
    lines = _section(plan_table(busy_plan()), "Hosts")
    kvm01 = next(line for line in lines if line.strip().startswith("kvm-01"))
    # 70% -> 45%: 4 cells stay, 3 leave (45% rounds to 4 of 10 cells), 3 free.
    assert "cpu [####---...]  70% ->  45%" in kvm01
    assert "mem [####----..]  80% ->  40%" in kvm01
    assert "vms 6 -> 2" in kvm01
    kvm02 = next(line for line in lines if line.strip().startswith("kvm-02"))
    assert "cpu [##++......]  20% ->  40%" in kvm02
    kvm04 = next(line for line in lines if line.strip().startswith("kvm-04"))
    assert "unknown" in kvm04
    assert "%" not in kvm04


def test_deferred_and_unsatisfiable_sections() -> None:
    text = plan_table(busy_plan())
    deferred = _section(text, "Deferred")
    assert deferred[0].split()[:3] == ["web-3", "kvm-01", "->"]
    assert "web-3" not in "\n".join(_section(text, "Moves"))
    unsat = _section(text, "Unsatisfiable")
    assert unsat[0].strip() == "TooFewHosts (rule cache-apart): cache-1, cache-2, cache-3"
    assert unsat[1].strip() == "anti-affinity cache-apart needs 3 hosts, 2 are eligible"


def test_summary_line() -> None:
    text = plan_table(busy_plan())
    assert text.splitlines()[-1] == "3 moves in 2 waves, 1 deferred, 1 unsatisfiable"
    assert plan_table(empty_plan()).splitlines()[-1] == "No changes."


def test_no_changes_still_points_at_unsatisfiable_items() -> None:
    plan = empty_plan().model_copy(
        update={
            "unsatisfiable": [
                Unsatisfiable(code=UnsatisfiableCode.NO_FEASIBLE_HOST, message="nothing fits")
            ]
        }
    )
    assert summary_line(plan) == "No changes; 1 unsatisfiable (see above)."
    assert "nothing fits" in plan_table(plan)


def test_singular_forms() -> None:
    plan = busy_plan()
    one = plan.model_copy(update={"moves": plan.moves[1:2], "deferred": [], "unsatisfiable": []})
    assert summary_line(one) == "1 move in 1 wave, 0 deferred, 0 unsatisfiable"


@pytest.mark.parametrize(
    ("host", "first"), [("kvm-02", "Best host: kvm-02"), (None, "No host fits.")]
)
def test_place_table(host: str | None, first: str) -> None:
    result = PlaceResult(
        host=host,
        candidates=[
            Candidate(host="kvm-02", fits=host is not None, score_after=41.25),
            Candidate(host="kvm-01", fits=False, reasons=["memory 95% > hostLimit 90%"]),
        ],
        message="kvm-02 has the lowest score after placing new-vm",
    )
    lines = place_table(result).splitlines()
    assert lines[0] == first
    assert lines[1] == "kvm-02 has the lowest score after placing new-vm"
    table = lines[lines.index("") + 2 :]
    kvm02 = next(line for line in table if line.strip().startswith("kvm-02"))
    assert "41.2" in kvm02
    kvm01 = next(line for line in table if line.strip().startswith("kvm-01"))
    assert kvm01.split()[1:3] == ["no", "-"]
    assert kvm01.endswith("memory 95% > hostLimit 90%")


def test_placement_updates_without_a_move_are_listed_and_counted() -> None:
    """Adopted drift changes the Placement document without migrating anything."""
    plan = empty_plan().model_copy(
        update={"placement": {"web-1": "kvm-02", "db-1": "kvm-03", "new-1": "kvm-01"}}
    )
    current = {"web-1": "kvm-01", "db-1": "kvm-03", "gone-1": "kvm-02"}
    assert placement_updates(plan, current) == [
        ("gone-1", "kvm-02", None),
        ("new-1", None, "kvm-01"),
        ("web-1", "kvm-01", "kvm-02"),
    ]
    text = plan_table(plan, current)
    lines = _section(text, "Placement updates without a migration (3)")
    assert [line.split() for line in lines] == [
        ["gone-1", "kvm-02", "->", "(unlisted)"],
        ["new-1", "(unlisted)", "->", "kvm-01"],
        ["web-1", "kvm-01", "->", "kvm-02"],
    ]
    assert text.splitlines()[-1] == "No moves; 3 placement updates, 0 unsatisfiable"
    # Without the current placement there is nothing to compare with.
    assert plan_table(plan).splitlines()[-1] == "No changes."


def test_moved_vms_are_not_placement_updates() -> None:
    plan = busy_plan()
    current = {"web-1": "kvm-01", "db-1": "kvm-01", "web-2": "kvm-01", "web-3": "kvm-01"}
    assert placement_updates(plan, current) == []
    assert "Placement updates" not in plan_table(plan, current)
    extra = {**current, "old-1": "kvm-04"}
    assert plan_table(plan, extra).splitlines()[-1].endswith(", 1 placement update")
