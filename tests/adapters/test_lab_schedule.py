"""``lab load --schedule``: a daily-like cycle compressed into minutes, parsed with errors that
say which point is wrong, and followed on time (a ramp between points, told as each segment
begins) without a lab: a fake clock, and the words the guest would be told."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.adapters.lab.workload import Schedule, follow, parse_schedule
from reconciler.cli import main
from reconciler.errors import ConfigError


def test_a_schedule_is_points_of_a_cycle_between_which_the_cpu_ramps() -> None:
    s = parse_schedule("0m:10, 5m:80, 10m:10")
    assert s.points == ((0, 10), (300, 80), (600, 10))
    assert s.period == 600
    assert s.settings(0) == {"cpu": 10, "pattern": "ramp", "to": 80, "over": 300}
    assert s.settings(299) == {"cpu": 10, "pattern": "ramp", "to": 80, "over": 300}
    assert s.settings(300) == {"cpu": 80, "pattern": "ramp", "to": 10, "over": 300}
    assert s.settings(600) == s.settings(0)  # the cycle repeats
    assert s.next_change(0) == 300
    assert s.next_change(650) == 900
    flat = parse_schedule("0s:40,30s:40,60s:90")
    assert flat.settings(10) == {"cpu": 40, "pattern": "steady"}


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("0m:10", "needs 2 to 100 points"),
        ("0m:10,5m", "point 2, '5m', is not OFFSET:CPU"),
        ("1m:10,5m:20", "the first point, '1m:10', must be at 0"),
        ("0m:10,5m:20,5m:30", "point 3, '5m:30', is not later than the point before it"),
        ("0m:10,5m:120", "point 2's CPU: must be a whole percentage 0-100"),
        ("0m:10,5x:20", "point 2's offset: must be a duration"),
    ],
)
def test_a_bad_schedule_says_which_point_and_how_to_fix_it(text: str, said: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_schedule(text)
    assert said in str(err.value.message)
    assert err.value.hint is not None
    assert "OFFSET:CPU in time order" in err.value.hint


class Clock:
    def __init__(self, answer: float = 0.0) -> None:
        self.now = 1000.0
        self.answer = answer
        """Seconds each answer of the guest takes."""
        self.told: list[tuple[float, dict[str, int | str]]] = []

    def tell(self, settings: dict[str, int | str]) -> None:
        self.told.append((self.now - 1000.0, settings))
        self.now += self.answer

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.now += seconds


def test_each_segment_is_told_as_it_begins_for_the_cycles_asked() -> None:
    c = Clock()
    told = follow(
        parse_schedule("0m:10,5m:80,10m:10"),
        c.tell,
        clock=lambda: c.now,
        sleep=c.sleep,
        cycles=2,
    )
    assert told == 4
    assert [(at, s["cpu"], s.get("to")) for at, s in c.told] == [
        (0, 10, 80),
        (300, 80, 10),
        (600, 10, 80),
        (900, 80, 10),
    ]
    assert c.now - 1000.0 == 1200  # it ends with the last cycle


def test_a_slow_guest_shifts_nothing_the_schedule_keeps_its_time() -> None:
    c = Clock(answer=7.0)
    follow(
        parse_schedule("0s:0,60s:100,120s:0"), c.tell, clock=lambda: c.now, sleep=c.sleep, cycles=3
    )
    assert [at for at, _ in c.told] == [0, 60, 120, 180, 240, 300]


@given(
    st.lists(st.tuples(st.integers(1, 600), st.integers(0, 100)), min_size=1, max_size=8),
    st.integers(0, 100),
    st.floats(0, 10_000),
)
def test_the_segment_at_any_time_is_the_one_of_its_place_in_the_cycle(
    steps: list[tuple[int, int]], first: int, elapsed: float
) -> None:
    points = [(0, first)]
    for gap, cpu in steps:
        points.append((points[-1][0] + gap, cpu))
    s = Schedule(tuple(points))
    at, cpu, to, seconds = s.segment(elapsed)
    into = int(elapsed) % s.period
    assert at <= into < at + seconds
    assert (at, cpu) in points
    assert (at + seconds, to) in points
    assert s.next_change(elapsed) > elapsed - 1


def test_lab_load_follows_the_schedule_telling_the_guest_each_part(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The command without a lab: the guest's console replaced by a recorder, time by a fake."""
    from reconciler.adapters import lab as libvirt_lab
    from reconciler.adapters.lab.guest_console import LoadAnswer
    from reconciler.adapters.lab.workload import from_settings

    now = [0.0]
    told: list[dict[str, int | str]] = []

    def set_load(directory: Path, vm: str, changes: dict[str, int | str]) -> LoadAnswer:
        told.append(changes)
        words = {"dirty": "0", "wss": "16", **{k: str(v) for k, v in changes.items()}}
        return LoadAnswer(vm=vm, host="kvm-01", workload=from_settings(words))

    def sleep(seconds: float) -> None:
        now[0] += seconds

    monkeypatch.setattr(libvirt_lab, "set_load", set_load)
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    monkeypatch.setattr(time, "sleep", sleep)
    args = ["lab", "load", "web-1", "--dir", str(tmp_path), "--schedule", "0m:10,5m:80,10m:10"]
    assert main([*args, "--cycles", "1", "--dirty", "5"]) == 0
    assert told == [
        {"dirty": 5, "cpu": 10, "pattern": "ramp", "to": 80, "over": 300},
        {"dirty": 5, "cpu": 80, "pattern": "ramp", "to": 10, "over": 300},
    ]
    out = capsys.readouterr().out
    assert "web-1 follows a 10m cycle of 3 points until 1 cycle(s)" in out
    assert "300s web-1 on kvm-01: cpu 80%, dirty 5 MiB/s over 16 MiB, ramp to 10% over 300s" in out


def test_a_bad_schedule_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "load", "web-1", "--schedule", "0m:10,5m"]) == 2
    err = capsys.readouterr().err
    assert "point 2, '5m', is not OFFSET:CPU" in err
    assert 'in time order from 0, e.g. --schedule "0m:10,5m:80,10m:10"' in err
    assert main(["lab", "load", "web-1", "--schedule", "0m:10,5m:20", "--ramp", "80,2m"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
