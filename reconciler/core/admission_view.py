"""The executor's picture of the cluster for admission, kept across the passes of one run.

Building the admission model of the whole cluster (:func:`reconciler.core.state.build`)
before every start costs in proportion to the cluster, however few hosts changed. An
:class:`AdmissionView` is built once from the round's observation and then follows what
changes between passes: a VM found where its migration left it (:meth:`vm_now_on`) and the
hosts looked at afresh (:meth:`replace_hosts`). Each change recomputes only the hosts and VMs
it names, their totals summed in index order as a build sums them, so the model is the one a
build from the same observation gives (property-tested). A change the model cannot follow in
place drops it and the next pass builds it again: a VM appearing, vanishing or seen on two
hosts, a host becoming reachable or unreachable or changing architecture, a VM's labels
changing (rule membership). While any VM is seen twice or listed in flight, every pass builds
(the model then depends on the migrations running, see :mod:`reconciler.core.admission`).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable
from typing import cast

from reconciler.core.capacity import HostInfo, VmInfo
from reconciler.core.hugepages import pages_moved
from reconciler.core.state import Model, State, build, host_info, vm_info
from reconciler.model.desired import DesiredState
from reconciler.model.snapshot import HostState, InFlight, Snapshot, VmState


class AdmissionView:
    """The working observation (as :func:`merged` snapshots would give it) and its model."""

    def __init__(self, desired: DesiredState, snapshot: Snapshot) -> None:
        self.desired = desired
        self._base = snapshot
        self.taken_at = snapshot.taken_at
        self._cluster = {h.name: h for h in desired.cluster.spec.hosts}
        self._hosts: dict[str, HostState] = {h.name: h for h in snapshot.hosts}
        # name -> [(position in the working snapshot's VM list, sighting)], in that order
        self._sightings: dict[str, list[tuple[int, VmState]]] = {}
        self._names_on: dict[str, set[str]] = {}
        sightings, names_on = self._sightings, self._names_on
        for pos, vm in enumerate(snapshot.vms):  # ``_add`` of each, inline: once per VM
            name, host = vm.name, vm.host
            seen = sightings.get(name)
            if seen is None:
                sightings[name] = [(pos, vm)]
            else:
                seen.append((pos, vm))
            on = names_on.get(host)
            if on is None:
                names_on[host] = {name}
            else:
                on.add(name)
        self._order = itertools.count(len(snapshot.vms))
        self._listed: list[InFlight] = list(snapshot.in_flight)
        self._crowded = {n for n, s in self._sightings.items() if len(s) > 1}
        self._built: tuple[Model, State, State] | None = None
        self._changed = False
        """A change was followed since it was made (the working observation is not the one
        it was made from)."""
        self.builds = 0
        """How often the model was built (once, unless a change could not be followed)."""

    # --- what admission reads ---------------------------------------------------------------

    def sightings(self, name: str) -> list[VmState]:
        return [vm for _, vm in self._sightings.get(name, ())]

    def sighting(self, name: str, host: str | None = None) -> VmState | None:
        """The first sighting of ``name`` (on ``host`` when given), as a scan of the VMs finds."""
        for _, vm in self._sightings.get(name, ()):
            if host is None or vm.host == host:
                return vm
        return None

    @property
    def in_flight(self) -> set[str]:
        """VMs listed in flight by the observation or seen more than once."""
        return {f.name for f in self._listed} | self._crowded

    @property
    def settled(self) -> bool:
        """No VM in flight: the model does not depend on the migrations running."""
        return not self._listed and not self._crowded

    def model(self) -> tuple[Model, State, State]:
        """The model and two states of the observation (only while :attr:`settled`).

        The states are the caller's to change during one judgement, as long as it puts back
        every change before the next update (the admission journals its moves and undoes them).
        """
        assert self.settled, "a model of VMs in flight depends on the moves running"
        if self._built is None:
            # unchanged since it was made: the observation itself (whose model a plan of the
            # same round may have built already, see ``state.build``)
            seen = self._base if not self._changed else self.snapshot()
            built, state = build(self.desired, seen)
            self.builds += 1
            # lists, so a change replaces an entry in place instead of copying the cluster
            model = dataclasses.replace(
                built, hosts=list(built.hosts), vms=list(built.vms), observed=list(built.observed)
            )
            state.model = model  # the same figures: only the model's lists are its own
            self._built = model, state, state.copy()
        return self._built

    def snapshot(self) -> Snapshot:
        """The working observation as one snapshot (the whole cluster: for a build, not a pass)."""
        vms = sorted((pos, vm) for s in self._sightings.values() for pos, vm in s)
        return self._base.model_copy(
            update={
                "hosts": list(self._hosts.values()),
                "vms": [vm for _, vm in vms],
                "taken_at": self.taken_at,
                "in_flight": list(self._listed),
            }
        )

    # --- changes ----------------------------------------------------------------------------

    def vm_now_on(self, name: str, host: str) -> None:
        """``name`` runs on ``host`` now: its first sighting moves there, any other is dropped."""
        seen = self._sightings.get(name)
        if not seen:
            return
        self._changed = True
        pos, first = seen[0]
        was = [vm.host for _, vm in seen]
        if first.host != host:
            self._pages_moved(first, host)
        for h in was:
            self._names_on.get(h, set()).discard(name)
        self._sightings[name] = [(pos, first.model_copy(update={"host": host}))]
        self._names_on.setdefault(host, set()).add(name)
        self._crowded.discard(name)
        if self._built is None:
            return
        if len(was) > 1:
            self._built = None
            return
        self._follow([name], set())

    def replace_hosts(self, fresh: Snapshot) -> None:
        """What ``fresh`` saw of its hosts replaces what was known of them, VMs included."""
        self._changed = True
        seen = {h.name for h in fresh.hosts}
        touched: set[str] = set()
        for h in seen:
            for name in self._names_on.pop(h, set()):
                touched.add(name)
                kept = [(p, vm) for p, vm in self._sightings[name] if vm.host != h]
                if kept:
                    self._sightings[name] = kept
                else:
                    del self._sightings[name]
        for hs in fresh.hosts:
            self._hosts.pop(hs.name, None)
            self._hosts[hs.name] = hs  # after the others, as a merged snapshot lists them
        for vm in fresh.vms:
            touched.add(vm.name)
            self._add(vm)
        self.taken_at = fresh.taken_at
        for name in touched:
            if len(self._sightings.get(name, ())) > 1:
                self._crowded.add(name)
            else:
                self._crowded.discard(name)
        # in flight now: what the merged picture shows on two hosts, not the old listing
        self._listed = self._in_flight()
        if self._built is not None:
            if self.settled:
                self._follow(touched, seen)
            else:
                self._built = None

    # --- the model, followed in place --------------------------------------------------------

    def _follow(self, names: Iterable[str], hosts: Iterable[str]) -> None:
        """Bring the built model in step with new facts about ``hosts`` and the VMs ``names``,
        or drop it when the change is not one a build would give in place."""
        assert self._built is not None
        model, a, b = self._built
        if model.paged:
            self._built = None  # a host's room counts every VM on it: built again
            return
        desired = self.desired
        # the model's own lists (see :meth:`model`): checked first, changed only when all fit
        host_infos = cast("list[HostInfo]", model.hosts)
        vms = cast("list[VmInfo]", model.vms)
        observed = cast("list[int]", model.observed)
        new_hosts: list[HostInfo] = []
        for name in hosts:
            i = model.host_index.get(name)
            if i is None:
                continue
            old = host_infos[i]
            new = host_info(desired, self._cluster[name], i, self._hosts.get(name))
            if (new.known, new.arch, new.accepts) != (old.known, old.arch, old.accepts):
                self._built = None
                return
            if new != old:
                new_hosts.append(new)
        new_vms: list[tuple[VmInfo, int]] = []
        spec = desired.policy.spec
        for name in names:
            v = model.vm_index.get(name)
            seen = self._sightings.get(name)
            vm = seen[0][1] if seen else None
            h = model.host_index.get(vm.host) if vm is not None else None
            if (v is not None) != (h is not None and host_infos[h].known):
                self._built = None  # a VM appears or vanishes: indices shift
                return
            if v is None or vm is None or h is None:
                continue
            if vm.labels != vms[v].labels:
                self._built = None  # rule membership may change
                return
            new_vm = vm_info(vm, spec, v, in_flight=False, shadow=False)
            if new_vm.pages:
                self._built = None  # the model starts counting huge pages
                return
            if new_vm != vms[v] or observed[v] != h:
                new_vms.append((new_vm, h))
        for hi in new_hosts:
            host_infos[hi.index] = hi
        retotal: set[int] = set()
        for new_vm, h in new_vms:
            v = new_vm.index
            retotal.update((observed[v], h))
            vms[v] = new_vm
            observed[v] = h
            for state in (a, b):
                state.move(v, h)
        for state in (a, b):
            for h in retotal:
                _retotal(state, h)

    # --- bookkeeping --------------------------------------------------------------------------

    def _add(self, vm: VmState) -> None:
        self._sightings.setdefault(vm.name, []).append((next(self._order), vm))
        self._names_on.setdefault(vm.host, set()).add(vm.name)

    def _pages_moved(self, vm: VmState, host: str) -> None:
        """``vm`` left its host for ``host``: its pages are free there and taken here."""
        ends = [self._hosts[h] for h in (vm.host, host) if h in self._hosts]
        for h in pages_moved(ends, [(vm, host)]):
            self._hosts[h.name] = h

    def _in_flight(self) -> list[InFlight]:
        out = []
        for name in sorted(self._crowded):
            seen = [vm for _, vm in self._sightings[name]]
            hosts = sorted({str(vm.host) for vm in seen})
            if len(hosts) > 1:
                out.append(InFlight(name=name, uuid=seen[-1].uuid, hosts=hosts))
        return out


def _retotal(state: State, h: int) -> None:
    """Host ``h``'s totals summed afresh in index order, exactly as a build sums them."""
    memory = vcpus = 0
    cpu, mem = state.model.hosts[h].cpu_extra, 0.0
    vms = state.model.vms
    for i in sorted(state.vms_on[h]):
        vm = vms[i]
        memory += vm.memory
        vcpus += vm.vcpus
        cpu += vm.cpu_load
        mem += vm.mem_load
    state.memory[h], state.vcpus[h], state.cpu_load[h], state.mem_load[h] = memory, vcpus, cpu, mem
