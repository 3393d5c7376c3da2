"""The window's fast paths give what the straightforward computation gives, to the bit.

A round reads the window of every VM (15,000 at 1,000 hosts), so the load view computes a
figure from rate points without a span per point, copies a sighting with its window's figure
without pydantic's generic copy, and builds each VM's ``VmLoad`` without the validator when
its values are already what the fields accept. Each is checked here against the
straightforward path on generated inputs: the same figure, the same models (values, their
order, the fields set, their JSON), and the same snapshot out of ``from_points``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from reconciler.core import load_range
from reconciler.core.capacity import INACTIVE_STATES
from reconciler.core.load_view import from_points, vm_load, with_cpu
from reconciler.core.load_window import (
    Figure,
    figure,
    figure_of_points,
    figures_of_points,
    spans_of_points,
)
from reconciler.model.load import LoadBasis, LoadSpec, LoadView, Statistic, VmLoad
from reconciler.model.snapshot import Snapshot, VmRunState, VmState
from tests.core.builders import NOW, host_state, vm

times = st.one_of(
    st.floats(min_value=-50.0, max_value=1050.0),
    st.integers(min_value=-50, max_value=1050),
    st.sampled_from([math.nan, math.inf, -math.inf]),
)
rates = st.one_of(
    st.floats(min_value=-1.0, max_value=40.0),
    st.integers(min_value=-1, max_value=40),
    st.sampled_from([math.nan, math.inf]),
)
points_of = st.lists(st.tuples(times, rates), max_size=12)
in_order = st.lists(
    st.tuples(st.integers(min_value=0, max_value=40), st.floats(min_value=0.0, max_value=8.0)),
    max_size=12,
).map(lambda ps: sorted((60.0 * t, v) for t, v in ps))


def same_figure(a: Figure, b: Figure) -> bool:
    def bits(x: float | None) -> object:
        return None if x is None else (type(x), x.hex() if isinstance(x, float) else x)

    return bits(a.value) == bits(b.value) and a.covered.hex() == b.covered.hex()


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(points_of, in_order),
    st.sampled_from([60.0, 300.0, 15.0, 0.5]),
    st.floats(min_value=-100.0, max_value=1000.0),
    st.floats(min_value=-10.0, max_value=1200.0),
    st.sampled_from(list(Statistic)),
)
def test_a_figure_of_points_is_the_figure_of_their_spans(
    points: list[tuple[float, float]], step: float, start: float, length: float, stat: Statistic
) -> None:
    end = start + length
    straight = figure(spans_of_points(points, step), start, end, stat)
    fast = figure_of_points(points, step, start, end, stat)
    assert same_figure(fast, straight), (fast, straight)
    # each series alone, and every point a series of its own (the one-point path)
    many = figures_of_points({"all": points}, step, start, end, stat)
    assert same_figure(many["all"], straight), (many, straight)
    each = figures_of_points({str(i): [p] for i, p in enumerate(points)}, step, start, end, stat)
    for i, p in enumerate(points):
        alone = figure(spans_of_points([p], step), start, end, stat)
        assert same_figure(each[str(i)], alone), (p, each[str(i)], alone)


def test_points_out_of_order_are_put_in_order_first() -> None:
    # summed in time order, 0.1 + 0.2 + 0.3 is 0.6000000000000001; in the order given, 0.6
    points = [(2.0, 0.2), (3.0, 0.3), (1.0, 0.1)]
    fast = figure_of_points(points, 1.0, 0.0, 3.0, Statistic.MEAN)
    assert fast.value is not None
    assert fast.value.hex() == (0.6000000000000001 / 3.0).hex() != (0.6 / 3.0).hex()
    for stat in Statistic:
        assert same_figure(
            figure_of_points(points, 1.0, 0.0, 3.0, stat),
            figure(spans_of_points(points, 1.0), 0.0, 3.0, stat),
        )


def same_model(a: BaseModel, b: BaseModel) -> None:
    assert type(a) is type(b)
    assert list(a.__dict__.items()) == list(b.__dict__.items())
    assert [type(v) for v in a.__dict__.values()] == [type(v) for v in b.__dict__.values()]
    assert a.model_fields_set == b.model_fields_set
    assert a.__pydantic_extra__ == b.__pydantic_extra__
    assert a.__pydantic_private__ == b.__pydantic_private__
    assert a.model_dump_json(by_alias=True) == b.model_dump_json(by_alias=True)
    assert a.model_dump_json(by_alias=True, exclude_unset=True) == b.model_dump_json(
        by_alias=True, exclude_unset=True
    )
    assert a == b


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.none(), st.floats(min_value=0.0, max_value=20.0)), st.booleans())
def test_a_sighting_with_its_window_is_its_model_copy(cpu: float | None, default: bool) -> None:
    seen = vm("a", "h1", cpu_used=0.25)
    if default:  # cpu_used not among the fields set
        seen = VmState.model_validate(seen.model_dump(exclude={"cpu_used"}))
    same_model(with_cpu(seen, cpu), seen.model_copy(update={"cpu_used": cpu}))


values = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-3, max_value=3),
    st.sampled_from([0.0, -0.0, 1.0, 1.5]),
)


@settings(max_examples=400, deadline=None)
@given(values, values, values, values, values, values)
def test_a_vm_load_is_the_validated_one_or_the_same_refusal(
    now: float | None,
    window: float | None,
    covered: float | None,
    forecast: float | None,
    error: float | None,
    mean: float | None,
) -> None:
    args = (now, window, covered, forecast, error, mean)
    try:
        validated = VmLoad(
            now=now,
            window=window,
            covered=covered,  # type: ignore[arg-type]
            forecast=forecast,
            forecast_error=error,
            mean=mean,
        )
    except ValidationError:
        with pytest.raises(ValidationError):
            vm_load(*args)  # type: ignore[arg-type]
        return
    same_model(vm_load(*args), validated)  # type: ignore[arg-type]


def straight(
    snapshot: Snapshot,
    spec: LoadSpec,
    vm_points: Mapping[str, Sequence[tuple[float, float]]],
) -> Snapshot:
    """``from_points`` as written before its fast paths (no pressure, no forecast)."""
    end = NOW.timestamp()
    start = end - spec.window.total_seconds()
    step = spec.sample_every.total_seconds()
    figures = {
        n: figure(spans_of_points(p, step), start, end, spec.statistic)
        for n, p in vm_points.items()
    }
    vms: list[VmState] = []
    loads: dict[str, VmLoad] = {}
    named: dict[str, str] = {}
    for seen in snapshot.vms:
        f = figures.get(seen.name, Figure(None, 0.0))
        window, now = f.value, seen.cpu_used
        active = seen.state not in INACTIVE_STATES
        bad: list[str] = []
        if window is not None and not load_range.in_range(window, seen.vcpus):
            bad.append(load_range.why(window, seen.vcpus, "over the window"))
            window = None
        if now is not None and not load_range.in_range(now, seen.vcpus):
            bad.append(load_range.why(now, seen.vcpus, "in the short sample"))
            now = None
            seen = seen.model_copy(update={"cpu_used": None})  # noqa: PLW2901
        if bad and active:
            named[seen.name] = "; ".join(bad)
        loads[seen.name] = VmLoad(
            now=now,
            window=window,
            covered=round(f.covered, 4),
            forecast=None,
            forecast_error=None,
            mean=None,
        )
        if window is not None and active:
            seen = seen.model_copy(update={"cpu_used": round(window, 4)})  # noqa: PLW2901
        vms.append(seen)
    view = LoadView(
        source=spec.source,
        basis=LoadBasis.WINDOW,
        window=spec.window,
        statistic=spec.statistic,
        until=NOW,
        vms=loads,
        pressure={},
        unknown_hosts={},
        problem=None,
        out_of_range=named,
        duplicates={},
        forecast=None,
    )
    return snapshot.model_copy(update={"vms": vms, "load": view})


@st.composite
def cluster(draw: st.DrawFn) -> tuple[Snapshot, dict[str, list[tuple[float, float]]]]:
    end = NOW.timestamp()
    vms = []
    points: dict[str, list[tuple[float, float]]] = {}
    for i in range(draw(st.integers(min_value=0, max_value=6))):
        seen = vm(
            f"vm-{i}",
            f"h{i % 2}",
            vcpus=draw(st.integers(min_value=1, max_value=4)),
            cpu_used=draw(
                st.one_of(
                    st.floats(min_value=0.0, max_value=12.0),
                    st.floats(min_value=0.0, max_value=12.0).map(lambda x: round(x, 4)),
                    st.sampled_from([0.0, -0.0]),
                )
            ),
        )
        if draw(st.booleans()):
            seen = seen.model_copy(update={"state": VmRunState.SHUTOFF})
        vms.append(seen)
        if draw(st.integers(0, 3)) == 0:
            # the window's samples all the short sample's figure (as in ``simulate``, where
            # one sample fills the window): the figure is the sighting's own, or the other zero
            value = seen.cpu_used if draw(st.booleans()) else 0.0
            value = value if value is not None else 0.0
            points[seen.name] = [(end - 60.0 * k, value) for k in range(16)]
        elif draw(st.booleans()):
            offsets = draw(st.lists(st.integers(min_value=-12, max_value=1), max_size=6))
            points[seen.name] = [
                (end + 60.0 * k, draw(st.one_of(rates, st.floats(0.0, 12.0)))) for k in offsets
            ]
    hosts = [host_state("h0"), host_state("h1")]
    return Snapshot(cluster="test", taken_at=NOW, hosts=hosts, vms=vms), points


@settings(max_examples=150, deadline=None)
@given(
    cluster(),
    st.sampled_from([Statistic.MEAN, Statistic.MAX, Statistic.P95]),
    st.sampled_from([5, 10, 15]),
)
def test_the_windowed_snapshot_is_the_straightforward_one(
    made: tuple[Snapshot, dict[str, list[tuple[float, float]]]], stat: Statistic, minutes: int
) -> None:
    snapshot, points = made
    spec = LoadSpec.model_validate(
        {"window": f"{minutes}m", "statistic": stat.value, "sampleEvery": "1m"}
    )
    fast = from_points(snapshot, spec, points, NOW)
    slow = straight(snapshot, spec, points)
    assert fast.model_dump_json(by_alias=True) == slow.model_dump_json(by_alias=True)
    assert fast.model_dump_json(exclude_unset=True) == slow.model_dump_json(exclude_unset=True)
    for a, b in zip(fast.vms, slow.vms, strict=True):
        same_model(a, b)
    assert fast.load is not None
    assert slow.load is not None
    for name, load in fast.load.vms.items():
        same_model(load, slow.load.vms[name])
