"""The YAML reader: positions of values, and refusal of unsafe or ambiguous input."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from reconciler.config import yaml_source
from reconciler.config.yaml_source import (
    MAX_FILE_BYTES,
    documents_from_text,
    read_documents,
)
from reconciler.errors import DocumentError

BILLION_LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n"
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
)


def _error(text: str) -> DocumentError:
    with pytest.raises(DocumentError) as info:
        documents_from_text(text, "f.yaml")
    return info.value


def test_positions_of_values_and_keys_are_one_based() -> None:
    (doc,) = documents_from_text("a: 1\nb:\n  - x\n  - {c: d}\n", "f.yaml")
    assert doc.data == {"a": 1, "b": ["x", {"c": "d"}]}
    assert doc.position(("a",)) == (1, 4)
    assert doc.position(("b", 1, "c")) == (4, 9)
    assert doc.position(("b", 1, "c"), key=True) == (4, 6)
    assert doc.position(("b", 1, "missing")) == (4, 5)


def test_every_document_of_a_file_is_read_and_empty_ones_skipped() -> None:
    docs = documents_from_text("a: 1\n---\n---\n# only a comment\n---\nb: 2\n", "f.yaml")
    assert [(d.index, d.data) for d in docs] == [(0, {"a": 1}), (3, {"b": 2})]
    assert docs[1].position(("b",)) == (6, 4)


def test_keys_stay_strings_as_written() -> None:
    (doc,) = documents_from_text("1: a\nyes: b\nnull: c\n", "f.yaml")
    assert doc.data == {"1": "a", "yes": "b", "null": "c"}


def test_timestamps_stay_strings() -> None:
    (doc,) = documents_from_text("at: 2024-01-02\n", "f.yaml")
    assert doc.data == {"at": "2024-01-02"}


def test_duplicate_key_is_an_error_at_the_second() -> None:
    err = _error("spec:\n  batch: 1\n  batch: 2\n")
    assert (err.line, err.column, err.message) == (3, 3, "duplicate key 'batch' (first on line 2)")
    assert err.hint == "keep one of the two; YAML would silently use the last"


def test_malformed_yaml() -> None:
    err = _error("spec:\n  rules: [a, b\n")
    assert err.message.startswith("malformed YAML: ")
    assert err.line == 3


def test_non_mapping_document() -> None:
    err = _error("- a\n- b\n")
    assert (err.line, err.message) == (1, "a document must be a mapping, found a list")


def test_scalar_document() -> None:
    assert (
        _error("just text\n").message == "a document must be a mapping, found the value 'just text'"
    )


def test_billion_laughs_is_refused_quickly() -> None:
    # CPU time, not wall time: the point is that the expansion is cut off, not how busy the
    # machine is (expanding it fully takes minutes of CPU)
    start = time.process_time()
    err = _error(BILLION_LAUGHS)
    assert time.process_time() - start < 2
    assert err.message == (
        "the document expands to more than 100000 values (anchors and aliases repeated inside "
        "each other)"
    )


def test_small_aliases_are_allowed() -> None:
    (doc,) = documents_from_text("a: &x {k: v}\nb: *x\n", "f.yaml")
    assert doc.data == {"a": {"k": "v"}, "b": {"k": "v"}}


def test_recursive_alias_is_refused() -> None:
    assert "nested more than 64 levels" in _error("a: &a [*a]\n").message


def test_deep_flow_nesting_is_refused_quickly() -> None:
    start = time.process_time()  # CPU time: the parser's work, whatever else the machine does
    err = _error("a: 1\nb: " + "[" * (MAX_FILE_BYTES - 10))
    assert time.process_time() - start < 2
    assert (err.line, err.column) == (2, 4 + 64)
    assert err.message == "the document is nested more than 64 levels deep"


def test_deep_block_nesting_is_refused() -> None:
    text = "".join(f"{' ' * i}k{i}:\n" for i in range(1400))
    assert _error(text).message in (
        "the document is nested more than 64 levels deep",
        "the document is nested too deeply to read",
    )


def test_brackets_in_quotes_and_comments_do_not_count() -> None:
    text = "a: '" + "[" * 100 + "'\n# " + "{" * 100 + '\nb: "' + "[" * 100 + '"\n'
    assert documents_from_text(text, "f.yaml")[0].data["a"] == "[" * 100


def test_merge_keys_and_custom_tags_are_refused() -> None:
    assert _error("a: &x {k: v}\nb: {<<: *x}\n").message == "merge keys (<<) are not supported"
    assert _error("a: !secret x\n").message == "unsupported tag !secret"


def test_control_character() -> None:
    err = _error("a: 1\nb: \x07\n")
    assert (err.line, err.column, err.message) == (
        2,
        4,
        "the file holds a control character #x0007",
    )


def test_binary_file(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_bytes(b"a: 1\n\x00\x01\x02")
    with pytest.raises(DocumentError, match=r"^binary file \(it holds NUL bytes\)") as info:
        read_documents(tmp_path / "x.yaml", root=tmp_path)
    assert (info.value.line, info.value.column) == (2, 1)


def test_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_bytes(b"a: 1\nb: caf\xe9\n")
    with pytest.raises(DocumentError, match=r"^not UTF-8 text \(byte 0xe9\)") as info:
        read_documents(tmp_path / "x.yaml", root=tmp_path)
    assert (info.value.line, info.value.column) == (2, 7)


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_bytes("\ufeffa: é\n".encode())
    assert read_documents(tmp_path / "x.yaml", root=tmp_path)[0].data == {"a": "é"}


def test_huge_file_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with path.open("wb") as handle:
        handle.truncate(50 * 1024 * 1024)
    start = time.process_time()  # CPU time: reading 50 MiB would take it, a busy machine not
    with pytest.raises(DocumentError, match=f"over the limit of {MAX_FILE_BYTES} bytes"):
        read_documents(path, root=tmp_path)
    assert time.process_time() - start < 1
    assert MAX_FILE_BYTES == 16 * 1024 * 1024


def test_symlink_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "lab"
    folder.mkdir()
    (tmp_path / "secret.yaml").write_text("a: 1\n")
    (folder / "x.yaml").symlink_to(tmp_path / "secret.yaml")
    with pytest.raises(DocumentError, match="^symlink leads outside the folder"):
        read_documents(folder / "x.yaml", root=folder)


def test_symlink_inside_the_folder_is_followed(tmp_path: Path) -> None:
    (tmp_path / "real.yml").write_text("a: 1\n")
    (tmp_path / "x.yaml").symlink_to(tmp_path / "real.yml")
    assert read_documents(tmp_path / "x.yaml", root=tmp_path)[0].data == {"a": 1}


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.yaml")
    with pytest.raises(DocumentError, match=r"^a FIFO \(named pipe\), not a regular file"):
        read_documents(tmp_path / "pipe.yaml", root=tmp_path)


def test_dangling_and_looping_symlinks(tmp_path: Path) -> None:
    (tmp_path / "gone.yaml").symlink_to(tmp_path / "missing.yaml")
    (tmp_path / "loop.yaml").symlink_to(tmp_path / "loop.yaml")
    for name in ("gone.yaml", "loop.yaml"):
        with pytest.raises(DocumentError, match="^cannot read the file: "):
            read_documents(tmp_path / name, root=tmp_path)


MIXED = (
    '# comment é\nname: "quoted é"\nn: 12\nf: 1.5\nb: yes\nnull_: ~\nt: 2025-01-01\n'
    "list:\n  - é: [x, 'y', {z: 1}]\n  - |\n    block\nflow: {a: b, c: [1, 2]}\n"
    "anchor: &x {k: v}\nalias: *x\n---\nsecond: ééé\n"
)


@pytest.mark.skipif(yaml_source._FAST_LOADER is None, reason="PyYAML was built without libyaml")
def test_c_parser_and_pure_parser_give_the_same_documents(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = documents_from_text(MIXED, "f.yaml")
    monkeypatch.setattr(yaml_source, "_FAST_LOADER", None)
    pure = documents_from_text(MIXED, "f.yaml")
    assert fast == pure
    assert fast[0].position(("list", 0, "é", 2, "z")) == (9, 21)
    assert fast[1].position(("second",)) == (16, 9)


def test_errors_after_non_ascii_text_count_characters_not_bytes() -> None:
    # libyaml reports this one at a byte offset; the position shown is in characters.
    err = _error("éé: ok\nb: \x07\n")
    assert (err.line, err.column) == (2, 4)
    err = _error("é: x\n\tb: 1\n")
    assert (err.line, err.column) == (2, 1)
