"""Issue 15's attacks on the command line, each with the exact message and exit code.

The other hardening tests (tests/test_hardening.py) break one policy value at a time; these
attack what is around the policies: the files and folders they are read from, the output folder,
the previous placement, the environment and the terminal. Every case runs the real program in a
subprocess, so what a user sees is what is asserted: no traceback, exit 1 or 2, never 3.

Permissions: the suite runs as root here, where a mode of 000 stops nothing. Cases that need one
to hold run fleetc with the capabilities that bypass file permissions dropped from its bounding
set (``setpriv``), so root is refused as any user would be.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML
from support.output import copy_output

from fleetc.policy.load import format_field

ROOT = Path(__file__).resolve().parents[1]
def yaml_load(text: str) -> Any:
    return YAML(typ="safe", pure=True).load(text)


#: Drops the capabilities that let root read, write and list whatever the file modes say.
DROP_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]


def fleetc(cwd: Path, *args: str, env: dict[str, str] | None = None, dropped: bool = False,
           timeout: float = 120, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """``python -m fleetc ARGS`` in ``cwd``; with ``dropped``, unable to bypass file modes."""
    command = [sys.executable, "-m", "fleetc", *args]
    if dropped and os.geteuid() == 0:
        command = DROP_DAC + command
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    environment.pop("FLEETC_DEBUG", None)
    if "stdout" not in kwargs and "stderr" not in kwargs:
        kwargs["capture_output"] = True
    result = subprocess.run(command, cwd=cwd, env=environment, text=True, timeout=timeout,
                            **kwargs)  # type: ignore[call-overload]
    assert "Traceback" not in (result.stderr or ""), result.stderr
    assert "internal error" not in (result.stderr or ""), result.stderr
    return result


def needs_dropped_capabilities() -> None:
    """Skip (fail under CI=true) where root's permission bypass cannot be dropped."""
    if os.geteuid() != 0:
        return
    if shutil.which("setpriv") is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("setpriv (util-linux) is needed to run permission tests as root")
        pytest.skip("running as root without setpriv: file modes cannot be made to apply")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A working folder holding a copy of the bundled policies."""
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    return tmp_path


# --- 1. nothing under a policy root is dropped silently -----------------------------------------


@pytest.mark.slow
def test_an_unreadable_policy_folder_is_an_error(project: Path) -> None:
    needs_dropped_capabilities()
    hidden = project / "policies" / "team-b"
    hidden.mkdir()
    shutil.move(project / "policies" / "customer-service-pipeline.yaml", hidden)
    hidden.chmod(0)
    try:
        for command in ("validate", "compile"):
            result = fleetc(project, command, dropped=True)
            assert (result.returncode, result.stdout) == (1, ""), command
            assert result.stderr == (
                "policies/team-b: error: cannot read folder: Permission denied\n"
                "  hint: let fleetc read it, or move it out of the policy folder\n"
                "1 error in 1 file\n")
        assert not (project / "out").exists()
    finally:
        hidden.chmod(0o755)


@pytest.mark.slow
def test_an_unreadable_policy_file_is_an_error(project: Path) -> None:
    needs_dropped_capabilities()
    (project / "policies" / "fleet.yaml").chmod(0)
    result = fleetc(project, "validate", dropped=True)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == ("policies/fleet.yaml: error: cannot read file: Permission denied\n"
                             "1 error in 1 file\n")


def test_a_linked_folder_outside_the_policy_root_is_an_error(project: Path) -> None:
    elsewhere = project / "elsewhere"
    elsewhere.mkdir()
    shutil.move(project / "policies" / "customer-service-pipeline.yaml", elsewhere)
    (project / "policies" / "team-b").symlink_to(elsewhere)
    result = fleetc(project, "validate")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == ("policies/team-b: error: symbolic link points outside the policy folders\n"
                             "  hint: copy the file into the policy folder instead\n"
                             "1 error in 1 file\n")


@pytest.mark.slow
def test_a_symlink_loop_is_an_error(project: Path) -> None:
    (project / "policies" / "loop").symlink_to("loop")
    result = fleetc(project, "validate")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == ("policies/loop: error: symbolic link loop\n"
                             "  hint: remove the link, or point it at a policy file or folder\n"
                             "1 error in 1 file\n")
    result = fleetc(project, "validate", "policies/loop")
    assert (result.returncode, result.stderr) == (2, "error: policies/loop: symbolic link loop\n")


# --- 8. no hangs, no unbounded reads ------------------------------------------------------------


@pytest.mark.slow
def test_a_fifo_among_the_policies_is_an_error_not_a_hang(project: Path) -> None:
    os.mkfifo(project / "policies" / "pipe.yaml")
    result = fleetc(project, "compile", timeout=60)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == ("policies/pipe.yaml: error: not a regular file (a FIFO); fleetc never opens one\n"
                             "  hint: policies are regular files; remove it\n"
                             "1 error in 1 file\n")
    assert not (project / "out").exists()


def test_validate_dev_zero_fails_fast(project: Path) -> None:
    result = fleetc(project, "validate", "/dev/zero", timeout=60)  # it never reads: no hang
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == ("/dev/zero: error: not a regular file (a character device); fleetc never opens one\n"
                             "  hint: policies are regular files; remove it\n"
                             "1 error in 1 file\n")


# --- 2. fleetc writes only into a folder that is empty, absent or its own ------------------------


def tree_state(folder: Path) -> dict[str, tuple[int, int, int, bytes]]:
    """Every entry under ``folder`` (itself included): mode, owner, link count and bytes."""
    entries = {}
    for path in [folder, *sorted(folder.rglob("*"))]:
        info = path.lstat()
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        entries[path.relative_to(folder).as_posix()] = (info.st_mode, info.st_uid, info.st_nlink, data)
    return entries


REFUSED_FOREIGN = ("error: {out}: refusing to write into a folder fleetc did not make (it is not empty "
                   "and has no .fleetc/files); nothing was written\n"
                   "  hint: name a new or empty folder, or move this folder's files away\n")


def test_a_folder_fleetc_did_not_make_is_refused_untouched(project: Path) -> None:
    home = project / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh").chmod(0o700)
    (home / ".ssh" / "id_ed25519").write_text("key\n")
    (home / "notes").mkdir()
    (home / "notes" / "a.txt").write_text("mine\n")
    os.link(home / "notes" / "a.txt", home / "hardlink.txt")
    before = tree_state(home)
    for args in (["compile", "--out", "home"], ["compile", "--out", "home", "--commit"]):
        result = fleetc(project, *args)
        assert (result.returncode, result.stdout) == (2, "")
        assert result.stderr == REFUSED_FOREIGN.format(out="home")
    assert tree_state(home) == before
    assert sorted(p.name for p in project.iterdir()) == ["home", "policies"]


@pytest.mark.parametrize(("out", "message"), [
    ("/", "error: /: refusing to write the output to the root folder\n"
          "  hint: name a folder of its own, such as out/\n"),
    ("policies", "error: policies: refusing to write the output there: it is the policies (policies)\n"),
    ("policies/out", "error: policies/out: refusing to write the output there: it lies inside the "
                     "policies (policies)\n"),
    (".", "error: .: refusing to write the output there: it holds the policies (policies)\n"),
])
def test_the_root_and_the_policy_folders_are_refused(project: Path, out: str, message: str) -> None:
    before = tree_state(project)
    result = fleetc(project, "compile", "--out", out)
    assert (result.returncode, result.stdout) == (2, "")
    if out != "/":
        message += "  hint: keep the output folder and the policies apart, such as out/ beside policies/\n"
    assert result.stderr == message
    assert tree_state(project) == before


@pytest.mark.slow
def test_an_empty_folder_is_written_and_then_fleetcs_own(project: Path) -> None:
    (project / "out").mkdir()
    assert fleetc(project, "compile").returncode == 0
    (project / "out" / "NOTES.md").write_text("a file of mine beside fleetc's\n")
    assert fleetc(project, "compile").returncode == 0  # its record says fleetc made it
    assert (project / "out" / "NOTES.md").read_text() == "a file of mine beside fleetc's\n"


@pytest.mark.slow
def test_only_fleetcs_own_temporary_entries_beside_out_are_cleaned_up(project: Path) -> None:
    assert fleetc(project, "compile").returncode == 0
    (project / ".out.fleetc-notes").mkdir()
    (project / ".out.fleetc-notes" / "todo.txt").write_text("keep me\n")
    killed = project / ".out.fleetc-new-k1ll3d00"  # what a compile killed while staging leaves
    (killed / "clusters").mkdir(parents=True)
    assert fleetc(project, "compile").returncode == 0
    assert sorted(p.name for p in project.iterdir()) == [".out.fleetc-notes", "out", "policies"]
    assert (project / ".out.fleetc-notes" / "todo.txt").read_text() == "keep me\n"


@pytest.mark.slow
def test_a_symlinked_output_folder_is_written_through(project: Path) -> None:
    (project / "real-out").mkdir()
    (project / "out").symlink_to("real-out")
    for _ in range(2):
        result = fleetc(project, "compile")
        assert result.returncode == 0, result.stderr
        assert (project / "out").is_symlink() and os.readlink(project / "out") == "real-out"
    assert (project / "real-out" / "placement.yaml").is_file()
    assert sorted(p.name for p in project.iterdir()) == ["out", "policies", "real-out"]
    assert fleetc(project, "compile", "--check").returncode == 0


def test_an_output_path_too_long_for_the_system_is_a_usage_error(project: Path) -> None:
    out = "x" * 300
    result = fleetc(project, "compile", "--out", out)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"error: {out}: cannot be the output folder: File name too long\n"


# --- 9. deep dependency graphs: no recursion limit ----------------------------------------------


def chain_pipeline(name: str, length: int, *, cycle: bool = False) -> str:
    """A pipeline whose stage i waits for stage i+1 (written in reverse order of running), the
    last stage waiting for the first when ``cycle``."""
    stages = []
    for i in range(length):
        after = (i + 1) % length if cycle else i + 1
        needs = f", dependencies: [{name}{after}]" if cycle or after < length else ""
        stages.append(f"  - {{name: {name}{i}, type: DataProc, resources: {{cpu: 100m, memory: 64Mi}}{needs}}}\n")
    return (f"apiVersion: aigc.kurator.dev/v1alpha1\nkind: AIGCPipeline\nmetadata: {{name: {name}, "
            f"namespace: {name}}}\nspec:\n  stages:\n" + "".join(stages))


@pytest.mark.slow
def test_a_long_chain_written_in_reverse_order_compiles(project: Path) -> None:
    (project / "policies" / "chain.yaml").write_text(chain_pipeline("s", 1200))
    result = fleetc(project, "compile")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("placed 1207 stages")


@pytest.mark.slow
def test_a_long_cycle_is_a_policy_error(project: Path) -> None:
    (project / "policies" / "cycle.yaml").write_text(chain_pipeline("c", 1500, cycle=True))
    result = fleetc(project, "validate")
    assert (result.returncode, result.stdout) == (1, "")
    names = " -> ".join(f"c{i}" for i in [*range(1500), 0])
    assert result.stderr == (f"policies/cycle.yaml:6:84: error: spec.stages[0].dependencies: "
                             f"dependency cycle: {names}\n1 error in 1 file\n")


@pytest.mark.slow
@pytest.mark.parametrize("reads", ["dependencies", "from"])
def test_chains_of_20000_stages_validate_and_resolve(reads: str) -> None:
    """Validation (the cycle search) and resolve (data sovereignty through ``from:``) walk the
    graph on explicit stacks: Python's recursion limit (1,000 frames) never applies."""
    from fleetc.compiler import load_policy_sources
    from fleetc.resolve import resolve

    length = 20_000 if reads == "dependencies" else 15_000  # 15,000 ``from:`` stages fill MAX_NODES
    if reads == "dependencies":
        text = chain_pipeline("s", length)
    else:
        text = chain_pipeline("s", 0) + "".join(
            f"  - {{name: s{i}, type: DataProc, inputs: [{{name: i, from: s{i + 1}.outputs.o}}], "
            f"outputs: [{{name: o, storage: 's3://b/o/'}}]}}\n" for i in range(length - 1)) + (
            f"  - {{name: s{length - 1}, type: DataProc, inputs: [{{name: i, source: "
            f"'s3://b/raw/', location: eu-west-1}}], outputs: [{{name: o, storage: 's3://b/o/'}}]}}\n")
    platform = ("apiVersion: aigc.kurator.dev/v1alpha1\nkind: AIGCPlatform\nmetadata: {name: p}\n"
                "spec: {security: {dataSovereignty: true}}\n")
    sources = [("fleet.yaml", (ROOT / "policies" / "fleet.yaml").read_bytes()),
               ("chain.yaml", text.encode()), ("platform.yaml", platform.encode())]
    loaded = load_policy_sources(sources, "chain")
    model = resolve(loaded.policies, loaded.where)
    assert len(model.stages) == length


