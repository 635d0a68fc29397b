"""Attacks on what is applied beyond what is reviewed (issue 27, the output side): each case
plants something in a compiled output folder, as a pull request could, and holds fleetc to the
promise it names (``PROMISE``): what is reviewed is exactly what is applied.

Promises:

* ``covered``: every file under the folders the engines read is rendered by fleetc byte for byte,
  or in the user's folder ``out/local/``, which ``--check`` lists and ``diff`` shows whole;
  anything else fails ``compile --check`` (and ``--check --base``) naming it, and ``diff`` calls
  it a difference.
* ``no-links``: ``--check`` never follows a symlink in ``out/``: one is an exit-1 finding.
* ``bookkeeping``: fleetc's records (``.fleetc/files``, ``.fleetc/render``) cannot change what is
  applied or deleted.
* ``recoverable``: a compile killed at any instant leaves an output the next compile restores.

Every case runs the real program in a subprocess (no traceback, never exit 3).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
EVIL = ("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: evil\n"
        "roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\n"
        "subjects:\n  - kind: ServiceAccount\n    name: default\n    namespace: default\n")
CLUSTER = "gpu-cluster-huawei"


def fleetc(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    environment.pop("FLEETC_DEBUG", None)
    result = subprocess.run([sys.executable, "-m", "fleetc", *args], cwd=cwd, env=environment,
                            capture_output=True, text=True, timeout=300)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    return result


def git(cwd: Path, *args: str) -> None:
    subprocess.run([*GIT, "-C", str(cwd), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository whose one commit (``main``) holds the bundled policies and their compile."""
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    git(tmp_path, "init", "-q", "-b", "main")
    assert fleetc(tmp_path, "compile").returncode == 0
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "base")
    return tmp_path


def findings(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if not line.startswith(("warning: ", "  "))]


def assert_caught(repo: Path, path: str, line: str) -> None:
    """``--check`` and ``--check --base`` fail naming ``path``; ``diff`` calls it a difference."""
    for base in ((), ("--base", "main")):
        result = fleetc(repo, "compile", "--check", *base)
        assert result.returncode == 1, result.stderr
        assert line in findings(result), result.stderr
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the attack")
    diff = fleetc(repo, "diff", "--base", "main~1", "--format", "markdown", "--exit-code")
    assert diff.returncode == 1, diff.stdout
    assert "No differences" not in diff.stdout
    assert f"`out/{path}`" in diff.stdout


UNRENDERED = "out/{path}: not rendered by fleetc, so never reviewed as fleetc's output: delete it, or keep " \
             "your own objects in local/<cluster>/ ({reader})"
CLUSTERS = "synced by Argo CD (clusters/<cluster>/) and by Flux (its infra/ and workloads/)"


@pytest.mark.parametrize("path", [
    "clusters/in-cluster/kustomization.yaml",  # a folder no Fleet cluster has (PROMISE: covered)
    f"clusters/{CLUSTER}/workloads/clusterrolebinding-evil.yaml",  # not in its kustomization.yaml
    f"clusters/{CLUSTER}/kustomization.yml",  # a second kustomization beside fleetc's
    f"clusters/{CLUSTER}/infra/Kustomization",
])
@pytest.mark.slow
def test_a_file_fleetc_does_not_render_fails_check_and_shows_in_the_diff(repo: Path, path: str) -> None:
    """PROMISE: covered."""
    (repo / "out" / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / "out" / path).write_text(EVIL)
    assert_caught(repo, path, UNRENDERED.format(path=path, reader=CLUSTERS))


@pytest.mark.slow
def test_a_plain_compile_keeps_a_file_it_does_not_render_and_says_so(repo: Path) -> None:
    """PROMISE: covered: a compile never deletes what is not fleetc's, and never keeps it silently."""
    path = repo / "out" / "clusters" / "in-cluster" / "kustomization.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(EVIL)
    result = fleetc(repo, "compile")
    assert result.returncode == 0, result.stderr
    warning = ("warning: out/clusters/in-cluster/kustomization.yaml: not rendered by fleetc, kept as it is: compile "
               "--check fails on it (delete it, or keep your own objects in local/<cluster>/)")
    assert warning in result.stderr.splitlines()
    assert path.read_text() == EVIL


