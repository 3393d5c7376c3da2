"""Safe YAML reading that remembers where every value came from.

PyYAML composes the node graph (with libyaml's C parser when PyYAML was built with it, several
times faster on large folders); the values are built here, node by node, so that each value's
line and column are kept and so that duplicate keys, alias expansion bombs, unknown tags and
deep nesting are refused with a position instead of a traceback.
"""

from __future__ import annotations

import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from reconciler.errors import DocumentError

MAX_FILE_BYTES: Final = 16 * 1024 * 1024
"""Larger files are refused before they are read (a Placement of 125,000 VMs is about 3 MiB)."""
MAX_NODES: Final = 100_000
"""Values a document may expand to beyond its own length, aliases counted each time they are
used: written out, a document has fewer values than characters, so only nested aliases reach
more than ``max(MAX_NODES, len(text))``."""
MAX_DEPTH: Final = 64
"""Nesting of mappings and lists a document may have."""

DocPath = tuple[str | int, ...]
"""A place inside one YAML document: keys and list indices from its root."""
Position = tuple[int, int]
"""(line, column), both 1-based."""

_TAG = "tag:yaml.org,2002:"
_SCALAR_TAGS: Final = {f"{_TAG}{t}" for t in ("null", "bool", "int", "float", "str")}
_STR_TAG: Final = f"{_TAG}str"
_TIMESTAMP_TAG: Final = f"{_TAG}timestamp"
_MERGE_TAG: Final = f"{_TAG}merge"
_SYNTAX_HINT: Final = "check the indentation, the quotes and the ':' after each key near here"

_FAST_LOADER: Final[type[yaml.SafeLoader] | None] = getattr(yaml, "CSafeLoader", None)
"""libyaml's parser: the same marks (line and column in characters) as the pure one."""


@dataclass(frozen=True)
class Document:
    """One YAML document of a file, as plain values, with the position of each value."""

    file: str
    index: int
    data: dict[str, Any]
    values: Mapping[DocPath, Position]
    keys: Mapping[DocPath, Position] = field(default_factory=dict)
    raw: Mapping[DocPath, str] = field(default_factory=dict)

    def position(self, path: DocPath, *, key: bool = False) -> Position:
        """Where ``path`` is written; the nearest enclosing value when it is absent.

        ``key=True`` prefers the key's own position (for unknown or misspelled keys).
        """
        for end in range(len(path), -1, -1):
            prefix = path[:end]
            if key and prefix in self.keys:
                return self.keys[prefix]
            if prefix in self.values:
                return self.values[prefix]
        return (1, 1)


def _mark(node: Node) -> Position:
    return (node.start_mark.line + 1, node.start_mark.column + 1)


