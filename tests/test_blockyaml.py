"""fleetc.policy.blockyaml: fleetc's own block YAML read line by line, exactly as a YAML reader
reads it, or declined (then fleetc.state.placementfile.yaml_documents reads it through libyaml or ruamel)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML
from ruamel.yaml.constructor import ConstructorError
from ruamel.yaml.error import YAMLError
from ruamel.yaml.nodes import ScalarNode

from fleetc.policy import blockyaml, fastcompose, load
from fleetc.render.yamlout import dump, dump_all
from fleetc.state import placementfile

CASES = Path(__file__).parent / "cases"
REPORTS = sorted(CASES.glob("*/expected/placement.yaml"))


def _ruamel(text: str) -> list[Any] | None:
    """What ruamel's safe loader reads (None where it refuses the text)."""
    try:
        return list(YAML(typ="safe", pure=True).load_all(text))
    except (YAMLError, ValueError, RecursionError):
        return None


def _block(text: str, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any] | None, list[Any] | None]:
    """What yaml_documents reads of ``text``, and what the block reader answered on the way."""
    answers: list[list[Any] | None] = []
    read = blockyaml.block_documents

    def spy(*args: Any) -> list[Any] | None:
        answers.append(read(*args))
        return answers[-1]

    monkeypatch.setattr(blockyaml, "block_documents", spy)
    try:
        documents: list[Any] | None = placementfile.yaml_documents(text)
    except (YAMLError, RecursionError):
        documents = None
    return documents, answers[0]


def test_every_placement_report_of_the_golden_cases_is_read_here(monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(REPORTS) > 10
    for report in REPORTS:
        text = report.read_text(encoding="utf-8")
        documents, answer = _block(text, monkeypatch)
        assert answer is not None, report
        assert answer == documents == _ruamel(text), report


@pytest.mark.parametrize("text", [
    "a: 1\n\nb: 2\n",  # a blank line
    "a:\nb: 1\n", "a:\n", "a: \n",  # empty values: null
    "a:\n- 1\n",  # a sequence at its key's indentation
    "a:\n   b: 1\n", "a:\n  b: 1\n c: 2\n", "a: 1\n  b: 2\n",  # other indentations
    "a: 1\na: 2\n",  # a duplicate key
    "1: a\n", "true: a\n", "null: a\n", "1e3: a\n",  # keys that are not strings
    "a: b: c\n", "a: b:\n", "a: 'b'\n", 'a: "b"\n', "a: b # c\n", "a: [1]\n", "a: {b: 1}\n",
    "a: - b\n", "a: b  c\n", "a: b :c\n", "a:b\n", "- a\n", "a\n", "a: 1", "",
    "a:\n  - - 1\n", "a:\n  -  1\n", "a: |\n  b\n", "a: \u00e9\n", "a:\tb\n", "k" * 1001 + ": 1\n",
    "a: b\n...\n", "--- a: b\n", "a: b\n---\n- c\n", "a: b\n--- \n",
])
def test_what_is_not_in_fleetcs_layout_is_declined(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    documents, answer = _block(text, monkeypatch)
    assert answer is None
    assert documents == _ruamel(text)


def test_depth_is_bounded() -> None:
    text = "".join(f"{'  ' * i}k:\n" for i in range(5)) + "    " * 2 + "  v: 1\n"
    assert blockyaml.block_documents(text, str, 64) == [{"k": {"k": {"k": {"k": {"k": {"v": "1"}}}}}}]
    assert blockyaml.block_documents(text, str, 5) is None


_KEYS = st.sampled_from(["a", "name", "gpuType", "nvidia.com/gpu", "a100", "1", "true", "null", "y", "on",
                         "x-y_z", "a b", "a:b", "-a", ".5", "0o17", "~", "2024-01-01"])
_TEXT = st.text(st.sampled_from(list("ab-_.:/ +,()=%#'\"[]{}01\n\t\u00e9")), max_size=8)
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20),
                     st.floats(allow_nan=False), _TEXT, st.sampled_from(["c0007-t4", "sha256:ab12", "1:30",
                                                                         "no room", "0.5", "1e3", "-x"]))
_DATA = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(_KEYS, inner, max_size=3)), max_leaves=12)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_KEYS, _DATA, min_size=1, max_size=4))
def test_what_yamlout_writes_reads_as_ruamel_reads_it(data: dict[str, Any]) -> None:
    text = dump(data)
    answer = blockyaml.block_documents(text, _scalar, load.MAX_DEPTH)
    assert answer is None or answer == _ruamel(text)


_EDITS = st.sampled_from([" ", "  ", "- ", ":", ": ", "\n", "#", "[]", "{}", "a", "1", "-", "'", "\t"])


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(st.dictionaries(_KEYS, _DATA, min_size=1, max_size=4), st.lists(
    st.tuples(st.integers(min_value=0), st.integers(0, 2), _EDITS), min_size=1, max_size=3))
