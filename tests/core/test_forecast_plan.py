"""What the forecast changed in a plan: each host's load now, over the window and as
forecast, the moves made ahead of time (the plan on the window alone does not make them),
and the forecast's error, in the plan's text and JSON."""

from __future__ import annotations

import json

from reconciler.core import forecast_plan, load_view
from reconciler.core.planner import plan
from reconciler.model.desired import DesiredState
from reconciler.model.history import History
from reconciler.model.snapshot import Snapshot
from reconciler.report.plan_json import plan_json
from reconciler.report.plan_markdown import plan_markdown
from reconciler.report.plan_table import load_texts, plan_table
from tests.core.builders import NOW, desired, host, host_state, snapshot, vm
from tests.core.test_load_forecast import SPEC, STEP, history, window

HOSTS = [host("h1"), host("h2")]


def forecast_snapshot(peak_window: float = 1.0) -> Snapshot:
    """h1 and h2 alike over the window; h1's ``peak`` is at its daily high now (a forecast of
    about 2.5 cores against 1.0 over the window)."""
    snap = snapshot(
        [host_state("h1", cpus=8), host_state("h2", cpus=8)],
        [
            vm("peak", "h1", vcpus=4, cpu_used=1.0),
            vm("a", "h1", vcpus=4, cpu_used=0.5),
            vm("a2", "h1", vcpus=4, cpu_used=0.5),
            vm("b", "h2", vcpus=4, cpu_used=1.0),
            vm("c", "h2", vcpus=4, cpu_used=1.0),
        ],
    )
    points = {
        "peak": window(peak_window),
        "a": window(0.5),
        "a2": window(0.5),
        "b": window(1.0),
        "c": window(1.0),
    }
    past = {"peak": history(3)}
    return load_view.from_points(snap, SPEC, points, NOW, history=past, history_step=STEP)


def policy() -> DesiredState:
    return desired(
        HOSTS,
        basis="used",
        threshold=5,
        score={"cpu": 1, "memory": 0},
        load={"statistic": "forecast", "source": "prometheus"},
    )


def test_a_move_the_window_alone_would_not_make_is_said_to_be_made_ahead_of_time() -> None:
    snap = forecast_snapshot()
    d = policy()
    first = plan(d, snap, History(), now=NOW)
    assert first.moves, "the forecast makes h1 the hotter host"
    result = forecast_plan.ahead_of_time(d, snap, History(), first, now=NOW)
    plain = forecast_plan.on_window(snap)
    assert plain is not None
    assert plan(d, plain, History(), now=NOW).moves == []  # the window alone: balanced
    assert result.load is not None
    assert [(a.vm, a.source, a.target) for a in result.load.ahead] == [
        (m.vm, m.source, m.target) for m in first.moves
    ]
    a = result.load.ahead[0]
    hosts = {h.host: h for h in result.hosts}
    assert hosts["h1"].cpu_window is not None
    assert abs(hosts["h1"].cpu_window - 25.0) < 0.01  # 2 cores of 8 over the window
    assert hosts["h2"].cpu_window == hosts["h2"].cpu_forecast == hosts["h2"].cpu_before
    # the forecast: peak's ~2.5 cores instead of 1.0; the plan used the blend between
    assert hosts["h1"].cpu_forecast is not None
    assert 43 < hosts["h1"].cpu_forecast < 44.5
    assert hosts["h1"].cpu_window < hosts["h1"].cpu_before < hosts["h1"].cpu_forecast
    assert (a.host, a.forecast, a.window) == ("h1", hosts["h1"].cpu_forecast, 25.0)
    assert (a.start, a.end) == (NOW, NOW + SPEC.forecast.horizon)
    text = plan_table(result, {})
    assert "ahead of time: forecast 44% at 12:00-12:30 UTC vs window 25% (h1)" in text
    assert "(cpu now 25%, window 25%, forecast 44%)" in text
    got = json.loads(plan_json(result))
    assert got["load"]["ahead"][0]["host"] == "h1"
    assert got["hosts"][0]["cpuWindow"] == 25.0
    # the pull request's Markdown says the same
    markdown = plan_markdown(result, {})
    assert "ahead of time: forecast 44% at 12:00-12:30 UTC vs window 25% (h1)" in markdown
    assert "| VMs | CPU now | CPU window | CPU forecast |" in markdown
    assert "| 25% | 25% | 44% |" in markdown


def test_a_move_the_window_makes_too_is_not_ahead_of_time_and_no_forecast_changes_nothing() -> None:
    snap = forecast_snapshot()
    d = policy()
    # h1 far hotter over the window already: the same move either way
    hot = load_view.from_points(
        snap,
        SPEC,
        {
            "peak": window(1.0),
            "a": window(2.0),
            "a2": window(2.0),
            "b": window(0.2),
            "c": window(0.2),
        },
        NOW,
        history={"peak": history(3)},
        history_step=STEP,
    )
    first = plan(d, hot, History(), now=NOW)
    assert first.moves
    result = forecast_plan.ahead_of_time(d, hot, History(), first, now=NOW)
    assert result.load is not None
    assert result.load.ahead == []
    # no VM forecast (too little history): the plan is returned as it was
    bare = load_view.from_points(snap, SPEC, {"peak": window(1.0)}, NOW)
    alone = plan(d, bare, History(), now=NOW)
    assert forecast_plan.ahead_of_time(d, bare, History(), alone, now=NOW) is alone


def test_the_plan_shows_the_forecasts_error_per_vm_and_on_average() -> None:
    snap = forecast_snapshot()
    assert snap.load is not None
    view = snap.load.forecast
    assert view is not None
    assert view.errors == {"peak": 0.0}
    assert view.error == 0.0
    assert view.window_error is not None
    assert view.window_error > 0.05  # the window's mean held misses the daily cycle
    result = plan(policy(), snap, History(), now=NOW)
    texts = load_texts(result.load)
    assert texts is not None
    said = [t for t in texts[1] if t.startswith("forecast error")]
    assert said == [
        f"forecast error over the last day: 0 cores per VM on average (the window's mean held: "
        f"{view.window_error:.3g}) over 1 VM(s); largest: peak 0"
    ]
    assert snap.load.vms["peak"].mean == 1.0