class _Builder:
    """Turns composed nodes into dicts, lists and scalars, counting every expansion."""

    def __init__(self, file: str, budget: int = MAX_NODES) -> None:
        self.file = file
        self.limit = max(MAX_NODES, budget)
        self.budget = self.limit
        self.values: dict[DocPath, Position] = {}
        self.keys: dict[DocPath, Position] = {}
        self.raw: dict[DocPath, str] = {}
        self.constructor = yaml.SafeLoader("")

    def fail(
        self, node: Node, message: str, hint: str, at: Position | None = None
    ) -> DocumentError:
        line, column = at or _mark(node)
        return DocumentError(message, file=self.file, line=line, column=column, hint=hint)

    def build(self, node: Node, path: DocPath) -> Any:
        self.budget -= 1
        if self.budget < 0:
            raise self.fail(
                node,
                f"the document expands to more than {self.limit} values (anchors and aliases "
                "repeated inside each other)",
                "write the values out instead of nesting aliases",
                at=self.keys.get(path[:1]),  # the top-level key whose value explodes
            )
        if len(path) > MAX_DEPTH:
            raise self.fail(
                node,
                f"the document is nested more than {MAX_DEPTH} levels deep",
                "flatten the structure; cluster-state documents need a few levels",
            )
        self.values[path] = _mark(node)
        if isinstance(node, ScalarNode):
            self.raw[path] = node.value
            return self.scalar(node)
        if isinstance(node, SequenceNode):
            return [self.build(child, (*path, i)) for i, child in enumerate(node.value)]
        if isinstance(node, MappingNode):
            return self.mapping(node, path)
        raise self.fail(node, "unsupported YAML node", "use mappings, lists and plain values")

    def mapping(self, node: MappingNode, path: DocPath) -> dict[str, Any]:
        out: dict[str, Any] = {}
        shallow = len(path) < MAX_DEPTH  # a child's path is within the depth build() allows
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                raise self.fail(
                    key_node,
                    "merge keys (<<) are not supported",
                    "write the keys out in this mapping",
                )
            if not isinstance(key_node, ScalarNode):
                raise self.fail(
                    key_node, "a key must be a plain value", "use a name, not a list or mapping"
                )
            key = str(key_node.value)
            if key in out:
                first_line, _ = self.keys[(*path, key)]
                raise self.fail(
                    key_node,
                    f"duplicate key {key!r} (first on line {first_line})",
                    "keep one of the two; YAML would silently use the last",
                )
            child = (*path, key)
            self.keys[child] = _mark(key_node)
            if type(value_node) is ScalarNode and value_node.tag == _STR_TAG and shallow:
                # inline build() for a plain string: a Placement has tens of thousands
                self.budget -= 1
                if self.budget < 0:
                    self.budget += 1
                    out[key] = self.build(value_node, child)  # raises where build() does
                    continue
                self.values[child] = _mark(value_node)
                self.raw[child] = out[key] = value_node.value
            else:
                out[key] = self.build(value_node, child)
        return out

    def scalar(self, node: ScalarNode) -> Any:
        if node.tag in (_STR_TAG, _TIMESTAMP_TAG):  # most values: kept as written
            return node.value
        if node.tag not in _SCALAR_TAGS:
            raise self.fail(
                node,
                f"unsupported tag {node.tag}",
                "remove the tag; write plain strings, numbers, true/false or null",
            )
        try:
            return self.constructor.construct_object(node)  # type: ignore[no-untyped-call]
        except (yaml.YAMLError, ValueError) as exc:
            raise self.fail(
                node, f"unreadable value {node.value!r}: {exc}", "fix the value"
            ) from exc


def _position_in(text: str, offset: int) -> Position:
    before = text[:offset]
    line = before.count("\n") + 1
    return (line, offset - (before.rfind("\n") + 1) + 1)


def _yaml_error(exc: yaml.YAMLError, text: str, file: str) -> DocumentError:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        problem = exc.problem or "syntax error"
        if exc.context:
            problem = f"{problem} ({exc.context})"
        return DocumentError(
            f"malformed YAML: {problem}",
            file=file,
            line=mark.line + 1,
            column=mark.column + 1,
            hint=_SYNTAX_HINT,
        )
    if isinstance(exc, yaml.reader.ReaderError):
        line, column = _position_in(text, exc.position)
        return DocumentError(
            f"the file holds a control character #x{exc.character:04x}",
            file=file,
            line=line,
            column=column,
            hint="remove it; cluster-state files are plain UTF-8 text",
        )
    return DocumentError(f"malformed YAML: {exc}", file=file, hint=_SYNTAX_HINT)


