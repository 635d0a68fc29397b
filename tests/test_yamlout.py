"""Tests for fleetc.render.yamlout: exact bytes, and round trips through YAML 1.1 and 1.2 readers."""

from __future__ import annotations

import math
from typing import Any

import pytest
import yaml as pyyaml
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from fleetc.render.yamlout import dump, dump_all


def ruamel_load(text: str, version: tuple[int, int] | None = None) -> Any:
    loader = YAML(typ="safe", pure=True)
    if version:
        loader.version = version
    return loader.load(text)


def ruamel_load_all(text: str) -> list[Any]:
    return list(YAML(typ="safe", pure=True).load_all(text))


def readers(text: str) -> list[Any]:
    """What each reader makes of ``text``: ruamel YAML 1.2 (default), ruamel 1.1, PyYAML (1.1)."""
    return [ruamel_load(text), ruamel_load(text, (1, 1)), pyyaml.safe_load(text)]


# Strings every YAML version reads as something else unless quoted, and some that look close.
TRICKY = [
    "", " ", "  x", "x ", "~", "null", "Null", "NULL", "true", "True", "TRUE", "false", "yes", "Yes", "no",
    "NO", "on", "On", "off", "OFF", "y", "Y", "n", "N", "1", "-1", "+1", "0", "00", "0123", "0o17", "0x1F",
    "0b101", "1_000", "1.0", "-1.5", ".5", "1.", "1e5", "1E5", "1e+5", "1.0e-3", "1.2.3", "1:30", "-1:30:00",
    "190:20:30.15", ".inf", "-.inf", "+.inf", ".Inf", ".nan", ".NaN", "2024-01-01", "2001-12-14t21:59:43.10-05:00",
    "2001-12-14 21:59:43.10 -5", "<<", "=", "-", "--", "---", "...", "- x", "? x", "?", ":", "a:", "a: b",
    "a #b", "#x", "&a", "*a", "!tag", "!!str", "|", ">", "%YAML", "@x", "`x", "'x'", '"x"', "[a]", "{a}",
    ",a", "a\nb", "a\tb", "\x00", "\x07", "\x1b", "\x7f", "\x85", "\xa0", "\u2028", "\u2029", "\ufeff",
    "\ufffe", "é", "日本", "😀", "\\", "a\\nb", "8Gi", "500m", "16", "64Gi", "nvidia.com/gpu",
    "s3://bucket/path", "--epochs", "-x", "a:b", "a#b", "key=value", "_", "__init__", "e5", "0x", "+", ".",
]


@pytest.mark.parametrize("text", TRICKY)
def test_tricky_strings_stay_strings(text: str) -> None:
    for doc in ({"k": text}, [text], {text: 1}, text):
        out = dump(doc)
        assert all(got == doc for got in readers(out)), (doc, out)


@pytest.mark.parametrize("text", ["y", "Y", "n", "N"])
def test_what_only_go_yaml_v2_reads_as_a_boolean_is_quoted(text: str) -> None:
    """The clusters' reader, go-yaml v2 (kubernetes-sigs/yaml ``goyaml.v2/resolve.go`` at commit
    742f5e6f, ``resolveMapList``), reads these plain as booleans; PyYAML and ruamel read them
    as strings, so :func:`readers` cannot tell whether they were quoted."""
    assert dump({"k": text, text: 1}) == f'k: "{text}"\n"{text}": 1\n'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8Gi", "8Gi"),
        ("500m", "500m"),
        ("nvidia.com/gpu", "nvidia.com/gpu"),
        ("s3://bucket/path", "s3://bucket/path"),
        ("--epochs", "--epochs"),
        ("registry.example.com/img:1.0", "registry.example.com/img:1.0"),
        ("16", '"16"'),
        ("true", '"true"'),
        ("on", '"on"'),
        ("1.0", '"1.0"'),
        ("0123", '"0123"'),
        ("", '""'),
        ("~", '"~"'),
        ("a: b", '"a: b"'),
        ("a\nb\t\"c\"\\", '"a\\nb\\t\\"c\\"\\\\"'),
        ("\x85\u2028\x00", '"\\x85\\u2028\\0"'),
        ("日本", '"日本"'),
    ],
)
def test_quoting_is_minimal_and_exact(text: str, expected: str) -> None:
    assert dump({"k": text}) == f"k: {expected}\n"


