"""Run-time semantics of the rendered output (tests/support/runtime.py) over the bundled
example, every golden case and a generated fleet: what would actually happen on clusters."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.runtime import bind, fit_problems, pods

from bench.generate import Spec, generate
from fleetc.compiler import Compiled, compile_policies, load_policies

ROOT = Path(__file__).resolve().parents[1]
CASES = Path(__file__).parent / "cases"
GOLDEN = sorted(p.name for p in CASES.iterdir() if (p / "expected").is_dir())


def compiled_in(folder: Path, policies: str = "policies") -> Compiled:
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        return compile_policies(load_policies([policies]))
    finally:
        os.chdir(cwd)


@pytest.fixture(scope="module")
def bundled() -> Compiled:
    return compiled_in(ROOT)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Compiled:
    folder = tmp_path_factory.mktemp("generated")
    # Without the GPU policy: with time-slicing, the optimizer may give one node's worth of GPUs
    # to both exclusive and time-sliced pods, and a node is one or the other (see the report).
    spec = Spec(clusters=8, stages=60, load=0.8, seed=7, platform=True, policies=False)
    generate(spec).write(folder / "policies")
    return compiled_in(folder)


def every_compile(bundled: Compiled, generated: Compiled) -> list[tuple[str, Compiled]]:
    return [("bundled", bundled), ("generated", generated)] + [
        (case, compiled_in(CASES / case)) for case in GOLDEN]


def test_every_pod_fits_a_node(bundled: Compiled, generated: Compiled) -> None:
    for name, result in every_compile(bundled, generated):
        assert pods(result.files), name
        assert fit_problems(result.model, result.files) == [], name


def test_a_16_gpu_gang_runs_as_two_8_gpu_pods_on_two_nodes() -> None:
    result = compiled_in(CASES / "gang-16-gpus-on-8-gpu-nodes")
    gang = [p for p in pods(result.files) if p.stage == "llm/pretrain"]
    assert [p.requests()[0] for p in gang] == [8, 8]
    bound, problems = bind(result.model, result.files)
    assert problems == [] and len({bound[p.ident] for p in gang}) == 2