def test_damaged_text_is_read_as_ruamel_reads_it_or_declined(data: dict[str, Any],
                                                            edits: list[tuple[int, int, str]]) -> None:
    """Characters put in, cut out or replaced anywhere: whatever the block reader still reads,
    ruamel reads the same (a YAML error there is a decline here)."""
    text = dump(data)
    for where, cut, piece in edits:
        at = where % (len(text) + 1)
        text = text[:at] + piece + text[at + cut:]
    answer = blockyaml.block_documents(text, _scalar, load.MAX_DEPTH)
    assert answer is None or answer == _ruamel(text)


def _edit_lines(lines: list[str], where: int, edit: str) -> list[str]:
    i = where % len(lines)
    line = lines[i]
    edited = {"repeat": [line, line], "cut": [], "in": [" " + line], "in2": ["  " + line], "out": [line[1:]],
              "out2": [line[2:]], "unquote": [line.replace('"', "")], "swap": lines[i + 1:i + 2] + [line]}[edit]
    return lines[:i] + edited + lines[i + 1 + (edit == "swap"):]


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(st.dictionaries(_KEYS, _DATA, min_size=1, max_size=4), st.lists(
    st.tuples(st.integers(min_value=0), st.sampled_from(["repeat", "cut", "in", "in2", "out", "out2", "unquote",
                                                         "swap"])), min_size=1, max_size=3))
def test_lines_repeated_cut_moved_or_unquoted_read_as_ruamel_reads_them_or_are_declined(
        data: dict[str, Any], edits: list[tuple[int, str]]) -> None:
    """Lines repeated (duplicate keys), cut, swapped, indented in or out, or stripped of quotes
    (keys that read as numbers, booleans or null): the block reader reads what ruamel reads, or
    declines."""
    lines = dump(data).splitlines()
    for where, edit in edits:
        lines = _edit_lines(lines, where, edit) or ["a: 1"]
    text = "\n".join(lines) + "\n"
    answer = blockyaml.block_documents(text, _scalar, load.MAX_DEPTH)
    assert answer is None or answer == _ruamel(text)


_YAML = YAML(typ="safe", pure=True)


def _scalar(text: str) -> Any:
    """A plain scalar's value as yaml_documents reads it (ruamel's resolver and constructor)."""
    node = ScalarNode(_YAML.resolver.resolve(ScalarNode, text, (True, False)), text, None, None)
    try:
        return _YAML.constructor.construct_object(node)
    except (ConstructorError, ValueError) as err:
        raise ValueError(text) from err


def _stream(text: str) -> tuple[list[Any], list[int]] | None:
    """What libyaml's data path (fastcompose.load_all) reads, as block_stream answers it."""
    yaml = YAML(typ="safe", pure=True)
    stream = fastcompose.load_all(text, yaml.resolver, load._ScalarValues(yaml.constructor),
                                  max_depth=load.MAX_DEPTH, max_values=load.MAX_NODES)
    return None if stream is None else (stream.documents, stream.lines)


@pytest.mark.parametrize("text", [
    "a: 1\n---\nb: 2\n", "---\na: 1\n", "a: 1\n---\n", "---\n", "---\n---\n", "a: 1\n---\n---\nb:\n  - c\n",
    "---\na:\n  - b: 1\n    c: --x\n---\nd: {}\n",
])
def test_documents_and_the_lines_they_start_on_are_libyamls(text: str) -> None:
    assert blockyaml.block_stream(text, _scalar, load.MAX_DEPTH, load.MAX_NODES) == _stream(text) is not None


def test_a_document_that_may_hold_too_many_values_is_declined() -> None:
    text = "a:\n" + "".join(f"  - {i}\n" for i in range(100))
    assert blockyaml.block_stream(text, _scalar, load.MAX_DEPTH, 506) is not None  # 101 lines
    assert blockyaml.block_stream(text, _scalar, load.MAX_DEPTH, 505) is None


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), st.dictionaries(_KEYS, _DATA, min_size=1, max_size=3)), min_size=1, max_size=4),
       st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 2), st.sampled_from(["---\n", "\n---", "- ", " "])),
                max_size=2))
def test_streams_of_documents_read_as_libyaml_marks_them_or_are_declined(
        documents: list[dict[str, Any] | None], edits: list[tuple[int, int, str]]) -> None:
    """Several documents (null ones too) with separators put in or cut out: the block reader
    gives the documents and the lines they start on as libyaml's data path does, or declines."""
    text = dump_all(documents)
    for where, cut, piece in edits:
        at = where % (len(text) + 1)
        text = text[:at] + piece + text[at + cut:]
    answer = blockyaml.block_stream(text, _scalar, load.MAX_DEPTH, load.MAX_NODES)
    assert answer is None or answer == _stream(text)