def test_exact_layout() -> None:
    doc = {
        "apiVersion": "v1",
        "kind": "Thing",
        "metadata": {"name": "x", "labels": {}},
        "spec": {
            "items": [1, 2.5, None, True, False, [], {}],
            "nested": [[1, [2, 3]], {"a": 1, "b": [{"c": "d"}]}],
            "empty": [],
        },
    }
    assert dump(doc) == """\
apiVersion: v1
kind: Thing
metadata:
  name: x
  labels: {}
spec:
  items:
    - 1
    - 2.5
    - null
    - true
    - false
    - []
    - {}
  nested:
    - - 1
      - - 2
        - 3
    - a: 1
      b:
        - c: d
  empty: []
"""


def test_top_level_scalars_and_sequences() -> None:
    assert dump("x") == "x\n"
    assert dump(None) == "null\n"
    assert dump([]) == "[]\n"
    assert dump([{"a": 1}, "b"]) == "- a: 1\n- b\n"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.1, "0.1"),
        (1.0, "1.0"),
        (-0.0, "-0.0"),
        (1e16, "1.0e+16"),
        (1.5e-7, "1.5e-07"),
        (123456789.123, "123456789.123"),
        (math.inf, ".inf"),
        (-math.inf, "-.inf"),
        (math.nan, ".nan"),
        (10**30, "1000000000000000000000000000000"),
    ],
)
def test_numbers(value: float, text: str) -> None:
    out = dump({"v": value})
    assert out == f"v: {text}\n"
    for got in readers(out):
        if isinstance(value, float) and math.isnan(value):
            assert math.isnan(got["v"])
        else:
            assert got["v"] == value and type(got["v"]) is type(value)


def test_long_strings_are_not_wrapped() -> None:
    text = "word " * 100 + "end"
    assert dump({"k": text}) == f"k: {text}\n"
    assert dump({"k": "x" * 5000}).count("\n") == 1


def test_long_keys_use_explicit_key_syntax() -> None:
    key = "k" * 1500
    doc = {key: {"a": 1}, "b": [{key: 2}]}
    out = dump(doc)
    assert f"? {key}\n:\n  a: 1\n" in out
    assert all(got == doc for got in readers(out))


def test_dump_all() -> None:
    assert dump_all([]) == ""
    text = dump_all([{"a": 1}, ["x"], "---"])
    assert text == 'a: 1\n---\n- x\n---\n"---"\n'
    assert ruamel_load_all(text) == [{"a": 1}, ["x"], "---"]


def test_rejects_non_json_data() -> None:
    with pytest.raises(TypeError):
        dump({"a": {1, 2}})
    with pytest.raises(TypeError):
        dump({1: "a"})
    with pytest.raises(TypeError):
        dump((1, 2))


# --------------------------------------------------------------------------- property tests
_text = st.one_of(
    st.sampled_from(TRICKY),
    st.text(max_size=20),
    st.text(alphabet=st.sampled_from("0123456789_.:-+eExob ~#yYnN"), max_size=8),
    st.from_regex(r"[-+]?[0-9_]{0,4}(\.[0-9_.]{0,3})?([eE][-+]?[0-9]{0,2})?", fullmatch=True),
)
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), _text,
)
_json = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(_text, children, max_size=4),
    ),
    max_leaves=25,
)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(_json)
def test_round_trip_ruamel_safe(doc: Any) -> None:
    assert ruamel_load(dump(doc)) == doc


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(_json)
def test_round_trip_yaml_1_1_readers(doc: Any) -> None:
    out = dump(doc)
    assert ruamel_load(out, (1, 1)) == doc
    assert pyyaml.safe_load(out) == doc


@settings(max_examples=200, deadline=None)
@given(_text)
def test_plain_strings_resolve_to_str_in_every_version(text: str) -> None:
    out = dump(text)
    assert all(got == text for got in readers(out)), out


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(st.lists(_json, max_size=4))
def test_dump_all_round_trip(docs: list[Any]) -> None:
    assert ruamel_load_all(dump_all(docs)) == docs


@given(_json)
def test_byte_stable(doc: Any) -> None:
    assert dump(doc) == dump(doc)


def test_documents_nested_deeper_than_any_before_keep_the_layout() -> None:
    """The emitter keeps its indentation and key heads per depth, made as deep as a document
    needs: a mapping under 30 mappings, a literal block and a sequence item's mapping there,
    each two spaces deeper than its parent."""
    doc: Any = {"text": "a\nb\n", "items": [{"x": 1, "w": "z"}]}
    for _ in range(30):
        doc = {"k": doc}
    out = dump(doc)
    deep = "  " * 30
    assert out.endswith(f"{deep}text: |\n{deep}  a\n{deep}  b\n{deep}items:\n{deep}  - x: 1\n{deep}    w: z\n")
    assert all(got == doc for got in readers(out))