@pytest.mark.slow
def test_a_symlink_to_a_device_file_is_a_finding_not_an_internal_error(repo: Path) -> None:
    """PROMISE: no-links (a link to /proc/self/pagemap gave exit 3)."""
    link = repo / "out" / "clusters" / CLUSTER / "workloads" / "kustomization.yaml"
    link.unlink()
    link.symlink_to("/proc/self/pagemap")
    result = fleetc(repo, "compile", "--check")
    assert result.returncode == 1
    assert (f"out/clusters/{CLUSTER}/workloads/kustomization.yaml: a symlink or other special file: fleetc "
            "writes regular files only; delete it") in findings(result)


@pytest.mark.slow
def test_a_symlink_anywhere_in_out_fails_check(repo: Path) -> None:
    """PROMISE: no-links, also in the user's folder (kustomize would read through it)."""
    (repo / "out" / "local" / CLUSTER / "stolen.yaml").symlink_to(repo / "policies" / "fleet.yaml")
    result = fleetc(repo, "compile", "--check")
    assert result.returncode == 1
    assert any(line.startswith(f"out/local/{CLUSTER}/stolen.yaml: a symlink") for line in findings(result))


@pytest.mark.slow
def test_the_users_files_are_listed_by_check_and_shown_whole_in_the_diff(repo: Path) -> None:
    """PROMISE: covered: out/local/ is applied with its cluster, so CI logs and the report show it."""
    local = repo / "out" / "local" / CLUSTER
    (local / "kustomization.yaml").write_text("resources:\n  - binding.yaml\n")
    (local / "binding.yaml").write_text(EVIL)
    result = fleetc(repo, "compile", "--check")
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("user-owned")] == [
        f"user-owned (applied with its cluster, not checked): out/local/{CLUSTER}/binding.yaml",
        f"user-owned (applied with its cluster, not checked): out/local/{CLUSTER}/kustomization.yaml"]
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "my own objects")
    diff = fleetc(repo, "diff", "--base", "main~1", "--format", "markdown", "--exit-code")
    assert diff.returncode == 1
    assert "No differences" not in diff.stdout
    assert "+  name: cluster-admin\n" in diff.stdout  # the whole file, never cut
    assert f"`out/local/{CLUSTER}/binding.yaml` (added)" in diff.stdout


@pytest.mark.slow
def test_a_record_naming_the_users_kustomization_never_resets_it(repo: Path) -> None:
    """PROMISE: bookkeeping: one line added to .fleetc/files passed CI, then the next compile
    reset the user's kustomization and the engines pruned the user's objects."""
    mine = "resources:\n  - sealed-secret.yaml\n"
    kustomization = repo / "out" / "local" / CLUSTER / "kustomization.yaml"
    kustomization.write_text(mine)
    record = repo / "out" / ".fleetc" / "files"
    record.write_text(record.read_text() + f"local/{CLUSTER}/kustomization.yaml\n")
    check = fleetc(repo, "compile", "--check")
    assert check.returncode == 1
    assert "would change out/.fleetc/files" in findings(check)
    result = fleetc(repo, "compile")
    assert result.returncode == 1
    assert (f"names out/local/{CLUSTER}/kustomization.yaml, which fleetc does not write") in result.stderr
    assert kustomization.read_text() == mine