# --- 5. reserved namespaces ----------------------------------------------------------------------

RESERVED = ("is reserved for Kubernetes and the controllers fleetc's output runs on; fleetc would "
            "label it as its own and may deny its egress\n"
            "  hint: give the pipeline a namespace of its own in metadata.namespace\n1 error in 1 file\n")


@pytest.mark.first_row_fast
@pytest.mark.parametrize("namespace", ["kube-system", "kube-public", "default", "argocd", "flux-system",
                                       "gpu-operator", "volcano-system", "fluid-system"])
def test_a_reserved_namespace_is_refused(project: Path, namespace: str) -> None:
    policy = project / "policies" / "llm-training-pipeline.yaml"
    line = policy.read_text().splitlines().index("  namespace: aigc-prod") + 1
    policy.write_text(policy.read_text().replace("namespace: aigc-prod", f"namespace: {namespace}"))
    result = fleetc(project, "compile")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (f"policies/llm-training-pipeline.yaml:{line}:14: error: metadata.namespace: "
                             f"namespace '{namespace}' {RESERVED}")
    assert not (project / "out").exists()


@pytest.mark.slow
def test_a_pipeline_without_a_namespace_runs_in_one_named_after_it(project: Path) -> None:
    policy = project / "policies" / "llm-training-pipeline.yaml"
    policy.write_text(policy.read_text().replace("  namespace: aigc-prod\n", ""))
    assert fleetc(project, "compile").returncode == 0
    assert sorted(p.name for p in (project / "out" / "clusters").rglob("namespace-llm-chinese-training.yaml"))
    policy.write_text(policy.read_text().replace("name: llm-chinese-training", "name: kube-train"))
    line = policy.read_text().splitlines().index("  name: kube-train") + 1
    result = fleetc(project, "validate")
    assert result.stderr == (f"policies/llm-training-pipeline.yaml:{line}:9: error: metadata.name: namespace "
                             f"'kube-train' (the pipeline's name, as metadata.namespace is not set) {RESERVED}")


