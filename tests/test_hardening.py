"""Every class of bad input: a clear message, exit 1, no traceback, and out/ left byte-for-byte
as it was. Also solver faults: a failing or lying solver is a clear error, never a traceback.

Each case starts from a good compile of the bundled example, breaks the policies in one way and
compiles again through the real command line.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import highspy
import numpy as np
import pytest
from click.testing import CliRunner, Result
from support.output import copy_output

from fleetc.cli import cli
from fleetc.compiler import Options, compile_policies, load_policies
from fleetc.placement import cvx
from fleetc.placement.program import Program
from fleetc.placement.program import Result as Solve
from fleetc.placement.verify import verify
from fleetc.policy.files import MAX_FILE_BYTES
from fleetc.policy.load import MAX_DEPTH, MAX_NODES

ROOT = Path(__file__).resolve().parents[1]

Breakage = Callable[[Path], None]


def edit(name: str, old: str, new: str, count: int = 1) -> Breakage:
    """Replace ``old`` (which must occur) in ``policies/name``."""

    def apply(policies: Path) -> None:
        path = policies / name
        text = path.read_text(encoding="utf-8")
        assert old in text, f"{old!r} not in {name}"
        path.write_text(text.replace(old, new, count), encoding="utf-8")

    return apply


def add(name: str, content: str | bytes) -> Breakage:
    """Add a file ``policies/name`` with ``content``."""

    def apply(policies: Path) -> None:
        path = policies / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")

    return apply


def outside_link(policies: Path) -> None:
    secret = policies.parent / "elsewhere" / "passwd.yaml"
    secret.parent.mkdir()
    secret.write_text("root: x\n")
    (policies / "linked.yaml").symlink_to(secret)


ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8))
DEEP = "apiVersion: " + "[" * (MAX_DEPTH + 10) + "]" * (MAX_DEPTH + 10) + "\n"
PIPELINE = "llm-training-pipeline.yaml"
FLEET = "fleet.yaml"

#: name -> (how to break the bundled policies, the exact stderr of the compile)
CASES: dict[str, tuple[Breakage, str]] = {
    "yaml-syntax": (
        edit(FLEET, "  name: aigc-platform\n", "  name: [aigc-platform\n"),
        "policies/fleet.yaml:8:12: error: invalid YAML: expected ',' or ']', but got ':' "
        '(while parsing a flow sequence)\n'
        '1 error in 1 file\n'),
    "tab-indent": (
        edit(FLEET, "    provider: huawei\n", "\tprovider: huawei\n"),
        'policies/fleet.yaml:12:1: error: invalid YAML: tab character: YAML indentation '
        'must use spaces\n'
        '  hint: replace the tab with spaces\n'
        '1 error in 1 file\n'),
    "wrong-type": (
        edit(PIPELINE, "    replicas: 4\n", "    replicas: four\n"),
        'policies/llm-training-pipeline.yaml:67:15: error: spec.stages[3].replicas: '
        "expected an integer, got 'four'\n"
        '1 error in 1 file\n'),
    "negative-number": (
        edit(PIPELINE, "    replicas: 4\n", "    replicas: -4\n"),
        'policies/llm-training-pipeline.yaml:67:15: error: spec.stages[3].replicas: '
        'expected an integer >= 1, got -4\n'
        '1 error in 1 file\n'),
    "huge-integer": (
        edit(PIPELINE, "    replicas: 4\n", "    replicas: 100000000000000000000000000000\n"),
        'policies/llm-training-pipeline.yaml:67:15: error: spec.stages[3].replicas: '
        'expected an integer <= 100000, got 100000000000000000000000000000\n'
        '1 error in 1 file\n'),
    "infinite-number": (
        edit(FLEET, "      gpuHour: 2.8\n", "      gpuHour: .inf\n"),
        'policies/fleet.yaml:23:16: error: spec.clusters[0].pricing.gpuHour: expected a '
        'number <= 1000000.0, got inf\n'
        '1 error in 1 file\n'),
    "nan": (
        edit(FLEET, "      gpuHour: 2.8\n", "      gpuHour: .nan\n"),
        'policies/fleet.yaml:23:16: error: spec.clusters[0].pricing.gpuHour: expected a '
        'number, got .nan (not a number)\n'
        '1 error in 1 file\n'),
    "huge-quantity": (
        edit(FLEET, "      cpu: 1024\n", "      cpu: 1e400\n"),
        'policies/fleet.yaml:20:12: error: spec.clusters[0].capacity.cpu: expected a '
        'finite, non-negative quantity, got inf\n'
        '1 error in 1 file\n'),
    "huge-gpu-count": (
        edit(FLEET, 'gpu-count: "64"', 'gpu-count: "99999999999999999999"'),
        'policies/fleet.yaml:17:18: error: spec.clusters[0].attributes.gpu-count: '
        'expected at most 1000000 GPUs, got 99999999999999999999\n'
        '1 error in 1 file\n'),
    "unknown-field": (
        edit(PIPELINE, "    replicas: 4\n", "    replica: 4\n"),
        'policies/llm-training-pipeline.yaml:67:5: error: spec.stages[3].replica: unknown '
        "field 'replica'\n"
        "  hint: did you mean 'replicas'?\n"
        '1 error in 1 file\n'),
    "unknown-kind": (
        edit(PIPELINE, "kind: AIGCPipeline\n", "kind: AIGCPipe\n"),
        "policies/llm-training-pipeline.yaml:7:7: error: kind: unknown kind 'AIGCPipe'\n"
        "  hint: did you mean 'AIGCPipeline'?\n"
        '1 error in 1 file\n'),
    "unknown-api-version": (
        edit(PIPELINE, "apiVersion: aigc.kurator.dev/v1alpha1\n", "apiVersion: aigc.kurator.dev/v2\n"),
        'policies/llm-training-pipeline.yaml:6:13: error: apiVersion: expected '
        "'aigc.kurator.dev/v1alpha1' for kind AIGCPipeline, got 'aigc.kurator.dev/v2'\n"
        '1 error in 1 file\n'),
    "duplicate-key": (
        edit(PIPELINE, "    replicas: 4\n", "    replicas: 4\n    replicas: 5\n"),
        'policies/llm-training-pipeline.yaml:68:5: error: spec.stages[3].replicas: '
        "duplicate key 'replicas' (first defined at line 67)\n"
        '  hint: remove one of the two\n'
        '1 error in 1 file\n'),
    "duplicate-stage-name": (
        edit(PIPELINE, "  - name: model-evaluation\n", "  - name: model-training\n"),
        'policies/llm-training-pipeline.yaml:50:11: error: spec.stages[2].name: duplicate '
        "stage name 'model-training' (also spec.stages[1])\n"
        'policies/llm-training-pipeline.yaml:52:20: error: '
        'spec.stages[2].dependencies[0]: a stage cannot depend on itself\n'
        'policies/llm-training-pipeline.yaml:55:15: error: spec.stages[2].inputs[0].from: '
        'a stage cannot read its own output\n'
        'policies/llm-training-pipeline.yaml:63:20: error: '
        "spec.stages[3].dependencies[0]: no stage named 'model-evaluation' in this "
        'pipeline\n'
        "  hint: did you mean 'model-deployment'?\n"
        '4 errors in 1 file\n'),
    "duplicate-cluster-name": (
        edit(FLEET, "  - name: edge-cluster-factory\n", "  - name: gpu-cluster-huawei\n"),
        'policies/fleet.yaml:35:11: error: spec.clusters[2].name: duplicate cluster name '
        "'gpu-cluster-huawei' (also spec.clusters[0])\n"
        '1 error in 1 file\n'),
    "broken-reference": (
        edit(PIPELINE, 'dependencies: ["model-evaluation"]', 'dependencies: ["model-evaluaton"]'),
        'policies/llm-training-pipeline.yaml:63:20: error: '
        "spec.stages[3].dependencies[0]: no stage named 'model-evaluaton' in this "
        'pipeline\n'
        "  hint: did you mean 'model-evaluation'?\n"
        '1 error in 1 file\n'),
    "broken-cluster-reference": (
        edit("aigc-platform.yaml", "      - gpu-cluster-huawei\n", "      - gpu-cluster-huawey\n"),
        'policies/aigc-platform.yaml:20:9: error: spec.multiCluster.secondaryClusters[0]: '
        "cluster 'gpu-cluster-huawey' is not in Fleet 'aigc-platform' "
        '(policies/fleet.yaml)\n'
        "  hint: did you mean 'gpu-cluster-huawei'?\n"
        '1 error in 1 file\n'),
    "dependency-cycle": (
        edit(PIPELINE, 'dependencies: ["model-training"]', 'dependencies: ["model-training", "model-deployment"]'),
        'policies/llm-training-pipeline.yaml:52:19: error: spec.stages[2].dependencies: '
        'dependency cycle: model-evaluation -> model-deployment -> model-evaluation\n'
        '1 error in 1 file\n'),
    "bad-quantity": (
        edit(PIPELINE, "      memory: 256Gi\n", "      memory: 256Gb\n"),
        'policies/llm-training-pipeline.yaml:45:15: error: '
        'spec.stages[1].resources.memory: expected a Kubernetes quantity such as 16, 500m '
        "or 64Gi, got '256Gb'\n"
        '1 error in 1 file\n'),
    "negative-quantity": (
        edit(PIPELINE, "      memory: 256Gi\n", "      memory: -256Gi\n"),
        'policies/llm-training-pipeline.yaml:45:15: error: '
        'spec.stages[1].resources.memory: expected a Kubernetes quantity such as 16, 500m '
        "or 64Gi, got '-256Gi'\n"
        '1 error in 1 file\n'),
    "bad-percentage": (
        edit("gpu-optimization.yaml", "defragmentThreshold: 80%", "defragmentThreshold: 180%"),
        'policies/gpu-optimization.yaml:12:26: error: '
        'spec.memoryManagement.defragmentThreshold: expected a percentage from 0% to '
        "100%, got '180%'\n"
        '1 error in 1 file\n'),
    "empty-file": (
        add("empty.yaml", ""),
        'policies/empty.yaml: error: empty file: expected at least one policy document\n'
        '1 error in 1 file\n'),
    "comments-only": (
        add("comments.yaml", "# nothing here\n---\n"),
        'policies/comments.yaml: error: empty file: expected at least one policy document\n'
        '1 error in 1 file\n'),
    "not-utf8": (
        add("latin1.yaml", "kind: Fleet # caf\xe9\n".encode("latin-1")),
        'policies/latin1.yaml:1:18: error: not valid UTF-8 (byte 0xe9)\n'
        '  hint: save the file as UTF-8\n'
        '1 error in 1 file\n'),
    "nul-byte": (
        add("nul.yaml", b"apiVersion: v1\x00\nkind: Fleet\n"),
        'policies/nul.yaml:1:15: error: invalid YAML: control character U+0000 is not allowed\n'
        '  hint: remove it; policy files are plain text\n'
        '1 error in 1 file\n'),
    "not-a-mapping": (
        add("list.yaml", "- apiVersion: v1\n- kind: Fleet\n"),
        'policies/list.yaml:1:1: error: expected a policy object (a mapping), got a list\n'
        '1 error in 1 file\n'),
    "scalar-document": (
        add("scalar.yaml", "just some text\n"),
        "policies/scalar.yaml:1:1: error: expected a policy object (a mapping), got a string\n"
        '1 error in 1 file\n'),
    "alias-bomb": (
        add("bomb.yaml", ALIAS_BOMB),
        'policies/bomb.yaml:1:32: error: document expands to more than 200000 values\n'
        '  hint: YAML aliases are expanded; reduce their use\n'
        '1 error in 1 file\n'),
    "too-deep": (
        add("deep.yaml", DEEP),
        'policies/deep.yaml:1:77: error: nesting is deeper than 64 levels\n'
        '1 error in 1 file\n'),
    "oversized-file": (
        add("huge.yaml", "# padding\n" * (MAX_FILE_BYTES // 10 + 1)),
        'policies/huge.yaml: error: file is 4194310 bytes; the limit is 4194304\n'
        '  hint: split it into several policy files\n'
        '1 error in 1 file\n'),
    "name-with-dotdot": (
        edit(PIPELINE, "  name: llm-chinese-training\n", "  name: ../llm-chinese-training\n"),
        'policies/llm-training-pipeline.yaml:9:9: error: metadata.name: expected a '
        "DNS-1123 label (lower-case letters, digits and '-', starting and ending with a "
        "letter or digit, at most 63 characters), got '../llm-chinese-training'\n"
        '1 error in 1 file\n'),
    "namespace-with-slash": (
        edit(PIPELINE, "  namespace: aigc-prod\n", "  namespace: aigc/prod\n"),
        'policies/llm-training-pipeline.yaml:10:14: error: metadata.namespace: expected a '
        "DNS-1123 label (lower-case letters, digits and '-', starting and ending with a "
        "letter or digit, at most 63 characters), got 'aigc/prod'\n"
        '1 error in 1 file\n'),
    "symlink-outside": (
        outside_link,
        'policies/linked.yaml: error: symbolic link points outside the policy folders\n'
        '  hint: copy the file into the policy folder instead\n'
        '1 error in 1 file\n'),
    "credential": (
        edit(PIPELINE, "source: cos://my-bucket/raw-data/", "source: cos://admin:hunter2@my-bucket/raw-data/"),
        'policies/llm-training-pipeline.yaml:17:17: error: '
        'spec.stages[0].inputs[0].source: looks like a credential (a URL with a '
        'password); fleetc never renders secrets\n'
        '  hint: store it in a Kubernetes Secret and reference the Secret by name\n'
        '1 error in 1 file\n'),
    "merge-key": (
        add("merge.yaml", "base: &b {kind: Fleet}\nother:\n  <<: *b\n"),
        "policies/merge.yaml:3:3: error: other: merge keys ('<<') are not supported\n"
        '  hint: write the fields out in full\n'
        '1 error in 1 file\n'),
    "binary-tag": (
        add("binary.yaml", "apiVersion: !!binary aGVsbG8=\nkind: Fleet\n"),
        "policies/binary.yaml:1:13: error: apiVersion: YAML tag '!!binary' is not allowed: policies are plain YAML\n"
        '  hint: remove the tag; quote a value to make it text\n'
        '1 error in 1 file\n'),
    "infeasible": (
        edit(PIPELINE, "      gpu: 8\n", "      gpu: 80\n"),
        'error: no placement satisfies every hard constraint:\n'
        '  0/3 clusters fit llm-chinese-training/model-training: 1 has no GPUs, 1 has no a100, '
        '1 is too small: 80 GPUs per replica, cluster has 64\n'
        '  fix: llm-chinese-training/model-training: add 46 a100 to gpu-cluster-huawei (other stages take 8 of '
        'its 51 usable GPUs), or a new cluster in cn with 100 a100\n'
        'error: 1 of 7 stages refused, nothing written (--allow-unplaced renders the 6 that fit)\n'),
}


def snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Every entry under ``folder`` with its mode and (for files) its bytes."""
    return {p.relative_to(folder).as_posix(): (p.stat().st_mode,
                                               p.read_bytes() if p.is_file() else b"")
            for p in sorted(folder.rglob("*"))}


