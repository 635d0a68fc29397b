"""How the suite's models read rendered manifests: with libyaml, as YAML 1.1.

The clusters read fleetc's files with sigs.k8s.io/yaml (kubectl, Flux's kustomize-controller,
Argo CD), whose ``YAMLToJSON`` parses with go-yaml v2 (kubernetes-sigs/yaml ``yaml.go``, read
at commit 1e5b47d3, importing ``gopkg.in/yaml.v2``; later releases carry the same code as
``goyaml.v2``): YAML 1.1, where an unquoted ``on`` or ``yes`` is a boolean. PyYAML's safe
resolver is YAML 1.1 too, but for ``y``, ``Y``, ``n`` and ``N``, which go-yaml v2 also reads as
booleans (``goyaml.v2/resolve.go`` at commit 742f5e6f, ``resolveMapList``) and PyYAML as
strings; fleetc's emitter quotes all four, and test_yamlout holds that and its text to read
the same under PyYAML, ruamel's 1.2 and ruamel's 1.1. libyaml's parser (``CSafeLoader``)
reads a rendered tree many times faster than ruamel's pure-Python composer, which was most of
the models' time (a generated fleet of 60 stages: 5.5 s of CPU to read its pods with ruamel,
timed by hand in one process).
"""

from __future__ import annotations

import functools
from typing import Any

import yaml


def read(text: str) -> Any:
    """The one document of ``text``, a fresh object."""
    return yaml.load(text, Loader=yaml.CSafeLoader)


def read_all(text: str) -> list[Any]:
    """Every document of ``text``, fresh objects."""
    return list(yaml.load_all(text, Loader=yaml.CSafeLoader))


@functools.cache
def manifest(text: str) -> Any:
    """:func:`read`, once per distinct text: shared between its callers, so never changed."""
    return read(text)
