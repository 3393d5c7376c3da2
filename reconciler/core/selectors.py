"""Which VMs and hosts a rule's selector picks: name globs (fnmatch) and labels."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from functools import cached_property

from reconciler.model.rules import Selector

_GLOB_CHARS = frozenset("*?[")


def matches(selector: Selector, name: str, labels: Mapping[str, str]) -> bool:
    """True when ``name`` matches one of the globs and every given label is present and equal.

    A selector matches what all of its given fields match; an absent field matches everything.
    Globs are case-sensitive (``fnmatch.fnmatchcase``) so results do not depend on the platform.
    """
    if selector.names is not None and not any(fnmatchcase(name, p) for p in selector.names):
        return False
    return selector.labels is None or all(labels.get(k) == v for k, v in selector.labels.items())


class Index:
    """Selects among many named, labelled items without scanning them for every selector.

    Plain names are looked up, labels intersect per-label sets, and a glob only scans the
    names that share its literal prefix. The result equals filtering with :func:`matches`.
    """

    def __init__(self, items: Sequence[tuple[int, str, Mapping[str, str]]]) -> None:
        # Each table is built on its first use: a rule set that selects VMs by label alone
        # never pays for sorting 27,000 names, and one by name never for the label sets.
        self._items = items
        self._globs: dict[str, frozenset[int]] = {}

    @cached_property
    def _by_name(self) -> dict[str, list[int]]:
        by_name: dict[str, list[int]] = {}
        for i, name, _ in self._items:
            by_name.setdefault(name, []).append(i)
        return by_name

    @cached_property
    def _by_label(self) -> dict[tuple[str, str], set[int]]:
        by_label: dict[tuple[str, str], set[int]] = {}
        for i, _, labels in self._items:
            for kv in labels.items():
                having = by_label.get(kv)
                if having is None:
                    by_label[kv] = {i}
                else:
                    having.add(i)
        return by_label

    @cached_property
    def _names(self) -> list[str]:
        return sorted(self._by_name)

    @cached_property
    def _all(self) -> frozenset[int]:
        return frozenset(i for i, _, _ in self._items)

    def _glob(self, pattern: str) -> frozenset[int]:
        cached = self._globs.get(pattern)
        if cached is not None:
            return cached
        cut = next((k for k, c in enumerate(pattern) if c in _GLOB_CHARS), len(pattern))
        prefix = pattern[:cut]
        found: set[int] = set()
        for k in range(bisect_left(self._names, prefix), len(self._names)):
            name = self._names[k]
            if not name.startswith(prefix):
                break
            if fnmatchcase(name, pattern):
                found.update(self._by_name[name])
        result = frozenset(found)
        self._globs[pattern] = result
        return result

    def select(self, selector: Selector) -> frozenset[int]:
        result: set[int] | frozenset[int] | None = None
        if selector.names is not None:
            named: set[int] = set()
            for p in selector.names:
                if _GLOB_CHARS.isdisjoint(p):
                    named.update(self._by_name.get(p, ()))
                else:
                    named |= self._glob(p)
            result = named
        if selector.labels is not None:
            for kv in sorted(selector.labels.items()):
                having = self._by_label.get(kv, set())
                result = having if result is None else result & having
        return frozenset(self._all if result is None else result)
