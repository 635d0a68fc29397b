"""The libyaml fast path gives exactly what ruamel.yaml gives: the same Documents (data and the
position of every value and key) and the same diagnostics, on every policy file the tests and
benchmarks use and on a list of YAML corner cases."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fleetc.policy.fastcompose as fastcompose
from fleetc.policy import blockyaml
from fleetc.policy.load import parse
from fleetc.render.yamlout import dump

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.generate import Spec, generate  # noqa: E402

pytestmark = pytest.mark.skipif(not fastcompose.available(), reason="PyYAML without libyaml")

CORPUS = sorted(
    p for folder in (ROOT / "tests", ROOT / "policies") for p in folder.rglob("*.y*ml")
    if p.suffix in (".yaml", ".yml")
)

CORNER_CASES = [
    "a: 1\nb: 0o17\nc: 017\nd: 0x1F\ne: yes\nf: on\ng: ~\nh: null\ni: 1.5e3\nj: .inf\n"
    "k: -.NaN\nl: 2001-12-14\nm: !!str 5\nn: !!binary aGVsbG8=\no: !custom x\np: '0o17'\n",
    'q: "\\u00e9\\x41\\/ \\N\\_\\L\\P"\nr: "\\t"\n',
    "a: 12_000\nb: 1:30\nc: +12\nd: .5\ne: 1.\nf: -0\ng: 0b101\nh: True\ni: FALSE\nj: Null\n",
    "a: !!int '12'\nb: !!float 1\nc: !!bool yes\nd: !!null ''\ne: !!timestamp 2001-12-14\n",
    "a: &x {b: 1}\nc: *x\n",
    "a: *missing\n",
    "<<: {a: 1}\nb: 2\n",
    "a:\n  b:\n  c: \nd:\n",
    "- - - x\n  - y\n- z\n",
    "? [a, b]\n: c\n",
    "a: 1\na: 2\n",
    "a: |\n  line1\n  line2\n\nb: >-\n  folded\n  text\n\nc: |+\n  keep\n\n",
    "a: 'it''s'\nb: \"multi\n  line\"\nc: plain\n  continued\n",
    "---\n---\na: 1\n---\n",
    "# only a comment\n",
    "",
    "a: b: c\n",
    "[1, 2\n",
    "a:\r\n  b: 1\r\n  c: [x, y]\r\n",
    "a: é ü 中文 😀\nb: {c: 😀, d: x}\n",
    "key with spaces: v\n'quoted key': 1\n1: int key\n",
    "a: &a [*a]\n",
    "[" * 300 + "]" * 300 + "\n",
    "[" * 70 + "]" * 70 + "\n",
    "a: [b, {c: d}, [e]]\n",
    "a: &x 1\nb: &x 2\nc: *x\n",
    "%YAML 1.1\n---\na: yes\n",
    "a:\tb\n",
    "a:\n\t- b\n",
    "a: 'x'  # comment\n\"a\\tb\": 1\n",
    "a:\n- 1\n- 2\nb:\n  - 3\n",
    "k" * 1100 + ": 1\n",
    "a: \x85b\n",
    "a: b\x00\n",
    "a: {b: 1, b: 2}\n",
    "- a\nb: c\n",
    "a: >\n folded\n  more\n back\n",
    "apiVersion: v1\nkind: Fleet\n...\n---\nkind: x\n",
    "!!map {a: 1}\n",
    "!!set {a, b}\n",
    "!!omap [a: 1]\n",
    "a: !<tag:yaml.org,2002:str> 5\n",
    "a: ! 5\nb: ! x\n",
    "&anchor a: b\n",
    "a: @x\n",
    "a: `x\n",
    "a: -\n",
    "- ? a\n  : b\n",
    "a: !custom\nb: &x\nc: *x\n",
    "- \n- a\n-\n",
    "? a\n? b\n: c\n",
    "a:\n  - b:\n    c:\n  -\nd: [a, , b]\ne: {x: , y}\n",
    "a:\n  b:\n    c:\n\n\n# end\n",
    "---\na:\n...\n---\nb:\n",
    "{a: , b: 1, c}\n",
    "[a: , b]\n",
    "- a:\n- b:\n  c: 1\n",
    "a:\n# c\n\nb: 1\n",
    "a:   # comment\nb: 1\n",
    "? \n: v\n",
    "a:\n  b:\n    - c:\n      d:\n  e:\n",
    "a: x\nb:\n",
    "a: x\nb:",
    "a:\r\n  b:\r\nc: 1\r\n",
    "? ll\n ",
    "- a\n-",
    "a: |+\n  x",
]


def both(text: str, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object]:
    """``text`` parsed by the fast paths (fleetc's block layout, else libyaml), and by ruamel."""
    fast = parse(text, "policy.yaml")
    with monkeypatch.context() as m:
        m.setattr(fastcompose, "CParser", None)
        m.setattr(blockyaml, "block_stream", lambda *args: None)
        slow = parse(text, "policy.yaml")
    return fast, slow


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_policy_files_parse_identically(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = path.read_bytes().decode("utf-8-sig", "replace")
    fast, slow = both(text, monkeypatch)
    assert fast == slow


@pytest.mark.filterwarnings("ignore::ruamel.yaml.error.ReusedAnchorWarning")
@pytest.mark.parametrize("text", CORNER_CASES, ids=range(len(CORNER_CASES)))
def test_corner_cases_parse_identically(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, slow = both(text, monkeypatch)
    assert fast == slow
    assert _load_all(text) is None or fastcompose.compose_all(text, _resolver()) is not None


@pytest.mark.parametrize("spec", [Spec(clusters=12, stages=60, load=0.9, seed=4, platform=True),
                                  Spec(clusters=5, stages=20, seed=2, perfect=True)])
def test_generated_instances_parse_identically(spec: Spec,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    for text in generate(spec).files.values():
        assert fastcompose.compose_all(text, _resolver()) is not None  # the fast path ran
        fast, slow = both(text, monkeypatch)
        assert fast == slow


def test_the_fast_path_runs_on_real_policies() -> None:
    """Not a vacuous comparison: the bundled and seed policies do take the libyaml path."""
    real = [p for p in CORPUS if p.is_relative_to(ROOT / "policies")
            or p.is_relative_to(ROOT / "tests" / "seed")]
    assert real
    for path in real:
        assert fastcompose.compose_all(path.read_text("utf-8"), _resolver()) is not None, path


@pytest.mark.parametrize("text", ["%YAML 1.1\n---\na: yes\n", "a:\tb\n", "a: *missing\n",
                                  "[" * 300 + "]" * 300, "a: b: c\n", "a: &x 1\nb: *x\n",
                                  "a: !!str 1\n", "|\n  x\n", "{a: , b: 1}\n"])
def test_the_fast_path_declines_what_it_cannot_match(text: str) -> None:
    assert fastcompose.compose_all(text, _resolver()) is None


def test_the_data_fast_path_runs_on_real_policies() -> None:
    """:func:`fastcompose.load_all` reads the bundled and seed policies and generated ones."""
    texts = [p.read_text("utf-8") for p in CORPUS if p.is_relative_to(ROOT / "policies")
             or p.is_relative_to(ROOT / "tests" / "seed")]
    texts += generate(Spec(clusters=12, stages=60, load=0.9, seed=4, platform=True)).files.values()
    for text in texts:
        assert _load_all(text) is not None, text[:200]


@pytest.mark.parametrize("text", [
    "%YAML 1.2\n---\na: 1\n", "a:\tb\n", "a: &x 1\nb: *x\n", "a: !!str 1\n", "|\n  x\n",
    "a: b: c\n", "a: 1\na: 2\n", "1: a\n", "? [1]\n: a\n", "<<: {a: 1}\n", "a: <<\n",
    "a: !!binary aGVsbG8=\n", "[" * 66 + "]" * 66 + "\n", "[" + "1, " * 200_000 + "]\n",
])
def test_the_data_fast_path_declines_what_the_node_path_reports(text: str) -> None:
    assert _load_all(text) is None


@pytest.mark.parametrize(("text", "deeper"), [
    ("[" * 64 + "]" * 64 + "\n", False), ("[" * 65 + "]" * 65 + "\n", True),
    ("a: " + "[" * 3000 + "]" * 3000 + "\n", True),  # past libyaml's own limit of 1,000 flow levels
    ("".join("  " * i + f"k{i}:\n" for i in range(65)), True),
    ("".join("  " * i + f"k{i}:\n" for i in range(64)), False),
    ("[" * 70 + "\n", True), ("a: b: c\n" + "[" * 70, False),  # an error before the depth: not deeper
])
def test_deeper_than_counts_mappings_and_lists(text: str, deeper: bool) -> None:
    assert fastcompose.deeper_than(text, 64) is deeper


def _positions_agree(text: str) -> bool:
    """Where :func:`fastcompose.load_all` reads ``text``, :func:`fastcompose.positions_all`
    either declines or gives the node path's positions of every value and key, in its order;
    whether it answered."""
    from ruamel.yaml import YAML

    from fleetc.policy.load import _compose, _converted, _Positions

    stream = _load_all(text)
    if stream is None:
        return False
    yaml = YAML(typ="safe", pure=True)
    nodes, written = _compose(text, yaml)
    slow = [(index, list(c.values.items()), list(c.keys.items()))
            for index, c in _converted(nodes, written, "", yaml.constructor)]
    # One document at a time, from its own lines (or the whole file where that declines).
    positions = _Positions(text, stream.lines)
    alone = [(index, list(positions.of(index, key=False).items()), list(positions.of(index, key=True).items()))
             for index, _, _ in slow]
    assert alone == slow, text
    found = fastcompose.positions_all(text, yaml.resolver)
    if found is None:
        return False
    fast = [(index, list(values.items()), list(keys.items()))
            for index, (values, keys) in ((i, t) for i, t in enumerate(found) if t is not None)]
    assert fast == slow, text
    return True


@pytest.mark.filterwarnings("ignore::ruamel.yaml.error.ReusedAnchorWarning")
@pytest.mark.parametrize("text", [*CORNER_CASES, *(p.read_text("utf-8", "replace") for p in CORPUS)],
                         ids=[*map(str, range(len(CORNER_CASES))), *(p.name for p in CORPUS)])
def test_positions_from_events_are_the_node_paths(text: str) -> None:
    _positions_agree(text)


def test_positions_from_events_run_on_real_and_generated_policies() -> None:
    """Not vacuous: the walk over events answers for the bundled, seed and generated policies
    (a 1,000 x 20,000 compile places ~15,000 warnings in them)."""
    texts = [p.read_text("utf-8") for p in CORPUS if p.is_relative_to(ROOT / "policies")
             or p.is_relative_to(ROOT / "tests" / "seed")]
    texts += generate(Spec(clusters=12, stages=60, load=0.9, seed=4, platform=True)).files.values()
    for text in texts:
        assert _positions_agree(text), text[:200]
    from fleetc.policy.load import _Positions

    alone = 0
    for text in texts:
        stream = _load_all(text)
        assert stream is not None
        positions = _Positions(text, stream.lines)
        alone += sum(positions._document(index) is not None for index in range(len(stream.lines)))
    assert alone > 10  # the documents of files of several are read from their own lines


@pytest.mark.parametrize("text", ["a:\n", "- \n- a\n", "1: a\n", "a: 1\na: 2\n", "? [1]\n: a\n",
                                  "<<: {a: 1}\n", "|\n  x\n", "a: &x 1\nb: *x\n", "a: !!str 1\n"])
def test_positions_from_events_decline_what_the_node_path_marks_or_reports(text: str) -> None:
    from ruamel.yaml import YAML

    assert fastcompose.positions_all(text, YAML(typ="safe", pure=True).resolver) is None


def _load_all(text: str) -> fastcompose.Stream | None:
    from ruamel.yaml import YAML

    from fleetc.policy.load import MAX_DEPTH, MAX_NODES, _ScalarValues

    yaml = YAML(typ="safe", pure=True)
    return fastcompose.load_all(text, yaml.resolver, _ScalarValues(yaml.constructor),
                                max_depth=MAX_DEPTH, max_values=MAX_NODES)


def _resolver():  # noqa: ANN202 - ruamel's resolver
    from ruamel.yaml import YAML

    return YAML(typ="safe", pure=True).resolver


# --- the fast schema check (fleetc.policy.schemacheck._schema_valid) -------------------------------------


def _documents() -> list[dict]:
    texts = [p.read_text("utf-8", "replace") for p in CORPUS]
    texts += [t for spec in (Spec(clusters=12, stages=60, load=0.9, seed=4, platform=True),)
              for t in generate(spec).files.values()]
    found = []
    for text in texts:
        documents, _ = parse(text, "policy.yaml")
        found += [d.data for d in documents if isinstance(d.data, dict)]
    return found


@pytest.mark.slow
def test_the_fast_schema_check_never_passes_what_jsonschema_rejects() -> None:
    from fleetc.policy.kinds import KINDS
    from fleetc.policy.schemacheck import _schema_valid, _validator

    checked = rejected = 0
    mutations = [{}, {"extra": 1}, {"metadata": {"name": "Bad_Name"}}, {"spec": {"clusters": []}},
                 {"spec": {"stages": [{"name": "x\n", "type": "Training"}]}},
                 {"metadata": {"name": "a" * 64}}, {"spec": None}, {"spec": {"replicas": 2**70}}]
    for data in _documents():
        kind = data.get("kind")
        if kind not in KINDS:
            continue
        for change in mutations:
            variant = {**data, **change}
            slow = not any(True for _ in _validator(kind).iter_errors(variant))
            fast = _schema_valid(kind, variant)
            assert slow or not fast, (kind, change)
            checked += 1
            rejected += not slow
    assert checked > 100 and rejected > checked / 2


@pytest.mark.slow
def test_the_fast_schema_check_accepts_valid_policies() -> None:
    from fleetc.policy.schemacheck import _schema_valid

    generated = [d for d in _documents() if str(d.get("metadata", {}).get("name", "")).startswith(
        ("bench-", "pipeline-", "gpu-optimization", "data-optimization"))]
    assert generated and all(_schema_valid(d["kind"], d) for d in generated)


# --- differential fuzzing: random documents, then random edits to them -------------------------

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=False),
    st.text(alphabet=st.sampled_from("ab0-:# '\"\\{}[],&*!|>?%@`~.\n"), max_size=8),
    st.sampled_from(["yes", "no", "on", "0o17", "017", "0x1f", "1_000", "1:30", "~", "null", ""]),
)
_data = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.text(alphabet="abk-_ 1:", min_size=1, max_size=5), inner, max_size=4),
), max_leaves=12)
_edits = st.lists(st.tuples(st.integers(0, 10**4), st.sampled_from(
    ["", ":", "- ", " ", "  ", "\n", "#", "[", "]", "{", "}", ",", "'", '"', "&a ", "*a", "? ",
     "!!str ", "---\n", ": ", "|\n", ">-\n"])), max_size=4)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::ruamel.yaml.error.ReusedAnchorWarning")
@settings(max_examples=300, deadline=None)
@given(_data, _edits)
def test_random_and_edited_documents_parse_identically(data: object, edits: list) -> None:
    text = dump(data)
    for position, insert in edits:
        at = position % (len(text) + 1)
        text = text[:at] + insert + text[at + (insert == ""):]
    with pytest.MonkeyPatch.context() as m:
        fast = parse(text, "policy.yaml")
        m.setattr(fastcompose, "CParser", None)
        m.setattr(blockyaml, "block_stream", lambda *args: None)
        slow = parse(text, "policy.yaml")
    assert fast == slow, text
    # positions of what the data path read come from libyaml's nodes, never from ruamel
    assert _load_all(text) is None or fastcompose.compose_all(text, _resolver()) is not None
    _positions_agree(text)
