"""How the suite's models read rendered manifests: with libyaml, as YAML 1.1.

The clusters read fleetc's files with sigs.k8s.io/yaml (kubectl, Flux's kustomize-controller,
Argo CD), which parses with its copy of go-yaml v2: YAML 1.1, where an unquoted ``on`` or
``yes`` is a boolean. PyYAML's safe resolver is YAML 1.1 too (test_yamlout holds the emitter's
text to read the same under it, ruamel's 1.2 and ruamel's 1.1), and its libyaml parser
(``CSafeLoader``) reads a rendered tree many times faster than ruamel's pure-Python composer,
which was most of the models' time (a generated fleet of 60 stages: 5.5 s of CPU to read its
pods with ruamel).
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