def _flow_depth_error(text: str, file: str) -> DocumentError | None:
    """Refuse deeply nested ``[``/``{`` before PyYAML, whose scanner slows down on them."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return None
    depth = 0
    quote = ""
    comment = False
    for offset, char in enumerate(text):
        if comment:
            comment = char != "\n"
        elif quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char == "#":
            comment = True
        elif char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                line, column = _position_in(text, offset)
                return DocumentError(
                    f"the document is nested more than {MAX_DEPTH} levels deep",
                    file=file,
                    line=line,
                    column=column,
                    hint="flatten the structure; cluster-state documents need a few levels",
                )
        elif char in "]}":
            depth = max(0, depth - 1)
    return None


def _composed(text: str, file: str) -> list[Node | None]:
    """The node graph of every document, from the C parser when there is one.

    A document the C parser refuses is parsed again by the pure one, whose error messages and
    positions (in characters, where libyaml counts bytes for some errors) are the ones we show.
    """
    if _FAST_LOADER is not None:
        try:
            return list(yaml.compose_all(text, Loader=_FAST_LOADER))
        except yaml.YAMLError:
            pass
    try:
        return list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, text, file) from None


def documents_from_text(text: str, file: str) -> list[Document]:
    """Every non-empty document of ``text``; raises DocumentError on the first problem."""
    error = _flow_depth_error(text, file)
    if error is not None:
        raise error
    out: list[Document] = []
    try:
        for index, node in enumerate(_composed(text, file)):
            if node is None or (isinstance(node, ScalarNode) and node.tag == f"{_TAG}null"):
                continue
            builder = _Builder(file, len(text))
            if not isinstance(node, MappingNode):
                kind = "a list" if isinstance(node, SequenceNode) else f"the value {node.value!r}"
                raise builder.fail(
                    node,
                    f"a document must be a mapping, found {kind}",
                    "start the document with apiVersion:, kind:, metadata: and spec:",
                )
            builder.values[()] = _mark(node)
            data = builder.mapping(node, ())
            out.append(Document(file, index, data, builder.values, builder.keys, builder.raw))
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, text, file) from None
    except RecursionError:
        raise DocumentError(
            "the document is nested too deeply to read",
            file=file,
            hint="flatten the structure; cluster-state documents need a few levels",
        ) from None
    return out


_FILE_TYPES: Final = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _file_type(mode: int) -> str:
    return next((name for test, name in _FILE_TYPES if test(mode)), "a special file")


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def read_documents(path: Path, *, root: Path) -> list[Document]:
    """The documents of one file in the folder ``root``, after refusing unsafe files.

    Refuses a symlink that leads outside ``root``, anything but a regular file, files over
    MAX_FILE_BYTES (checked before reading), binary files and text that is not UTF-8.
    """
    file = str(path)
    try:
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            target = path.resolve(strict=True)
            if not _inside(target, root.resolve()):
                raise DocumentError(
                    f"symlink leads outside the folder, to {target}",
                    file=file,
                    hint="copy the file into the folder instead of linking to it",
                )
            info = target.stat()
        if not stat.S_ISREG(info.st_mode):  # decided from stat: a FIFO is never opened
            raise DocumentError(
                f"{_file_type(info.st_mode)}, not a regular file",
                file=file,
                hint="cluster-state files are plain files; remove it or rename it without " ".yaml",
            )
        if info.st_size > MAX_FILE_BYTES:
            raise DocumentError(
                f"file is {info.st_size} bytes, over the limit of {MAX_FILE_BYTES} bytes (16 MiB)",
                file=file,
                hint="split it into smaller files, or check that it belongs in the folder",
            )
        with path.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop
        raise DocumentError(
            f"cannot read the file: {getattr(exc, 'strerror', None) or exc}",
            file=file,
            hint="check that it exists and is readable",
        ) from None
    if len(raw) > MAX_FILE_BYTES:
        raise DocumentError(
            f"file is over the limit of {MAX_FILE_BYTES} bytes (16 MiB)",
            file=file,
            hint="split it into smaller files, or check that it belongs in the folder",
        )
    return documents_from_text(_decoded(raw, file), file)


def _decoded(raw: bytes, file: str) -> str:
    if b"\x00" in raw:
        line, column = _position_in(raw.decode("latin-1"), raw.index(b"\x00"))
        raise DocumentError(
            "binary file (it holds NUL bytes)",
            file=file,
            line=line,
            column=column,
            hint="only YAML text files belong in a cluster folder",
        )
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line, column = _position_in(raw.decode("latin-1"), exc.start)
        raise DocumentError(
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x})",
            file=file,
            line=line,
            column=column,
            hint="save the file as UTF-8",
        ) from None