# --- 6. names match in full: a trailing newline is no name ---------------------------------------


def string_leaves(data: object, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    if isinstance(data, dict):
        return [leaf for key, value in data.items() for leaf in string_leaves(value, (*path, key))]
    if isinstance(data, list):
        return [leaf for i, value in enumerate(data) for leaf in string_leaves(value, (*path, i))]
    return [path] if isinstance(data, str) else []


#: Every name-like field the bundled policies leave out, so that the test reaches them too.
EXTRA_FIELDS = """\
apiVersion: fleet.kurator.dev/v1alpha1
kind: Fleet
metadata: {name: extra, namespace: fleets}
spec:
  clusters:
  - name: c1
    provider: huawei
    region: cn-north-1
    jurisdiction: cn
    attributes: {gpu-type: a100, gpu-count: "8"}
    taints: [{key: example.com/dedicated, value: ml, effect: NoSchedule}]
  placement:
    clusterTolerations: [{key: example.com/dedicated, operator: Equal, value: ml}]
  gitops: {repoURL: "https://git.example.com/fleet.git", branch: main, path: deploy/out}
"""


def test_a_trailing_newline_is_refused_in_every_name_like_field() -> None:
    from fleetc.policy.load import Document, load_paths, parse
    from fleetc.policy.validate import validate

    bundled = list(load_paths([str(ROOT / "policies")]).documents)
    extra, problems = parse(EXTRA_FIELDS, "extra.yaml")
    assert not problems and not validate(extra)[1]
    tried = []
    for documents in (bundled, extra):
        for index, doc in enumerate(documents):
            for path in string_leaves(doc.data):
                if "command" in path or path[:2] == ("metadata", "annotations") or path[-1] == "gpu-count":
                    continue  # free text; and a count, read as an integer (blanks around it allowed)
                data = json.loads(json.dumps(doc.data))
                holder = data
                for part in path[:-1]:
                    holder = holder[part]
                holder[path[-1]] += "\n"
                changed = [Document(d.path, d.index, data, d.values, d.keys) if i == index else d
                           for i, d in enumerate(documents)]
                fields = {d.field for d in validate(changed)[1]}
                assert any(field.startswith(format_field(path)) for field in fields), (doc.path, path, fields)
                tried.append(path)
    assert len(tried) > 100
    assert ("spec", "gitops", "branch") in tried and ("spec", "clusters", 0, "taints", 0, "key") in tried
    assert ("spec", "stages", 0, "image") in tried


@pytest.mark.slow
def test_a_cluster_name_with_a_newline_never_reaches_out(project: Path) -> None:
    fleet = project / "policies" / "fleet.yaml"
    fleet.write_text(fleet.read_text().replace("- name: edge-cluster-factory", '- name: "edge-cluster-factory\\n"'))
    result = fleetc(project, "compile")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.startswith(
        "policies/fleet.yaml:35:11: error: spec.clusters[2].name: expected a DNS-1123 label (lower-case "
        "letters, digits and '-', starting and ending with a letter or digit, at most 63 characters), "
        "got 'edge-cluster-factory\\n'\n")
    assert not (project / "out").exists()


# --- 11. values that reach templated or path fields; YAML tags; --time-limit -------------------


@pytest.mark.first_row_fast
@pytest.mark.parametrize(("field", "value", "message"), [
    ("branch", "'{{ .values.branch }}'",
     "spec.gitops.branch: expected a git branch name, got '{{ .values.branch }}'\n"
     "  hint: a name git accepts (git check-ref-format --branch), such as main or release/2024-06; no "
     "spaces, '..', '~^:?*[\\' or template braces\n"),
    ("branch", "main..dev", "spec.gitops.branch: expected a git branch name, got 'main..dev'\n"
     "  hint: a name git accepts (git check-ref-format --branch), such as main or release/2024-06; no "
     "spaces, '..', '~^:?*[\\' or template braces\n"),
    ("path", "../../../other-team",
     "spec.gitops.path: expected a relative folder inside the repository, got '../../../other-team'\n"
     "  hint: a path such as out or deploy/fleet: no leading '/', no '..', no glob or template characters\n"),
    ("path", "/etc", "spec.gitops.path: expected a relative folder inside the repository, got '/etc'\n"
     "  hint: a path such as out or deploy/fleet: no leading '/', no '..', no glob or template characters\n"),
    ("repoURL", "'https://git.example.com/{{.name}}.git'",
     "spec.gitops.repoURL: expected a git repository URL, got 'https://git.example.com/{{.name}}.git'\n"
     "  hint: no spaces, control characters or template braces\n"),
])
def test_gitops_values_are_what_their_fields_accept(project: Path, field: str, value: str, message: str) -> None:
    fleet = project / "policies" / "fleet.yaml"
    text = fleet.read_text()
    assert "spec:\n" in text and "gitops" not in text
    fleet.write_text(text.replace("spec:\n", f"spec:\n  gitops:\n    {field}: {value}\n", 1))
    result = fleetc(project, "compile")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == f"policies/fleet.yaml:11:{7 + len(field)}: error: {message}1 error in 1 file\n"
    assert not (project / "out").exists()


@pytest.mark.first_row_fast
@pytest.mark.parametrize("tag", ["!!python/object/apply:os.system", "!!set", "!custom", "!!map"])
def test_a_tag_on_a_mapping_is_refused(project: Path, tag: str) -> None:
    policy = project / "policies" / "gpu-optimization.yaml"
    text = policy.read_text()
    line = text.splitlines().index("spec:") + 1
    policy.write_text(text.replace("spec:\n", f"spec: {tag}\n", 1))
    result = fleetc(project, "validate")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (f"policies/gpu-optimization.yaml:{line}:7: error: spec: YAML tag '{tag}' is not "
                             "allowed: policies are plain YAML\n  hint: remove the tag; quote a value to make it "
                             "text\n1 error in 1 file\n")


@pytest.mark.parametrize(("limit", "why"), [
    ("nan", "'nan' is not a finite number of seconds."), ("NaN", "'NaN' is not a finite number of seconds."),
    ("inf", "'inf' is not a finite number of seconds."), ("-inf", "-inf is not in the range x>0."),
])
def test_a_time_limit_that_is_not_a_finite_number_is_a_usage_error(project: Path, limit: str, why: str) -> None:
    result = fleetc(project, "compile", "--time-limit", limit)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.endswith(f"Error: Invalid value for '--time-limit': {why}\n")


# --- 12. object and file name collisions ---------------------------------------------------------


@pytest.mark.slow
def test_two_stages_that_would_share_a_name_are_reported_at_both(project: Path) -> None:
    (project / "policies" / "b.yaml").write_text(
        "apiVersion: aigc.kurator.dev/v1alpha1\nkind: AIGCPipeline\nmetadata: {name: b, namespace: team}\n"
        "spec:\n  stages:\n  - {name: c-d, type: DataProc}\n")
    (project / "policies" / "b-c.yaml").write_text(
        "apiVersion: aigc.kurator.dev/v1alpha1\nkind: AIGCPipeline\nmetadata: {name: b-c, namespace: team}\n"
        "spec:\n  stages:\n  - {name: d, type: DataProc}\n")
    result = fleetc(project, "compile")
    assert (result.returncode, result.stdout) == (1, "")
    hint = "  hint: rename one of the stages or pipelines, or give the pipelines different namespaces\n"
    assert result.stderr == (
        "policies/b-c.yaml:6:12: error: spec.stages[0].name: pipeline 'b-c' stage 'd' and pipeline 'b' "
        f"stage 'c-d' (policies/b.yaml:6) would both be named 'b-c-d' in namespace 'team'\n{hint}"
        "policies/b.yaml:6:12: error: spec.stages[0].name: pipeline 'b' stage 'c-d' and pipeline 'b-c' "
        f"stage 'd' (policies/b-c.yaml:6) would both be named 'b-c-d' in namespace 'team'\n{hint}"
        "2 errors in 2 files\n")


# --- 9 and 10. user input is never an internal error, and no traceback reaches the terminal ------


@pytest.fixture
def compiled(project: Path) -> Path:
    """The project after a good compile: out/ holds fleetc's placement.yaml. A copy of the
    committed out/, which tests/test_bundled.py holds to be what a compile writes."""
    copy_output(ROOT / "out", project / "out")  # as fleetc wrote it there
    assert fleetc(project, "compile", "--check").returncode == 0
    return project


@pytest.mark.parametrize(("breakage", "problem"), [
    (lambda text: text + "deep: " + "[" * 2000 + "]" * 2000 + "\n", "nested too deeply to be a placement report"),
    (lambda text: text.replace("    clusters:\n      - name:", "    clusters: 5\n    ignored:\n      - name:", 1),
     "stages[0].clusters is not a list"),
    (lambda text: re.sub(r"score: [0-9.]+", "score: " + "9" * 400, text, count=1),
     "a number too large to be one fleetc wrote (99999999999999999999...)"),
])
@pytest.mark.slow
def test_a_malformed_previous_placement_is_ignored_with_a_warning(compiled: Path, breakage, problem: str) -> None:
    report = compiled / "out" / "placement.yaml"
    report.write_text(breakage(report.read_text()))
    for command in (["compile", "--check"], ["compile"]):
        result = fleetc(compiled, *command)
        assert result.returncode in (0, 1), result.stderr
        assert result.stderr.startswith(f"warning: out/placement.yaml: ignored as the previous placement: "
                                        f"{problem}\n"), result.stderr
    assert fleetc(compiled, "compile", "--check").returncode == 0  # the compile wrote a good one


@pytest.mark.slow
def test_diff_in_a_shallow_clone_is_a_usage_error(tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(ROOT / "policies", source / "policies")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", str(source)], check=True)
    subprocess.run([*git, "-C", str(source), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(source), "commit", "-qm", "one"], check=True)
    subprocess.run([*git, "-C", str(source), "commit", "-q", "--allow-empty", "-m", "two"], check=True)
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{source}", str(tmp_path / "shallow")], check=True)
    result = fleetc(tmp_path / "shallow", "diff", "--base", "HEAD~1")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == ("error: HEAD~1: not in this shallow clone (its history is cut short)\n"
                             "  hint: fetch the history, e.g. git fetch --unshallow, or actions/checkout with "
                             "fetch-depth: 0\n")


@pytest.mark.slow
def test_a_closed_stderr_is_no_internal_error(project: Path) -> None:
    result = fleetc(project, "compile", stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                    preexec_fn=lambda: os.close(2))
    assert result.returncode == 0
    assert result.stdout.startswith("placed 7 stages")
    (project / "policies" / "bad.yaml").write_text("a: [\n")
    result = fleetc(project, "compile", stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                    preexec_fn=lambda: os.close(2))
    assert result.returncode == 1


@pytest.mark.slow
def test_output_that_cannot_be_written_is_an_error(project: Path) -> None:
    with open("/dev/full", "w") as full:
        result = fleetc(project, "compile", "--format", "json", stdout=full, stderr=subprocess.PIPE)
    assert (result.returncode, result.stderr) == (1, "error: cannot write the output: No space left on device\n")


@pytest.mark.slow
def test_a_step_summary_in_a_missing_folder_is_a_warning(project: Path) -> None:
    (project / "policies" / "bad.yaml").write_text("a: [\n")
    summary = project / "missing" / "summary.md"
    result = fleetc(project, "validate", "--format", "github", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.returncode == 1
    assert result.stdout.startswith("::error file=policies/bad.yaml,line=2,col=1,")
    assert result.stderr.startswith(f"warning: cannot write the step summary to {summary} "
                                    "(GITHUB_STEP_SUMMARY): No such file or directory\n")


# --- 3. a placement cannot be steered past review ------------------------------------------------

SERVING_2_4 = ("      - name: gpu-cluster-huawei\n        replicas: 2\n        slots: 2\n        gpus: 2\n"
               "      - name: inference-cluster-aliyun\n        replicas: 4\n        slots: 4\n        gpus: 4\n")
SERVING_3_3 = ("      - name: gpu-cluster-huawei\n        replicas: 3\n        slots: 3\n        gpus: 3\n"
               "      - name: inference-cluster-aliyun\n        replicas: 3\n        slots: 3\n        gpus: 3\n")


@pytest.fixture
def reviewed(project: Path) -> Path:
    """A repository whose base commit holds the policies and their compile; then a change that
    hand-edits out/placement.yaml (keeping its inputs digest) and compiles it into out/, so that
    out/ is consistent with the edited placement."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(project)]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    assert fleetc(project, "compile").returncode == 0
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    report = project / "out" / "placement.yaml"
    assert report.read_text().count(SERVING_2_4) == 1
    report.write_text(report.read_text().replace(SERVING_2_4, SERVING_3_3))
    assert fleetc(project, "compile").returncode == 0  # the edited placement is given back
    subprocess.run([*git, "commit", "-qam", "move serving replicas"], check=True)
    return project


STEERED = ("customer-service-assistant/assistant-serving: out/placement.yaml places it on gpu-cluster-huawei "
           "(3 replicas), inference-cluster-aliyun (3 replicas); compile places it on gpu-cluster-huawei "
           "(2 replicas), inference-cluster-aliyun (4 replicas)\n")


@pytest.mark.slow
def test_check_with_a_base_catches_a_hand_edited_placement(reviewed: Path) -> None:
    trusting = fleetc(reviewed, "compile", "--check")
    assert trusting.returncode == 0  # out/ is what its own placement.yaml gives: the README says why
    result = fleetc(reviewed, "compile", "--check", "--base", "main~1")
    assert (result.returncode, result.stdout) == (1, "")
    lines = [line for line in result.stderr.splitlines(keepends=True) if not line.startswith("warning: ")]
    assert "".join(lines) == (
        "would change out/.fleetc/render\n"  # the record of what the changed cluster folders hold
        "would change out/clusters/gpu-cluster-huawei/workloads/horizontalpodautoscaler-aigc-cs-customer-service-"
        "assistant-assistant-serving.yaml\n"
        "would change out/clusters/gpu-cluster-huawei/workloads/poddisruptionbudget-aigc-cs-customer-service-"
        "assistant-assistant-serving.yaml\n"
        "would change out/clusters/inference-cluster-aliyun/workloads/horizontalpodautoscaler-aigc-cs-customer-"
        "service-assistant-assistant-serving.yaml\n"
        "would change out/clusters/inference-cluster-aliyun/workloads/poddisruptionbudget-aigc-cs-customer-service-"
        "assistant-assistant-serving.yaml\n"
        "would change out/placement.yaml\n" + STEERED + "out/ is stale: 6 files would change\n")
    assert fleetc(reviewed, "compile", "--check", "--base", "main").returncode == 0  # a base that has it


@pytest.mark.slow
def test_the_workflow_check_step_catches_a_hand_edited_placement(reviewed: Path) -> None:
    workflow = (ROOT / ".github" / "workflows" / "fleetc.yml").read_text()
    step = yaml_load(workflow)["jobs"]["test"]["steps"]
    [check] = [s for s in step if s.get("name") == "Check that out/ is current"]
    base = subprocess.run(["git", "-C", str(reviewed), "rev-parse", "main~1"], capture_output=True, text=True,
                          check=True).stdout.strip()
    environment = {**os.environ, "BASE": base, "PYTHONPATH": str(ROOT),
                   "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(["bash", "-e", "-c", check["run"]], cwd=reviewed, env=environment,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert STEERED in result.stderr


def test_base_without_check_is_a_usage_error(project: Path) -> None:
    result = fleetc(project, "compile", "--base", "main")
    assert (result.returncode, result.stderr) == (
        2, "error: --base is for --check: it says where the previous placement comes from\n")


def test_a_large_path_threshold_that_is_no_number_is_a_usage_error(project: Path) -> None:
    result = fleetc(project, "compile", env={"FLEETC_LARGE": "abc"})
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == ("error: FLEETC_LARGE='abc': expected a whole number of stage-cluster pairs "
                             "(0 sends every component down the large path)\n")
