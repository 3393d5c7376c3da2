"""Which VMs and hosts a rule's selector picks: name globs (fnmatch) and labels."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from fnmatch import fnmatchcase
from functools import cached_property
from typing import NamedTuple, Protocol

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


class Named(Protocol):
    """An item an :class:`Index` selects among: its own index, name and labels (a model's
    ``VmInfo`` and ``HostInfo`` as they are, so 125,000 VMs need no tuples made for them)."""

    @property
    def index(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, str]: ...


class Item(NamedTuple):
    """A :class:`Named` of its three parts."""

    index: int  # type: ignore[assignment]  # shadows tuple.index(), which nothing calls
    name: str
    labels: Mapping[str, str]


class Index:
    """Selects among many named, labelled items without scanning them for every selector.

    Plain names are looked up, labels intersect per-label sets, and a glob only scans the
    names that share its literal prefix. The result equals filtering with :func:`matches`.
    """

    def __init__(
        self,
        items: Sequence[Named],
        label_keys: Iterable[str] = (),
        by_name: Mapping[str, int] | None = None,
    ) -> None:
        # Each table is built on its first use: a rule set that selects VMs by label alone
        # never pays for sorting 27,000 names, and one by name never for the label sets.
        # Labels are indexed only for the keys selectors ask about (``label_keys``, those the
        # caller knows of, at once; any other when first asked): a label no rule selects on
        # (say ``app`` on every VM) is never gone through.
        self._items = items
        self._globs: dict[str, frozenset[int]] = {}
        self._label_keys = frozenset(label_keys)
        self._by_label: dict[tuple[str, str], set[int]] = {}
        self._indexed: set[str] = set()
        # ``by_name``: the caller's own name -> item, when no two items share a name (a model's
        # VM index), so it is not made again
        self._given: Mapping[str, int | list[int]] | None = by_name

    @cached_property
    def _by_name(self) -> Mapping[str, int | list[int]]:
        """Name -> its item, or its items when the name is not unique (rarely)."""
        if self._given is not None:
            return self._given
        by_name: dict[str, int | list[int]] = {item.name: item.index for item in self._items}
        if len(by_name) < len(self._items):  # gather the items of a repeated name in order
            seen: dict[str, list[int]] = {}
            for item in self._items:
                seen.setdefault(item.name, []).append(item.index)
            by_name.update((name, found) for name, found in seen.items() if len(found) > 1)
        return by_name

    def _named(self, name: str) -> Sequence[int]:
        found = self._by_name.get(name)
        if found is None:
            return ()
        return (found,) if isinstance(found, int) else found

    def _having(self, key: str, value: str) -> set[int]:
        """The items whose label ``key`` is ``value``."""
        if key not in self._indexed:
            keys = (self._label_keys | {key}) - self._indexed
            by_label = self._by_label
            for item in self._items:
                i, labels = item.index, item.labels
                for k in keys:
                    v = labels.get(k)
                    if v is not None:
                        having = by_label.get((k, v))
                        if having is None:
                            by_label[k, v] = {i}
                        else:
                            having.add(i)
            self._indexed |= keys
        return self._by_label.get((key, value), set())

    @cached_property
    def _names(self) -> list[str]:
        return sorted(self._by_name)

    @cached_property
    def _all(self) -> frozenset[int]:
        return frozenset(item.index for item in self._items)

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
                found.update(self._named(name))
        result = frozenset(found)
        self._globs[pattern] = result
        return result

    def select(self, selector: Selector) -> frozenset[int]:
        result: set[int] | frozenset[int] | None = None
        if selector.names is not None:
            named: set[int] = set()
            for p in selector.names:
                if _GLOB_CHARS.isdisjoint(p):
                    named.update(self._named(p))
                else:
                    named |= self._glob(p)
            result = named
        if selector.labels is not None:
            for k, v in sorted(selector.labels.items()):
                having = self._having(k, v)
                result = having if result is None else result & having
        return frozenset(self._all if result is None else result)
