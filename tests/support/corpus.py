"""What the suite's semantic models (Flux and Argo CD in :mod:`support.engines`, run time in
:mod:`support.runtime`, the names' limits) are run over: the bundled example, every golden case
and generated fleets, compiled in process."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from fleetc.compiler import Compiled, compile_policies, load_policies, load_policy_sources

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "cases"
#: The golden cases that compile (they have an ``expected/`` output folder).
GOLDEN = sorted(p.name for p in CASES.iterdir() if (p / "expected").is_dir())


def read_tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` by its path relative to it."""
    return {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(root.rglob("*")) if p.is_file()}


def read_tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by its path relative to it, as bytes (byte-identity checks)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def read_policies(folder: Path) -> dict[str, str]:
    """The policy files under ``folder``, by their path relative to its parent (``policies/...``)."""
    return {p.relative_to(folder.parent).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(folder.rglob("*.yaml"))}


def compile_texts(policies: Mapping[str, str]) -> dict[str, str]:
    """The output files of a compile of ``policies`` (path -> text), with no previous placement."""
    loaded = load_policy_sources([(path, text.encode()) for path, text in sorted(policies.items())], "test")
    return dict(compile_policies(loaded).files)


def compiled_in(folder: Path, policies: str = "policies") -> Compiled:
    """A compile of ``folder/policies`` as ``fleetc compile`` run in ``folder`` makes it."""
    return compile_policies(load_policies([policies], workdir=folder))
