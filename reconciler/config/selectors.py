"""What a selector picks, as far as it can be known from the documents alone.

Hosts are all known (the Cluster lists them); VMs are not: only names written literally in the
rules and the placement are known, and a selector with labels picks an unknown set of VMs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fnmatch import fnmatchcase

from reconciler.core.selectors import Index, Item, matches
from reconciler.core.semantics import selects_name
from reconciler.model.cluster import Host
from reconciler.model.desired import DesiredState
from reconciler.model.rules import Selector

GLOB_CHARS = "*?["


def is_glob(name: str) -> bool:
    return any(c in name for c in GLOB_CHARS)


_INDEXES: dict[int, tuple[Sequence[Host], Index]] = {}
"""Index of a host list by its identity: the same Cluster's hosts are asked about thousands of
times (once per rule), so each list is indexed once. The list is kept with its index, so its
identity cannot be reused while the entry lives."""
_MAX_INDEXES = 16


def _index_of(hosts: Sequence[Host]) -> Index:
    entry = _INDEXES.get(id(hosts))
    if entry is not None and entry[0] is hosts:
        return entry[1]
    if len(_INDEXES) >= _MAX_INDEXES:
        _INDEXES.clear()
    index = Index([Item(i, h.name, h.labels) for i, h in enumerate(hosts)])
    _INDEXES[id(hosts)] = (hosts, index)
    return index


def hosts_matching(selector: Selector, hosts: Iterable[Host]) -> list[Host]:
    """The hosts ``selector`` picks, in their order: every given field must match.

    Uses the core's own selection (the planner's meaning), through an index when asked about a
    list of many hosts.
    """
    if not isinstance(hosts, list | tuple) or len(hosts) < 16:
        return [host for host in hosts if matches(selector, host.name, host.labels)]
    picked = _index_of(hosts).select(selector)
    return [hosts[i] for i in sorted(picked)]


def known_vm_names(desired: DesiredState) -> set[str]:
    """VM names written literally in the rules or the placement."""
    names = set(desired.placement.spec.vms)
    for rule in desired.rules.spec.rules:
        names.update(n for n in rule.vms.names or () if not is_glob(n))
    return names


def selects_vm(selector: Selector, vm: str) -> bool | None:
    """Whether ``selector`` picks the VM named ``vm``; None when it depends on VM labels."""
    if not selects_name(selector, vm):
        return False
    return None if selector.labels is not None else True


class KnownVms:
    """The VMs a folder names literally, indexed so that each selector is resolved without
    scanning every VM (a large Placement lists tens of thousands)."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = list(names)
        self._index = Index([Item(i, n, {}) for i, n in enumerate(self.names)])

    def surely_selected(self, selector: Selector) -> list[str]:
        """The known VMs ``selector`` surely picks, in the order given; none when it depends
        on VM labels (see :func:`selects_vm`)."""
        if selector.labels is not None:
            return []
        return [self.names[i] for i in sorted(self._index.select(selector))]


def known_members(selector: Selector, known: KnownVms) -> set[str] | None:
    """The known VMs ``selector`` picks; None when that depends on VM labels."""
    if selector.labels is not None:
        return None
    return set(known.surely_selected(selector))


def literal_members(selector: Selector) -> set[str] | None:
    """The exact members when the selector lists names only, without globs; else None."""
    if selector.labels is not None or selector.names is None:
        return None
    if any(is_glob(n) for n in selector.names):
        return None
    return set(selector.names)


def unknown_host_hint(name: str, hosts: Sequence[Host]) -> str:
    """The hint of a host name (or glob) that picks no host of the Cluster: the closest name,
    and every name there is."""
    names = [h.name for h in hosts]
    import difflib  # only for the hint of a bad name: off every valid run's path

    close = difflib.get_close_matches(name, names, n=1)
    listed = ", ".join(names)
    if close:
        return f"did you mean {close[0]!r}? the Cluster has {listed}"
    return f"use a host of the Cluster: {listed}"


def covers(outer: Selector, inner: Selector) -> bool:
    """True when every VM ``inner`` can pick is surely picked by ``outer``."""
    if outer == inner:
        return True
    if outer.labels is not None and (
        inner.labels is None or not outer.labels.items() <= inner.labels.items()
    ):
        return False
    if outer.names is None:
        return True
    if "*" in outer.names:
        return True
    if inner.names is None:
        return False
    return all(
        n in outer.names or (not is_glob(n) and any(fnmatchcase(n, g) for g in outer.names))
        for n in inner.names
    )
