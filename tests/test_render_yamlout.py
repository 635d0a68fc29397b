"""Multi-line strings (config files inside ConfigMaps) as ``|`` literal blocks: exact layout,
and every YAML reader fleetc's consumers use reads back the same string."""

from __future__ import annotations

from typing import Any

import pytest
import yaml as pyyaml
from hypothesis import given, settings
from hypothesis import strategies as st
from test_yamlout import ruamel_load

from fleetc.render.yamlout import dump


def test_literal_block_layout() -> None:
    doc = {"data": {"config": "version: v1\nsharing:\n  replicas: 2\n\n# done\n"}, "list": [{"k": "a\nb\n"}]}
    assert dump(doc) == (
        "data:\n"
        "  config: |\n"
        "    version: v1\n"
        "    sharing:\n"
        "      replicas: 2\n"
        "\n"
        "    # done\n"
        "list:\n"
        "  - k: |\n"
        "      a\n"
        "      b\n"
    )


def test_only_unambiguous_text_becomes_a_block() -> None:
    assert dump({"k": "one line\n"}) == 'k: "one line\\n"\n'  # a single line stays quoted
    assert dump({"k": "a\nb"}) == 'k: "a\\nb"\n'  # no final newline: | would add one
    assert dump({"k": "a\nb\n\n"}) == 'k: "a\\nb\\n\\n"\n'  # two final newlines: | would drop one
    assert dump({"k": " indented\nb\n"}) == 'k: " indented\\nb\\n"\n'  # would need an indentation indicator
    assert dump({"k": "a\n  \nb\n"}) == 'k: "a\\n  \\nb\\n"\n'  # blank line of spaces
    assert dump({"k": "\n 0\n"}) == 'k: "\\n 0\\n"\n'  # the first non-empty line sets the indentation
    assert dump({"k": "tab\there\nb\n"}) == 'k: "tab\\there\\nb\\n"\n'


_line = st.text(alphabet=st.sampled_from("ab :#-|>'\"{}[]&*!%@`,?0 \\"), max_size=12)
_multiline = st.lists(_line, min_size=2, max_size=5).map(lambda lines: "\n".join(lines) + "\n")


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(["a", "b", "config"]), _multiline, min_size=1)
       | st.lists(st.dictionaries(st.just("k"), _multiline, min_size=1), min_size=1, max_size=3))
def test_multiline_strings_round_trip_in_every_reader(doc: Any) -> None:
    text = dump(doc)
    assert ruamel_load(text) == doc
    assert ruamel_load(text, (1, 1)) == doc
    assert pyyaml.safe_load(text) == doc