def compile_here(*args: str) -> Result:
    return CliRunner().invoke(cli, ["compile", "policies", "--out", "out", *args])


@pytest.fixture(scope="module")
def good_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """out/ as a good compile of the bundled example writes it."""
    base = tmp_path_factory.mktemp("good")
    shutil.copytree(ROOT / "policies", base / "policies")
    cwd = Path.cwd()
    os.chdir(base)
    try:
        result = compile_here()
    finally:
        os.chdir(cwd)
    assert result.exit_code == 0, result.output
    return base / "out"


@pytest.fixture
def project(tmp_path: Path, good_out: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder with the bundled policies and their good out/ (plus a foreign file)."""
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    copy_output(good_out, tmp_path / "out")
    (tmp_path / "out" / "NOTES.md").write_text("a file fleetc did not write\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def inputs_changed(project: Path) -> None:
    """Make out/placement.yaml say it came from other inputs, so the next compile must solve
    (a compile of the inputs out/ came from gives its placement back without the solver)."""
    report = project / "out" / "placement.yaml"
    report.write_text(re.sub(r"(?m)^inputs: .*$", "inputs: sha256:other", report.read_text()))


def assert_untouched(project: Path, result: Result, before: dict[str, tuple[int, bytes]]) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert result.stdout == ""
    assert snapshot(project / "out") == before
    assert not [p.name for p in project.iterdir() if p.name.startswith(".out.")]


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_a_clear_error_and_leaves_out_untouched(case: str, project: Path) -> None:
    before = snapshot(project / "out")
    breakage, expected = CASES[case]
    breakage(project / "policies")
    result = compile_here()
    assert result.exit_code == 1, result.output
    assert result.stderr == expected
    assert_untouched(project, result, before)


def test_the_matrix_exceeds_the_documented_limits() -> None:
    assert 10**9 > MAX_NODES  # what ALIAS_BOMB expands to
    assert len("# padding\n" * (MAX_FILE_BYTES // 10 + 1)) > MAX_FILE_BYTES
    assert DEEP.count("[") > MAX_DEPTH


# --- solver faults -----------------------------------------------------------------------------


def test_a_failing_solver_is_a_clear_error(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inputs_changed(project)
    before = snapshot(project / "out")

    monkeypatch.setattr(highspy.Highs, "run", lambda self: highspy.HighsStatus.kError)
    result = compile_here()
    assert result.exit_code == 3, result.output  # a solver failure is a bug in fleetc, not the policies'
    assert result.stderr == ("fleetc: internal error: the HIGHS solver failed (through cvxpy)\n"
                             "This is a bug in fleetc; please report it to the fleetc "
                             "maintainers with the policies that caused it, the command line and "
                             "`fleetc --version` (FLEETC_DEBUG=1 shows the traceback).\n")
    assert_untouched(project, result, before)


def test_an_unexpected_solver_exception_is_an_internal_error_without_traceback(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inputs_changed(project)
    before = snapshot(project / "out")

    def explode(self: highspy.Highs) -> highspy.HighsStatus:
        raise MemoryError("out of memory in the solver")

    monkeypatch.setattr(highspy.Highs, "run", explode)
    result = compile_here()
    assert result.exit_code == 3, result.output
    assert result.stderr.startswith(
        "fleetc: internal error: MemoryError: out of memory in the solver\n"
        "This is a bug in fleetc; please report it")
    assert_untouched(project, result, before)


@pytest.mark.parametrize("garbage", [7.0, -1.0, 0.5])
def test_a_solver_that_returns_garbage_is_caught_by_the_verifier(
        garbage: float, project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A solver claiming optimality for values that break the constraints never reaches out/."""
    inputs_changed(project)
    before = snapshot(project / "out")

    def lie(program: Program, budget: object, **kwargs: object) -> Solve:  # the exact path's solves, through cvxpy
        return Solve(values=np.full(program.size, garbage), optimal=True)

    monkeypatch.setattr(cvx, "solve_program", lie)
    result = compile_here()
    # Depending on where the lie lands, the verifier rejects the placement (a bug in fleetc: exit
    # 3) or the optimizer's own checks find no placement; either way the compile stops with a
    # message, not a traceback.
    verifier = "fleetc: internal error: the solver's placement breaks hard constraints:\n"
    assert result.stderr.startswith((verifier, "error: no placement satisfies every hard constraint:\n"))
    assert result.exit_code == (3 if result.stderr.startswith(verifier) else 1), result.output
    if result.exit_code == 3:
        assert "This is a bug in fleetc; please report it" in result.stderr
    assert_untouched(project, result, before)


def test_a_solver_with_an_unknown_status_is_a_clear_error(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inputs_changed(project)
    before = snapshot(project / "out")

    monkeypatch.setattr(highspy.Highs, "run", lambda self: highspy.HighsStatus.kOk)  # never solves
    result = compile_here()
    assert result.exit_code == 3, result.output
    assert result.stderr.startswith(
        "fleetc: internal error: the HIGHS solver failed (through cvxpy)\n"  # cvxpy: no status
        "This is a bug in fleetc")
    assert_untouched(project, result, before)


def test_a_tiny_time_limit_gives_a_verified_placement_or_a_clear_error(project: Path) -> None:
    before = snapshot(project / "out")
    result = compile_here("--time-limit", "0.000001")
    assert result.exception is None or isinstance(result.exception, SystemExit)
    if result.exit_code == 0:  # HiGHS found a placement before looking at the clock
        assert re.fullmatch(r"placed 7 stages \((optimal|proven within \d+\.\d\d% of the LP bound)\); wrote \d+ files "
                            r"to out/\n", result.stdout), result.stdout
        compiled = compile_policies(load_policies(["policies"]), Options(time_limit=0.000001))
        assert verify(compiled.model, compiled.placement) == []
        assert compiled.placement.gap >= 0
    else:
        assert result.exit_code == 1, result.output
        assert result.stderr == ("error: the time limit of 1e-06s ran out before every stage was placed:\n"
                                 "  no placement found yet\n"
                                 "  hint: raise --time-limit\n")
        assert_untouched(project, result, before)


@pytest.mark.slow
def test_a_real_process_reports_hostile_input_without_a_traceback(project: Path) -> None:
    """The same refusals from ``python -m fleetc``: exit status 1, messages only, out/ intact."""
    before = snapshot(project / "out")
    for case in ("alias-bomb", "nul-byte", "oversized-file", "symlink-outside", "credential"):
        CASES[case][0](project / "policies")
    result = subprocess.run([sys.executable, "-m", "fleetc", "compile", "policies", "--out", "out"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    for case in ("alias-bomb", "nul-byte", "oversized-file", "symlink-outside", "credential"):
        assert CASES[case][1].splitlines()[0] in result.stderr.splitlines()
    assert result.stderr.endswith("5 errors in 5 files\n")
    assert snapshot(project / "out") == before
