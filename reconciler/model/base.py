"""Shared base classes and typed identifiers of every model."""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, NewType

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

HostName = NewType("HostName", str)
"""A host's name as in the Cluster document."""
VmName = NewType("VmName", str)
"""A libvirt domain name; unique within a cluster."""
VmUuid = NewType("VmUuid", str)
"""A libvirt domain UUID; it survives live migration and renames."""
RuleName = NewType("RuleName", str)

API_VERSION: Final = "placement/v1alpha1"
ApiVersion = Literal["placement/v1alpha1"]

# Names used as hosts, VMs and rules: what libvirt accepts for a domain name, minus '/'.
NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:+-]{0,127}$"
LABEL_KEY_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9_./-]{0,61}[A-Za-z0-9])?$"
REF_NAME_PATTERN = r"^(?!.*\.\.)(?!.*\.$)(?!.*\.lock$)[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$"
"""A name that is also one component of a git ref name: ``NAME_PATTERN`` without ``:``,
``..``, a trailing ``.`` or ``.lock``. For JSON Schema; the models check it with
``ref_component_problem``, which says which rule a name breaks."""

_REF_FORBIDDEN: Final = frozenset(" ~^:?*[\\")


def ref_component_problem(name: str) -> str | None:
    """Which rule of ``git check-ref-format`` keeps ``name`` from being one component of a
    ref name (``refs/reconciler/lease/<name>``), as "a name that ...", or None when git
    accepts it."""
    if not name:
        return "an empty name"
    bad = next((c for c in name if c in _REF_FORBIDDEN or ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        return f"a name that holds {repr(bad) if bad.isprintable() else f'U+{ord(bad):04X}'}"
    for rule, broken in (
        ("holds '/' (it separates the parts of a ref name)", "/" in name),
        ("starts with '.'", name.startswith(".")),
        ("holds '..'", ".." in name),
        ("ends with '.lock'", name.endswith(".lock")),
        ("ends with '.'", name.endswith(".")),
        ("holds '@{' or is '@'", "@{" in name or name == "@"),
    ):
        if broken:
            return f"a name that {rule}"
    return None


def ref_component_suggestion(name: str) -> str:
    """``name`` changed as little as possible into one that git accepts in a ref name."""
    out = "".join(
        "-" if c in _REF_FORBIDDEN or c == "/" or ord(c) < 32 or ord(c) == 127 else c for c in name
    ).replace("@{", "@-")
    while ".." in out:
        out = out.replace("..", ".")
    if out.endswith(".lock"):
        out = out[: -len(".lock")] + "-lock"
    return out.strip(".") or "cluster"


def _ref_safe(what: str) -> AfterValidator:
    def check(name: str) -> str:
        problem = ref_component_problem(name)
        if problem is not None:
            raise ValueError(
                f"{what} {name!r} cannot be part of a git ref name: git check-ref-format "
                f"refuses {problem}; rename it, e.g. {ref_component_suggestion(name)!r}"
            )
        return name

    return AfterValidator(check)


_REF_SAFE_SCHEMA: Final = {"pattern": REF_NAME_PATTERN}
ClusterName = Annotated[
    str,
    Field(pattern=NAME_PATTERN, json_schema_extra=_REF_SAFE_SCHEMA),
    _ref_safe("cluster name"),
]
"""A cluster's name: it names git refs (``reconciler/observed/<cluster>``,
``refs/reconciler/lease/<cluster>``) and folders of the state directory."""
RefSafeHostName = Annotated[
    str,
    Field(pattern=NAME_PATTERN, json_schema_extra=_REF_SAFE_SCHEMA),
    _ref_safe("host name"),
]
"""A host's name in the Cluster document: it names git refs
(``reconciler/maintenance/<cluster>/<host>``)."""


class Frozen(BaseModel):
    """Immutable data with unknown keys rejected; the base of every model."""

    # camelCase in every public format (YAML, JSON, schemas): the alias of every field is its
    # camelCase name unless the field sets one; Python code uses the snake_case names.
    # A model builds its validator the first time it is used, so a command pays only for
    # the models it reads, not for every model its imports define.
    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        populate_by_name=True,
        alias_generator=to_camel,
        defer_build=True,
    )


class Metadata(Frozen):
    """Identifies one document."""

    name: str = Field(pattern=NAME_PATTERN, description="Name of this document.")
    annotations: dict[str, str] = Field(
        default_factory=dict, description="Free-form notes for people; ignored by the reconciler."
    )


def fields_of(model: BaseModel) -> dict[str, Any]:
    """``model``'s field values by field name: the model's own ``__dict__``, not a copy.

    For passes over every sighting of a large cluster (125,000 at 5,000 hosts): pydantic's
    models define ``__getattr__``, so each ``vm.name`` goes through Python's slower attribute
    hook, and ``fields_of(vm)["name"]`` reads the same value in about half the time. Read
    only; a frozen model's values must not be changed through it.
    """
    return model.__dict__
