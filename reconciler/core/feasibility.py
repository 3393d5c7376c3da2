"""Whether one move may happen now, and what it costs in preferred rules.

A move of VM ``v`` to host ``t`` is feasible when ``t`` is known, not in maintenance, of the
same CPU architecture as the VM's host, has room (memory incl. reserves, huge pages of the VM's
size when it is backed by them, vCPUs within ``cpuOvercommit``, CPU and memory utilisation
within ``hostLimit``), every required host rule of ``v`` permits ``t``, and no required group
rule of ``v`` gets a higher violation measure.
A VM that shares its host with another member of one of its required affinity groups never
moves alone: that would split its unit (see :mod:`reconciler.core.units`), even where the
affinity is broken already and its measure would not rise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from reconciler.core.capacity import pct
from reconciler.core.hugepages import refusal_text
from reconciler.core.rules import describe_kind, domain_of
from reconciler.core.state import State
from reconciler.model.quantity import format_size

EPSILON = 1e-9


@dataclass(frozen=True, slots=True, eq=False)
class Refusal:
    """Why a host cannot take a VM: ``category`` groups refusals, ``text`` explains one
    (``said``: the text, or what writes it when it is read: a search refuses hosts millions
    of times and reads few of the reasons)."""

    category: str
    said: str | Callable[[], str]

    @property
    def text(self) -> str:
        return self.said if isinstance(self.said, str) else self.said()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Refusal):
            return NotImplemented
        return (self.category, self.text) == (other.category, other.text)

    def __hash__(self) -> int:
        return hash((self.category, self.text))

    def __repr__(self) -> str:
        return f"Refusal(category={self.category!r}, text={self.text!r})"


def _gib(size: float) -> str:
    return format_size(int(size)) if size >= 0 else "-" + format_size(int(-size))


def check_move(state: State, v: int, t: int, *, alone: bool = True) -> Refusal | None:
    """None when VM ``v`` may move to host ``t`` in ``state``, else the first reason it may not.

    ``alone=False``: ``v`` moves with the rest of its unit, which the caller checks as a whole.
    """
    model = state.model
    host = model.hosts[t]
    if not host.known:
        return Refusal("unreachable", f"{host.name} is unreachable")
    if host.maintenance:
        return Refusal("maintenance", f"{host.name} is in maintenance")
    s = state.host_of[v]
    if s == t:
        return Refusal("current", f"the VM already runs on {host.name}")
    if s >= 0 and model.hosts[s].arch != host.arch:
        return Refusal("arch", f"{host.name} is {host.arch}, the VM runs on {model.hosts[s].arch}")
    vm = model.vms[v]
    free = host.usable_memory - state.memory[t]
    if vm.memory > free:
        return Refusal(
            "memory", lambda: f"{host.name} has {_gib(free)} free, the VM needs {_gib(vm.memory)}"
        )
    if vm.pages and host.page_room is not None and state.pages is not None:
        room = host.page_room.get(vm.page_kib, 0)
        need = state.pages[t].get(vm.page_kib, 0) + vm.pages
        if need > room:
            return Refusal("hugepages", refusal_text(host.name, vm.page_kib, room, need))
    if state.vcpus[t] + vm.vcpus > host.vcpu_capacity + EPSILON:
        return Refusal(
            "vcpus",
            f"{host.name} would carry {state.vcpus[t] + vm.vcpus} vCPUs, "
            f"at most {host.vcpu_capacity:g} allowed",
        )
    limit = model.weights.host_limit
    cpu = pct(state.cpu_load[t] + vm.cpu_load, host.cpu_den)
    if cpu > limit + EPSILON:
        return Refusal(
            "hostLimit", f"{host.name} CPU would reach {cpu:.0f}% (hostLimit {limit:g}%)"
        )
    mem = pct(state.mem_load[t] + vm.mem_load, host.usable_memory)
    if mem > limit + EPSILON:
        return Refusal(
            "hostLimit", f"{host.name} memory would reach {mem:.0f}% (hostLimit {limit:g}%)"
        )
    return check_rules(state, v, t, alone=alone)


def check_rules(state: State, v: int, t: int, *, alone: bool = True) -> Refusal | None:
    """The required rules of ``v`` alone: host rules permit ``t``, group measures do not rise
    and, when ``alone``, no required affinity partner shares its host."""
    model = state.model
    for r in model.rules.host_rules[v]:
        if r.required and not r.permits(t):
            return Refusal(
                f"rule {r.name}",
                f"{describe_kind(r.kind)} {r.name} keeps it off {model.hosts[t].name}",
            )
    s = state.host_of[v]
    groups = model.rules.groups
    for gi in model.rules.vm_groups[v]:
        g = groups[gi]
        if not g.required:
            continue
        a, b = domain_of(g, s), domain_of(g, t)
        if a == b:
            continue
        dc = state.counts[gi]
        if alone and g.kind == "affinity" and dc.count(a) > 1:
            return Refusal(
                f"rule {g.name}",
                f"affinity {g.name} holds it with another member on {model.hosts[s].name}: "
                "they move together",
            )
        before = dc.measure()  # first: the probe may register the target's domain
        if dc.key_if_moved(a, b)[0] > before:
            return Refusal(
                f"rule {g.name}",
                f"{describe_kind(g.kind)} {g.name} would be broken on {model.hosts[t].name}",
            )
    return None


def preferred_delta(state: State, v: int, t: int) -> tuple[int, int]:
    """(preferred rules the move breaks or worsens, preferred rules it repairs or improves)."""
    model = state.model
    if v not in model.rules.preferred:  # no preferred rule selects it: none to break or repair
        return 0, 0
    s = state.host_of[v]
    breaks = repairs = 0
    for r in model.rules.host_rules[v]:
        if r.required:
            continue
        before = s < 0 or r.permits(s)
        after = r.permits(t)
        breaks += before and not after
        repairs += after and not before
    groups = model.rules.groups
    for gi in model.rules.vm_groups[v]:
        g = groups[gi]
        if g.required:
            continue
        a, b = domain_of(g, s), domain_of(g, t)
        if a == b:
            continue
        dc = state.counts[gi]
        before_m, after_m = dc.measure(), dc.key_if_moved(a, b)[0]
        breaks += after_m > before_m
        repairs += after_m < before_m
    return breaks, repairs
