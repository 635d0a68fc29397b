"""Unit tests of fleetc.policy.load: YAML -> documents with positions, discovery, file reading."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest

from fleetc.errors import UsageError
from fleetc.policy import fastcompose, files, load
from fleetc.policy.files import discover
from fleetc.policy.load import Document, format_field, load_files, parse
from fleetc.state import placementfile


def one_doc(text: str) -> Document:
    docs, diags = parse(textwrap.dedent(text), "f.yaml")
    assert diags == []
    assert len(docs) == 1
    return docs[0]


def errors(text: str) -> list[str]:
    docs, diags = parse(textwrap.dedent(text), "f.yaml")
    assert docs == []
    return [d.format() for d in diags]


# --- positions ---------------------------------------------------------------------------------

NESTED = """\
a:
  b: [1, {c: x}]
  d:
    - e: 5
"""


@pytest.mark.parametrize(
    ("path", "position"),
    [((), (1, 1)), (("a",), (2, 3)), (("a", "b"), (2, 6)), (("a", "b", 0), (2, 7)),
     (("a", "b", 1), (2, 10)), (("a", "b", 1, "c"), (2, 14)), (("a", "d", 0), (4, 7)),
     (("a", "d", 0, "e"), (4, 10))],
)
def test_value_positions(path: tuple, position: tuple[int, int]) -> None:
    assert one_doc(NESTED).values[path] == position


@pytest.mark.parametrize(
    ("path", "position"),
    [(("a",), (1, 1)), (("a", "b"), (2, 3)), (("a", "b", 1, "c"), (2, 11)),
     (("a", "d", 0, "e"), (4, 7))],
)
def test_key_positions(path: tuple, position: tuple[int, int]) -> None:
    assert one_doc(NESTED).keys[path] == position


def test_positions_are_worked_out_once_per_document_and_only_when_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    walked: list[str] = []
    composed: list[int] = []
    walk, compose = fastcompose.positions_all, load._compose
    monkeypatch.setattr(fastcompose, "positions_all", lambda text, *args: walked.append(text) or walk(text, *args))
    monkeypatch.setattr(load, "_compose", lambda *args: composed.append(1) or compose(*args))
    docs, diags = parse("a: 1\n---\nb: [2]\n---\nc: 3\n", "f.yaml")
    assert diags == [] and [d.data for d in docs] == [{"a": 1}, {"b": [2]}, {"c": 3}]
    assert walked == [] and composed == []  # a file without a message is never read again
    assert docs[1].locate(("b", 0)) == (3, 5)
    assert docs[1].keys[("b",)] == (3, 1)
    assert walked == ["---\nb: [2]\n"] and composed == []  # its own lines, by libyaml's events, no nodes
    assert docs[0].keys[("a",)] == (1, 1)
    assert walked[1:] == ["a: 1\n"]  # the third document is never read
    # An empty value is marked where ruamel marks it: the events decline, the nodes answer.
    docs, diags = parse("a:\nb: [2]\n", "g.yaml")
    assert diags == [] and docs[0].data == {"a": None, "b": [2]}
    assert docs[0].locate(("a",)) == (2, 1) and docs[0].locate(("b", 0)) == (2, 5)
    assert docs[0].keys[("b",)] == (2, 1)
    assert walked[2:] == ["a:\nb: [2]\n"] and composed == [1]  # one document: the file, once


@pytest.mark.parametrize("text", [NESTED, "- [a, {b: null}]\n- ''\n", "x\n", "a: {'0': [[]], '': 1}\n"])
def test_holds_is_having_a_position(text: str) -> None:
    """:meth:`Document.holds` answers from the data what ``path in values`` answers from the
    positions (without working them out)."""
    doc = one_doc(text)
    paths = set(doc.values) | set(doc.keys)
    near = {p + (extra,) for p in paths for extra in ("0", 0, 1, "b", "x", "")} | {p[:-1] + ("zz",) for p in paths if p}
    assert [p for p in sorted(paths | near, key=repr) if doc.holds(p) != (p in doc.values)] == []
    assert all(p in doc.values for p in doc.keys)


def test_locate_falls_back_to_nearest_parent() -> None:
    doc = one_doc(NESTED)
    assert doc.locate(("a", "d", 0, "missing", 3)) == (4, 7)
    assert doc.locate(("a", "missing"), key=True) == (1, 1)
    assert doc.locate(("nothing",), key=True) == (1, 1)


def test_document_diagnostic_names_field_and_position() -> None:
    diag = one_doc(NESTED).diagnostic(("a", "d", 0, "e"), "too big", hint="smaller")
    assert diag.format() == "f.yaml:4:10: error: a.d[0].e: too big\n  hint: smaller"


def test_format_field() -> None:
    assert format_field(("spec", "clusters", 1, "name")) == "spec.clusters[1].name"
    assert format_field((0, "a")) == "[0].a"
    assert format_field(()) == ""


# --- documents ---------------------------------------------------------------------------------


def test_multi_document_file_with_trailing_separator() -> None:
    docs, diags = parse("a: 1\n---\nb: 2\n---\n", "f.yaml")
    assert diags == []
    assert [(d.index, d.data) for d in docs] == [(0, {"a": 1}), (1, {"b": 2})]
    assert docs[1].values[("b",)] == (3, 4)


def test_null_document_in_the_middle_is_skipped_but_keeps_indices() -> None:
    docs, _ = parse("a: 1\n---\n---\nb: 2\n", "f.yaml")
    assert [(d.index, d.data) for d in docs] == [(0, {"a": 1}), (2, {"b": 2})]


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n", "---\n...\n"])
def test_empty_file(text: str) -> None:
    assert errors(text) == ["f.yaml: error: empty file: expected at least one policy document"]


def test_scalar_document_is_kept_for_validate_to_refuse() -> None:
    assert one_doc("hello\n").data == "hello"


# --- refused YAML ------------------------------------------------------------------------------


def test_duplicate_key_names_the_first_line() -> None:
    assert errors("""\
        a: 1
        b:
          c: 1
          d: 2
          c: 3
        """) == ["f.yaml:5:3: error: b.c: duplicate key 'c' (first defined at line 3)\n"
                 "  hint: remove one of the two"]


def test_tab_indentation() -> None:
    assert errors("a:\n\tb: 1\n") == [
        "f.yaml:2:1: error: invalid YAML: tab character: YAML indentation must use spaces\n"
        "  hint: replace the tab with spaces"
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: [1, 2\n", "f.yaml:2:1: error: invalid YAML: expected ',' or ']', but got "
                       "'<stream end>' (while parsing a flow sequence)"),
        ("a: {b: 1\n", "f.yaml:2:1: error: invalid YAML: expected ',' or '}', but got "
                       "'<stream end>' (while parsing a flow mapping)"),
        ("a: *nope\n", "f.yaml:1:4: error: invalid YAML: found undefined alias 'nope'"),
    ],
)
def test_syntax_errors(text: str, expected: str) -> None:
    assert errors(text) == [expected]


def test_syntax_error_in_second_document_drops_the_whole_file() -> None:
    docs, diags = parse("a: 1\n---\nb: [\n", "f.yaml")
    assert docs == []
    assert len(diags) == 1 and diags[0].line == 4


def test_byte_order_mark_is_accepted_by_parse() -> None:
    doc = one_doc("\ufeffa: 1\n")
    assert doc.data == {"a": 1}
    assert doc.values[("a",)] == (1, 4)


@pytest.mark.slow
def test_alias_bomb_is_bounded() -> None:
    lines = ['l0: &l0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for i in range(1, 9):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]")
    start = time.monotonic()
    docs, diags = parse("\n".join(lines) + "\n", "f.yaml")
    assert time.monotonic() - start < 10
    assert docs == []
    assert [d.format() for d in diags] == [
        "f.yaml:1:50: error: document expands to more than 200000 values\n"
        "  hint: YAML aliases are expanded; reduce their use"
    ]


def test_alias_within_budget_is_expanded() -> None:
    doc = one_doc("base: &b {x: 1}\ncopy: *b\n")
    assert doc.data == {"base": {"x": 1}, "copy": {"x": 1}}


def test_recursive_alias_is_bounded() -> None:
    assert errors("a: &a [*a]\n") == ["f.yaml:1:4: error: nesting is deeper than 64 levels"]


def test_nesting_at_the_limit_is_accepted() -> None:
    # the innermost of 65 lists sits 64 levels below the document root
    assert one_doc("[" * 65 + "]" * 65 + "\n").data is not None


def test_deep_nesting() -> None:
    assert errors("[" * 66 + "]" * 66 + "\n") == [
        "f.yaml:1:66: error: nesting is deeper than 64 levels"
    ]


@pytest.mark.slow
def test_nesting_beyond_the_parser_stack_is_a_diagnostic() -> None:
    assert errors("[" * 5000 + "]" * 5000 + "\n") == [
        "f.yaml: error: nesting is deeper than 64 levels"
    ]


@pytest.mark.parametrize(
    ("text", "position"),
    [("1: a\n", "1:1"), ("true: a\n", "1:1"), ("null: a\n", "1:1"),
     ("x:\n  ? [1]\n  : a\n", "2:5")],
)
def test_non_string_keys(text: str, position: str) -> None:
    field = "x: " if text.startswith("x") else ""
    assert errors(text) == [
        f"f.yaml:{position}: error: {field}mapping keys must be strings\n  hint: quote the key"
    ]


def test_quoted_numeric_key_is_a_string() -> None:
    assert one_doc('"1": a\n').data == {"1": "a"}


def test_merge_key() -> None:
    assert errors("""\
        base: &b {x: 1}
        c:
          <<: *b
          y: 2
        """) == ["f.yaml:3:3: error: c: merge keys ('<<') are not supported\n"
                 "  hint: write the fields out in full"]


TAG_REFUSED = "is not allowed: policies are plain YAML\n  hint: remove the tag; quote a value to make it text"


@pytest.mark.parametrize(("text", "where", "tag"), [
    ("a: !foo bar\n", "1:4: error: a", "!foo"),  # a custom tag on a scalar
    ("a: !!str 12\n", "1:4: error: a", "!!str"),  # standard tags, written, on a scalar
    ("a: !!int '7'\n", "1:4: error: a", "!!int"),
    ("a: !!binary aGVsbG8=\n", "1:4: error: a", "!!binary"),
    ("a: !<tag:yaml.org,2002:str> 5\n", "1:4: error: a", "!<tag:yaml.org,2002:str>"),  # verbatim
    ("a: ! 5\n", "1:4: error: a", "!"),  # the non-specific tag
    ("a: !!seq\n- 1\n", "1:4: error: a", "!!seq"),  # on a sequence
    ("a:\n  - x\n  - !!str y\n", "3:5: error: a[1]", "!!str"),  # on a sequence item
    ("a: !!map\n  b: 1\n", "1:4: error: a", "!!map"),  # on a mapping
    ("!!map\na: 1\n", "1:1: error", "!!map"),  # on the document
    ("--- !!null\n", "1:5: error", "!!null"),  # on an empty document
    ("a:\n  !!str b: 1\n", "2:3: error: a", "!!str"),  # on a key
    ("a: {b: !!int 1}\n", "1:8: error: a.b", "!!int"),  # in a flow mapping
    ("a: {!!str b: 1}\n", "1:5: error: a", "!!str"),  # on a key in a flow mapping
    ("a: [!!float 1]\n", "1:5: error: a[0]", "!!float"),  # in a flow sequence
    ("spec: !!python/object/apply:os.system\n", "1:7: error: spec", "!!python/object/apply:os.system"),
    ("%TAG !e! tag:example.com,2000:\n---\na: !e!x 1\n", "3:4: error: a", "!e!x"),
])
def test_every_written_tag_is_refused(text: str, where: str, tag: str) -> None:
    assert errors(text) == [f"f.yaml:{where}: YAML tag '{tag}' {TAG_REFUSED}"]


def test_every_tag_is_reported_with_the_other_problems_of_its_document() -> None:
    assert errors("a: !foo x\nb: !!binary aGk=\nc: 1\nc: 2\n") == [
        f"f.yaml:1:4: error: a: YAML tag '!foo' {TAG_REFUSED}",
        f"f.yaml:2:4: error: b: YAML tag '!!binary' {TAG_REFUSED}",
        "f.yaml:4:1: error: c: duplicate key 'c' (first defined at line 3)\n  hint: remove one of the two",
    ]


@pytest.mark.parametrize(("text", "message"), [
    ("a: 0x_\n", "'0x_' is not a valid YAML int"), ("a: ._\n", "'._' is not a valid YAML float"),
    ("a: =\n", "'=' is not a valid YAML value"), ("a: <<\n", "'<<' is not a valid YAML merge"),
])
def test_a_plain_value_yaml_cannot_read_says_so_without_a_tag(text: str, message: str) -> None:
    assert errors(text) == [f"f.yaml:1:4: error: a: {message}\n  hint: quote it to make it text"]


@pytest.mark.parametrize("number", ["1" * 101, "-" + "1" * 101, "1" * 5000, "0x" + "f" * 90])
def test_an_integer_of_more_than_100_digits_is_refused(number: str) -> None:
    assert errors(f"a: {number}\n") == [
        "f.yaml:1:4: error: a: integer of more than 100 digits\n  hint: no policy field takes a number this large"]
    assert one_doc(f"a: {'9' * 100}\n").data == {"a": int("9" * 100)}


# --- YAML 1.2 semantics ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scalar", "value"),
    [("yes", "yes"), ("no", "no"), ("on", "on"), ("off", "off"), ("y", "y"),
     ("true", True), ("false", False), ("0o17", 15), ("017", 17), ("0x1f", 31),
     ("1e3", 1000.0), ("~", None), ("null", None), ("'64'", "64"),
     ("2024-01-01", "2024-01-01"), ("2001-12-14t21:59:43.10-05:00",
                                    "2001-12-14t21:59:43.10-05:00")],
)
def test_yaml_1_2_scalars(scalar: str, value: object) -> None:
    data = one_doc(f"v: {scalar}\n").data["v"]
    assert data == value
    assert type(data) is type(value)


# --- discover ----------------------------------------------------------------------------------


def touch(root: Path, *names: str) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("a: 1\n", encoding="utf-8")


def test_discover_folder_recursive_sorted_and_skipping_hidden(tmp_path: Path) -> None:
    touch(tmp_path, "b.yaml", "a.yml", "sub/c.yaml", "sub/deeper/d.yaml", "notes.txt",
          ".hidden.yaml", ".git/e.yaml", "sub/.cache/f.yaml", "README.md")
    found = [p.relative_to(tmp_path).as_posix() for p in discover([str(tmp_path)]).files]
    assert found == ["a.yml", "b.yaml", "sub/c.yaml", "sub/deeper/d.yaml"]


def test_discover_keeps_named_files_and_removes_duplicates(tmp_path: Path) -> None:
    touch(tmp_path, "x/a.yaml", "named.txt")
    found = discover([str(tmp_path / "x"), str(tmp_path / "named.txt"),
                      str(tmp_path / "x" / "a.yaml")]).files
    assert [p.relative_to(tmp_path).as_posix() for p in found] == ["named.txt", "x/a.yaml"]


def test_discover_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    with pytest.raises(UsageError, match=f"^{missing}: no such file or directory$"):
        discover([missing])


def test_discover_empty_folder(tmp_path: Path) -> None:
    assert discover([str(tmp_path)]) == files.Discovery((), ())


# --- load_files --------------------------------------------------------------------------------


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)
    return path


def formats(result: load.LoadResult) -> list[str]:
    return [d.format() for d in result.diagnostics]


def test_load_files_reads_every_document(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", "x: 1\n---\ny: 2\n")
    b = write(tmp_path / "b.yaml", "z: 3\n")
    result = load_files([a, b])
    assert result.diagnostics == ()
    assert [(d.path, d.index, d.data) for d in result.documents] == [
        (a.as_posix(), 0, {"x": 1}), (a.as_posix(), 1, {"y": 2}), (b.as_posix(), 0, {"z": 3})
    ]


def test_load_files_problems_do_not_stop_other_files(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.yaml", "a: [\n")
    good = write(tmp_path / "good.yaml", "a: 1\n")
    result = load_files([bad, good])
    assert [d.data for d in result.documents] == [{"a": 1}]
    assert len(result.diagnostics) == 1 and result.diagnostics[0].path == bad.as_posix()


@pytest.mark.parametrize(
    ("raw", "position", "byte"),
    [(b"a: caf\xe9\n", "1:7", "e9"), (b"a: 1\nb: 2\nc: x\xff\n", "3:5", "ff"),
     (b"a: 1\r\nb: \x80\r\n", "2:4", "80"), (b"\xfe", "1:1", "fe")],
)
def test_non_utf8_bytes(tmp_path: Path, raw: bytes, position: str, byte: str) -> None:
    path = write(tmp_path / "f.yaml", raw)
    assert formats(load_files([path])) == [
        f"{path.as_posix()}:{position}: error: not valid UTF-8 (byte 0x{byte})\n"
        "  hint: save the file as UTF-8"
    ]


def test_non_utf8_column_counts_characters(tmp_path: Path) -> None:
    path = write(tmp_path / "f.yaml", "a: é".encode() + b"\xff\n")
    # 'a', ':', ' ', 'é' are four characters (five bytes): the bad byte is character 5
    assert formats(load_files([path]))[0].startswith(f"{path.as_posix()}:1:5: ")


def test_byte_order_mark_in_file_is_accepted(tmp_path: Path) -> None:
    path = write(tmp_path / "f.yaml", b"\xef\xbb\xbfa: 1\n")
    result = load_files([path])
    assert result.diagnostics == ()
    assert result.documents[0].data == {"a": 1}
    assert result.documents[0].values[("a",)] == (1, 4)


def test_empty_file_on_disk(tmp_path: Path) -> None:
    path = write(tmp_path / "f.yaml", b"")
    assert formats(load_files([path])) == [
        f"{path.as_posix()}: error: empty file: expected at least one policy document"
    ]


def test_oversized_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 10)
    path = write(tmp_path / "f.yaml", "a: 1234567890\n")
    assert formats(load_files([path])) == [
        f"{path.as_posix()}: error: file is 14 bytes; the limit is 10\n"
        "  hint: split it into several policy files"
    ]


def test_file_at_the_size_limit_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 14)
    path = write(tmp_path / "f.yaml", "a: 1234567890\n")
    assert load_files([path]).diagnostics == ()


def test_unreadable_path(tmp_path: Path) -> None:
    folder = tmp_path / "f.yaml"
    folder.mkdir()
    assert formats(load_files([folder])) == [
        f"{folder.as_posix()}: error: not a regular file (a folder); fleetc never reads one\n"
        "  hint: policies are regular files; remove it"]


def discovered(*paths: Path) -> tuple[list[str], list[str]]:
    found = discover([str(p) for p in paths])
    return [p.as_posix() for p in found.files], [d.format() for d in found.problems]


def test_symlink_outside_the_roots_is_refused(tmp_path: Path) -> None:
    outside = write(tmp_path / "elsewhere" / "secret.yaml", "a: 1\n")
    write(tmp_path / "elsewhere" / "README.md", "not a policy\n")
    root = tmp_path / "policies"
    root.mkdir()
    (root / "link.yaml").symlink_to(outside)
    (root / "linked-folder").symlink_to(outside.parent)
    (root / "README.md").symlink_to(outside.parent / "README.md")  # not a policy: ignored
    assert discovered(root) == ([], [
        f"{root.as_posix()}/link.yaml: error: symbolic link points outside the policy folders\n"
        "  hint: copy the file into the policy folder instead",
        f"{root.as_posix()}/linked-folder: error: symbolic link points outside the policy "
        "folders\n  hint: copy the file into the policy folder instead"])


def test_symlinks_inside_the_roots_are_read_once(tmp_path: Path) -> None:
    root = tmp_path / "policies"
    target = write(root / "shared" / "real.yaml", "a: 1\n")
    (root / "link.yaml").symlink_to(target)
    (root / "again").symlink_to(target.parent)
    (root / "shared" / "up").symlink_to(root)  # a link to an ancestor: no loop
    assert discovered(root) == ([f"{root.as_posix()}/again/real.yaml"], [])


def test_symlink_to_a_named_file_is_read(tmp_path: Path) -> None:
    named = write(tmp_path / "elsewhere" / "named.yaml", "a: 1\n")
    root = tmp_path / "policies"
    root.mkdir()
    (root / "link.yaml").symlink_to(named)
    assert discovered(root, named) == ([named.as_posix()], [])


def test_broken_links_and_link_loops_are_errors(tmp_path: Path) -> None:
    root = tmp_path / "policies"
    root.mkdir()
    (root / "broken.yaml").symlink_to(root / "gone.yaml")
    (root / "loop-a").symlink_to(root / "loop-b")
    (root / "loop-b").symlink_to(root / "loop-a")
    hint = "  hint: remove the link, or point it at a policy file or folder"
    assert discovered(root) == ([], [
        f"{root.as_posix()}/broken.yaml: error: broken symbolic link\n{hint}",
        f"{root.as_posix()}/loop-a: error: symbolic link loop\n{hint}",
        f"{root.as_posix()}/loop-b: error: symbolic link loop\n{hint}"])


def test_special_files_are_errors_and_never_opened(tmp_path: Path) -> None:
    root = tmp_path / "policies"
    root.mkdir()
    os.mkfifo(root / "fifo.yaml")  # opening it for reading would block forever
    os.mkfifo(root / "pipe")
    hint = "  hint: policies are regular files; remove it"
    assert discovered(root) == ([], [
        f"{root.as_posix()}/fifo.yaml: error: not a regular file (a FIFO); fleetc never opens one\n{hint}",
        f"{root.as_posix()}/pipe: error: not a regular file (a FIFO); fleetc never opens one\n{hint}"])
    assert discovered(Path("/dev/zero")) == ([], [
        f"/dev/zero: error: not a regular file (a character device); fleetc never opens one\n{hint}"])


def test_a_named_link_loop_or_broken_link_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "c").symlink_to(tmp_path / "gone")
    with pytest.raises(UsageError, match=f"^{tmp_path / 'a'}: symbolic link loop$"):
        discover([str(tmp_path / "a")])
    with pytest.raises(UsageError, match=f"^{tmp_path / 'c'}: broken symbolic link$"):
        discover([str(tmp_path / "c")])


def test_reading_is_bounded_while_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file whose size says little (a /proc file says 0) is still read only to the limit."""
    path = write(tmp_path / "big.yaml", b"#" * (files.MAX_FILE_BYTES + 10))
    reads: list[int] = []
    real_read = os.read
    monkeypatch.setattr(files.os, "fstat", lambda fd: os.stat_result((0o100644, 0, 0, 1, 0, 0, 0, 0, 0, 0)))
    monkeypatch.setattr(files.os, "read", lambda fd, n: reads.append(n) or real_read(fd, n))
    assert formats(load_files([path])) == [
        f"{path.as_posix()}: error: file is more than 4194304 bytes; the limit is 4194304\n"
        "  hint: split it into several policy files"]
    assert sum(reads) <= files.MAX_FILE_BYTES + 1