def test_a_planted_record_never_makes_fleetc_delete_what_it_lists(tmp_path: Path) -> None:
    """PROMISE: bookkeeping: a folder that is not fleetc's output, with a .fleetc/files planted."""
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    docs = tmp_path / "docs"
    (docs / ".fleetc").mkdir(parents=True)
    (docs / "thesis.tex").write_text("years of work\n")
    (docs / ".fleetc" / "files").write_text("thesis.tex\n")
    result = fleetc(tmp_path, "compile", "--out", "docs")
    assert result.returncode == 1
    assert "docs/thesis.tex, which fleetc does not write" in result.stderr
    assert (docs / "thesis.tex").read_text() == "years of work\n"


def test_gitattributes_never_collapses_the_users_folder(tmp_path: Path) -> None:
    """PROMISE: covered: out/local/ is the user's, reviewed like any source file."""
    shutil.copy(ROOT / ".gitattributes", tmp_path / ".gitattributes")
    git(tmp_path, "init", "-q")
    attributes = subprocess.run(["git", "-C", str(tmp_path), "check-attr", "linguist-generated", "--",
                                 f"out/local/{CLUSTER}/kustomization.yaml", "out/placement.yaml"],
                                capture_output=True, text=True, check=True).stdout
    assert attributes == (f"out/local/{CLUSTER}/kustomization.yaml: linguist-generated: unset\n"
                          "out/placement.yaml: linguist-generated: true\n")


@pytest.mark.slow
def test_a_gitops_path_the_compile_never_covers_is_refused(repo: Path) -> None:
    """PROMISE: covered: spec.gitops.path pointing the engines at a folder --check never reads."""
    fleet = repo / "policies" / "fleet.yaml"
    fleet.write_text(fleet.read_text().replace("\nspec:\n", "\nspec:\n  gitops:\n    path: deploy\n", 1))
    for args in (("compile",), ("compile", "--check"), ("compile", "--check", "--base", "main")):
        result = fleetc(repo, *args)
        assert result.returncode == 1
        assert findings(result)[0] == ("policies/fleet.yaml:11:5: error: spec.gitops.path: the engines would read "
                                       "deploy/ of the repository, but this compile writes and checks out/")


KILLED_MID_SWAP = """\
import os, signal, sys
from fleetc import emit
from fleetc.cli import cli

emit._exchange = lambda a, b: False  # the fallback swap: two renames
renames = []
real_rename = os.rename

def rename(a, b):
    real_rename(a, b)
    renames.append(b)
    if str(b).endswith("/tree"):  # out/ moved aside, the new tree not yet in its place
        os.kill(os.getpid(), signal.SIGKILL)

os.rename = rename
cli(["compile"])
"""


@pytest.mark.slow
def test_a_compile_killed_between_the_swaps_renames_is_restored_explicitly(repo: Path) -> None:
    """PROMISE: recoverable: the next compile puts the previous out/ back before reading it
    (its placement, the user's files), and --check names the backup instead of calling every
    file missing."""
    mine = "resources:\n  - sealed-secret.yaml\n"
    (repo / "out" / "local" / CLUSTER / "kustomization.yaml").write_text(mine)
    script = repo.parent / "kill.py"
    script.write_text(KILLED_MID_SWAP)
    killed = subprocess.run([sys.executable, str(script)], cwd=repo, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert killed.returncode == -9, killed.stderr
    assert not (repo / "out").exists()
    check = fleetc(repo, "compile", "--check")
    assert check.returncode == 1
    [line] = [line for line in findings(check) if "killed" in line]
    assert line.startswith("out/../.out.fleetc-old-") and line.endswith(
        "/tree: a compile was killed while swapping the output in; the previous output is here: run fleetc "
        "compile to put it back")
    result = fleetc(repo, "compile")
    assert result.returncode == 0, result.stderr
    assert ("warning: out/ was missing (a compile was killed while swapping it in): its previous tree was put "
            "back") in result.stderr.splitlines()
    assert (repo / "out" / "local" / CLUSTER / "kustomization.yaml").read_text() == mine
    assert fleetc(repo, "compile", "--check").returncode == 0
    assert sorted(p.name for p in repo.iterdir()) == [".git", "out", "policies"]
