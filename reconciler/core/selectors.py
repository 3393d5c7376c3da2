"""Which VMs and hosts a rule's selector picks: name globs (fnmatch) and labels."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase

from reconciler.model.rules import Selector


def matches(selector: Selector, name: str, labels: Mapping[str, str]) -> bool:
    """True when ``name`` matches one of the globs and every given label is present and equal.

    A selector matches what all of its given fields match; an absent field matches everything.
    Globs are case-sensitive (``fnmatch.fnmatchcase``) so results do not depend on the platform.
    """
    if selector.names is not None and not any(fnmatchcase(name, p) for p in selector.names):
        return False
    return selector.labels is None or all(labels.get(k) == v for k, v in selector.labels.items())


def selected(
    selector: Selector, items: Iterable[tuple[int, str, Mapping[str, str]]]
) -> frozenset[int]:
    """Indices of the ``(index, name, labels)`` items the selector matches."""
    return frozenset(i for i, name, labels in items if matches(selector, name, labels))