@pytest.mark.parametrize("enabled", [True, False])
def test_loading_leaves_the_garbage_collector_as_it_was(tmp_path: Path, enabled: bool) -> None:
    import gc

    policy = write(tmp_path / "p.yaml", "a: [1, 2]\nb: {c: d}\n")
    was, frozen = gc.isenabled(), gc.get_freeze_count()
    (gc.enable if enabled else gc.disable)()
    try:
        assert load_files([policy]).documents[0].data == {"a": [1, 2], "b": {"c": "d"}}
        assert gc.isenabled() is enabled
        assert gc.get_freeze_count() == frozen  # only a large stage freezes what it made
    finally:
        (gc.enable if was else gc.disable)()


def test_load_policies_refuses_symlink_outside_folder(tmp_path: Path) -> None:
    from fleetc.compiler import load_policies
    from fleetc.errors import PolicyError

    outside = write(tmp_path / "elsewhere" / "fleet.yaml", textwrap.dedent("""\
        apiVersion: fleet.kurator.dev/v1alpha1
        kind: Fleet
        metadata: {name: f}
        spec:
          clusters: [{name: c, provider: x, region: cn-north-1}]
        """))
    root = tmp_path / "policies"
    root.mkdir()
    (root / "fleet.yaml").symlink_to(outside)
    with pytest.raises(PolicyError, match="symbolic link points outside"):
        load_policies([str(root)])


