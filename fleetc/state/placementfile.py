"""The one reader of ``placement.yaml``, the placement report fleetc writes into the output folder
(its one writer is :func:`fleetc.render.report.placement_report`).

:func:`yaml_documents` reads the file's YAML, fast; :func:`fleetc.placement.previous.parse_previous`
reads from it what the next compile needs (strictly: anything else is no previous placement), and
:func:`stage_entries` what a review of two compiles needs (leniently: a file that is not a
report has no stages).
"""

from __future__ import annotations

import sys
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.constructor import ConstructorError
from ruamel.yaml.error import YAMLError
from ruamel.yaml.nodes import ScalarNode

from fleetc.infra.collector import gc_paused
from fleetc.policy import blockyaml, fastcompose
from fleetc.policy.load import MAX_DEPTH, Yaml12Composer

#: The placement report's name in the output folder.
PLACEMENT_FILE = "placement.yaml"


def yaml_documents(text: str) -> list[Any]:
    """Every document of ``text`` as ruamel's safe loader reads it, for files fleetc wrote itself
    (the previous ``placement.yaml``): through libyaml where it reads as ruamel would (a
    1,000-cluster fleet's report holds ~500,000 values, which ruamel's pure-Python parser took
    ~30 s over), through ruamel otherwise. Raises ruamel's ``YAMLError``, and
    ``RecursionError`` for nesting deeper than :data:`MAX_DEPTH` (found by libyaml at once,
    where ruamel's parser would take seconds before running out of stack)."""
    yaml = YAML(typ="safe", pure=True)

    def scalar(node: ScalarNode) -> Any:
        try:
            return yaml.constructor.construct_object(node)
        except (ConstructorError, ValueError):
            return fastcompose.DECLINE

    def plain(text: str) -> Any:
        value = scalar(ScalarNode(yaml.resolver.resolve(ScalarNode, text, (True, False)), text, None, None))
        if value is fastcompose.DECLINE:
            raise ValueError(text)
        return value

    with gc_paused():
        documents = blockyaml.block_documents(text, plain, MAX_DEPTH)  # fleetc's own layout, read faster
        if documents is not None:
            return documents
        stream = fastcompose.load_all(text, yaml.resolver, scalar, max_depth=MAX_DEPTH, max_values=sys.maxsize)
        if stream is not None:
            return stream.documents
        if fastcompose.deeper_than(text, MAX_DEPTH):
            raise RecursionError(f"nesting is deeper than {MAX_DEPTH} levels")
        yaml.Composer = Yaml12Composer
        return list(yaml.load_all(text))


def stage_entries(text: str) -> list[dict[str, Any]]:
    """The stage entries (mappings) of a placement report's ``stages``; none when ``text`` is not
    YAML of one document holding a list of them."""
    try:
        documents = yaml_documents(text)
    except YAMLError:
        return []
    data = documents[0] if len(documents) == 1 else None
    stages = data.get("stages") if isinstance(data, dict) else None
    return [s for s in stages if isinstance(s, dict)] if isinstance(stages, list) else []
