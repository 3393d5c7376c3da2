"""What the forecast changed in a plan (``statistic: forecast``): each host's load over the
window and as forecast beside the blend the plan used, and the moves made ahead of time.

A move is made *ahead of time* when the plan on the window's figures alone (each forecast
VM read on its window's mean, all else equal) does not make it: the forecast differed from
the window's figure enough to change the decision. That plan is made once more, on the same
desired state, history and time, so it costs a second plan; ``plan`` makes it, the rounds of
``run`` and ``apply`` do not.

A host's CPU% over the window is that second plan's ``cpu_before``; as forecast it follows
from the blend, linear in its VMs' figures: ``forecast = window + (blend - window) / weight``
(none with ``weight: 0``, where the forecast plays no part).
"""

from __future__ import annotations

from datetime import datetime

from reconciler.core import planner
from reconciler.model.desired import DesiredState
from reconciler.model.history import History
from reconciler.model.plan import AheadMove, HostLoad, Plan
from reconciler.model.snapshot import Snapshot


def on_window(snapshot: Snapshot) -> Snapshot | None:
    """``snapshot`` with each forecast VM read on its window's mean alone; None when the
    forecast changed no VM's figure."""
    view = snapshot.load
    if view is None or view.forecast is None or not view.forecast.used:
        return None
    used = set(view.forecast.used)
    means = {
        name: load.mean for name, load in view.vms.items() if name in used and load.mean is not None
    }
    if not means:
        return None
    vms = [
        vm.model_copy(update={"cpu_used": round(means[vm.name], 4)}) if vm.name in means else vm
        for vm in snapshot.vms
    ]
    loads = {
        name: load.model_copy(update={"window": means[name]}) if name in means else load
        for name, load in view.vms.items()
    }
    plain = view.model_copy(update={"vms": loads, "forecast": None})
    return snapshot.model_copy(update={"vms": vms, "load": plain})


def ahead_of_time(
    desired: DesiredState, snapshot: Snapshot, history: History, result: Plan, *, now: datetime
) -> Plan:
    """``result`` (planned on ``snapshot``) with each host's load over the window and as
    forecast, and the moves the forecast made (``load.ahead``)."""
    view = snapshot.load
    plain = on_window(snapshot)
    if plain is None or view is None or view.forecast is None or result.load is None:
        return result
    window_plan = planner.plan(desired, plain, history, now=now)
    weight = view.forecast.weight
    window_hosts = {h.host: h for h in window_plan.hosts}
    hosts: list[HostLoad] = []
    for h in result.hosts:
        w = window_hosts.get(h.host)
        if not h.known or w is None or not w.known:
            hosts.append(h)
            continue
        fc = w.cpu_before + (h.cpu_before - w.cpu_before) / weight if weight > 0 else None
        hosts.append(
            h.model_copy(
                update={
                    "cpu_window": w.cpu_before,
                    "cpu_forecast": None if fc is None else round(max(0.0, fc), 3),
                }
            )
        )
    made = {(m.vm, m.source, m.target) for m in (*window_plan.moves, *window_plan.deferred)}
    by_name = {h.host: h for h in hosts}
    start = view.until
    end = start + view.forecast.horizon
    ahead: list[AheadMove] = []
    for m in (*result.moves, *result.deferred):
        if (m.vm, m.source, m.target) in made:
            continue
        host = by_name.get(m.source)
        if host is None or host.cpu_window is None:
            continue
        ahead.append(
            AheadMove(
                vm=m.vm,
                source=m.source,
                target=m.target,
                host=m.source,
                forecast=host.cpu_forecast if host.cpu_forecast is not None else host.cpu_before,
                window=host.cpu_window,
                start=start,
                end=end,
            )
        )
    load = result.load.model_copy(update={"ahead": ahead})
    return result.model_copy(update={"hosts": hosts, "load": load})