@pytest.mark.parametrize("text", [
    (Path(__file__).parent / "cases" / "seed-scenario" / "expected" / "placement.yaml").read_text(),
    "kind: Placement\nstages:\n  - {pipeline: p, stage: 'on', clusters: [{name: 'no', replicas: 2}]}\n",
    "a: &x [1, 2]\nb: *x\n",  # an alias: ruamel reads it
    "---\na: 1\n---\nb: [yes, no, ~, 0o17, 1e3, .inf, '1', 2001-12-14]\n",
    "",
])
def test_yaml_documents_reads_what_ruamel_reads(text: str) -> None:
    from ruamel.yaml import YAML

    assert placementfile.yaml_documents(text) == list(YAML(typ="safe", pure=True).load_all(text))


@pytest.mark.slow
def test_forked_loading_reads_what_one_process_reads(monkeypatch) -> None:
    """Every policy file of the tests, broken ones included, loaded once in this process and
    once split across forked processes: the same documents, positions and diagnostics."""
    from fleetc.infra import forkmap

    root = Path(__file__).parent
    files = sorted(root.rglob("*.yaml"))
    sources = [(f.relative_to(root).as_posix(), f.read_bytes()) for f in files]

    def summary(result: load.LoadResult) -> tuple:
        # repr: NaN (tests/cases/error-hostile-yaml) is unequal to itself once it crossed a process
        documents = [(d.path, d.index, repr(d.data), d.locate(("metadata", "name"))) for d in result.documents]
        return documents, result.diagnostics

    alone = summary(load.load_sources(sources))
    spawned = []
    spawn = forkmap._spawn
    monkeypatch.setattr(forkmap, "_spawn", lambda *args: spawned.append(1) or spawn(*args))
    monkeypatch.setattr(forkmap, "MIN_PARALLEL_SIZE", 0)
    forked = summary(load.load_sources(sources))
    if forkmap.usable_cores() >= 2 and forkmap._can_fork():
        assert spawned, "nothing was read in a child"
    assert len(alone[0]) > 50 and alone[1]  # documents to compare, and diagnostics too
    assert repr(forked) == repr(alone)  # repr: a NaN read in a child is another NaN object, never ==


def test_documents_read_by_forked_loaders_come_scanned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each document read on the fast path carries its JSON text (keys sorted, as json.dumps
    writes it: the inputs digest hashes it) and whether it may hold a credential, made in the
    process that read it; on the node path (an alias) validation scans it itself."""
    import json

    from fleetc.infra import forkmap

    plain = "b: [1, 2.5, x]\na: {c: null, secretName: s}\n---\n---\nkey: 9fA8b7C6d5E4f3G2h1J0\n"
    sources = [("a.yaml", plain.encode()), ("m.yaml", b"base: &b {x: 1}\nm: *b\n")]
    serial = load.load_sources(sources).documents
    monkeypatch.setattr(forkmap, "usable_cores", lambda: 2)
    pad = ("pad.yaml", b"pad: " + b"x" * forkmap.MIN_PARALLEL_SIZE + b"\n")  # read here; the rest in a child
    forked = load.load_sources([pad, *sources]).documents[1:]
    assert [d.scanned for d in serial] == [d.scanned for d in forked] == [
        (json.dumps({"b": [1, 2.5, "x"], "a": {"c": None, "secretName": "s"}}, sort_keys=True), False),
        (json.dumps({"key": "9fA8b7C6d5E4f3G2h1J0"}), True), None]
