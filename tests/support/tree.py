"""Rendered objects keyed the way tests name them: ``clusters/<cluster>/<file>``.

The rendered path is ``clusters/<cluster>/<infra|workloads>/<file>``, and a Volcano Job's name
ends in the hash of its spec (``-<8 hex>``). Tests about one object's content name it without
either, so they do not change when an unrelated field changes the hash; the layers and the
hash have tests of their own (test_engines.py, test_names.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_LAYERED = re.compile(r"^clusters/([^/]+)/(?:infra|workloads)/(?!kustomization\.yaml$)(.+)$")
_JOB_HASH = re.compile(r"^(job-.+)-[0-9a-f]{8}\.yaml$")


def logical_path(path: str) -> str:
    """``clusters/c/workloads/job-ml-x-1234abcd.yaml`` -> ``clusters/c/job-ml-x.yaml``; paths
    outside the layers are returned as they are."""
    match = _LAYERED.match(path)
    if match is None:
        return path
    name = match.group(2)
    job = _JOB_HASH.match(name)
    return f"clusters/{match.group(1)}/{job.group(1) + '.yaml' if job else name}"


def by_logical_path(files: Mapping[str, str]) -> dict[str, str]:
    """``files`` keyed by :func:`logical_path` (the layer kustomizations left out)."""
    found: dict[str, str] = {}
    for path, text in files.items():
        if _LAYERED.match(path) is None and path.startswith("clusters/"):
            continue
        key = logical_path(path)
        assert key not in found, f"two rendered files are both {key}"
        found[key] = text
    return found
