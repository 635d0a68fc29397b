"""fleetc living in git: compile --check, diff against a revision, compile --commit, and the
GitHub annotations of validate, all in real temporary repositories."""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from git import Repo

from fleetc.cli import cli
from fleetc.git.flow import previous_at
from fleetc.git.repo import read_folder

ROOT = Path(__file__).resolve().parents[1]
TRAINING = "policies/llm-training-pipeline.yaml"
MOVED = "llm-chinese-training/model-training"


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def init_repo(folder: Path) -> Repo:
    repo = Repo.init(folder)
    with repo.config_writer() as config:
        config.set_value("user", "name", "Test")
        config.set_value("user", "email", "test@example.com")
        config.set_value("commit", "gpgsign", "false")
    return repo


def commit_all(repo: Repo, message: str) -> str:
    repo.git.add("--all")
    repo.git.commit("--quiet", "--message", message)
    return repo.head.commit.hexsha


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Repo:
    """A repository whose first commit holds the bundled policies; the working folder is its root."""
    repo = init_repo(tmp_path)
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    commit_all(repo, "policies")
    monkeypatch.chdir(tmp_path)
    return repo


def move_training_to_t4(folder: Path) -> None:
    """The Training stage asks for T4s: it has to leave the A100 cluster for the T4 one."""
    path = folder / TRAINING
    text = path.read_text()
    assert text.count("gpuType: a100") == 1
    path.write_text(text.replace("gpuType: a100", "gpuType: t4"))


def state(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file outside .git with its bytes and modification time in nanoseconds."""
    return {p.relative_to(folder).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file() and ".git" not in p.relative_to(folder).parts}


# --------------------------------------------------------------------------- compile --check
def test_check_on_fresh_and_stale_output(repo: Repo) -> None:
    assert run("compile").exit_code == 0
    fresh = run("compile", "--check")
    assert (fresh.exit_code, fresh.stdout) == (0, "out/ is up to date\n")
    move_training_to_t4(Path(repo.working_tree_dir))
    before = state(Path(repo.working_tree_dir))
    stale = run("compile", "--check")
    assert stale.exit_code == 1
    job = r"workloads/job-aigc-prod-llm-chinese-training-model-training-[0-9a-f]{8}\.yaml"
    assert re.search(rf"would remove out/clusters/gpu-cluster-huawei/{job}\n", stale.stderr)
    assert re.search(rf"would add out/clusters/inference-cluster-aliyun/{job}\n", stale.stderr)
    assert state(Path(repo.working_tree_dir)) == before


# --------------------------------------------------------------------------- diff
def test_diff_between_two_commits_where_a_stage_moved(repo: Repo) -> None:
    move_training_to_t4(Path(repo.working_tree_dir))
    commit_all(repo, "train on t4")
    result = run("diff", "--base", "HEAD~1")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("fleetc diff HEAD~1 -> working tree\n\n")
    # +5 -5: the two prefetches of the model there wait for the moved (so changed) training run,
    # and the DataProcess that marks the served one done; +1 -1 the serving stage's releaser, which
    # waits for the new run; -2 the training's Job and its release Job; -1 the training Queue; ~2
    # the serving Deployment (its pods serve the new run) and the namespace's Role (its releaser
    # keeps it, with no gated Job left to read)
    assert "gpu-cluster-huawei: +6 ~2 -9 objects; GPUs 16 a100 -> 8 a100; cost/h " in result.stdout
    assert f"  - {MOVED}\n" in result.stdout and f"  + {MOVED}\n" in result.stdout
    assert "GPUs a100: 16 -> 8 (-8)\nGPUs t4: 7 -> 15 (+8)\n" in result.stdout
    assert re.search(r"\+\+\+ b/out/clusters/inference-cluster-aliyun/workloads/"
                     r"job-aigc-prod-llm-chinese-training-model-training-[0-9a-f]{8}\.yaml\n", result.stdout)
    # provenance annotations name the policy files the same way on both sides: no spurious diffs
    objects = json.loads(run("diff", "--base", "HEAD~1", "--format", "json").stdout)["objects"]
    changed = [o["diff"] for o in objects if o["status"] == "changed"]
    assert changed and not any("fleetc.dev/source" in line for d in changed for line in d.splitlines()
                               if line.startswith(("+", "-")))


def test_diff_exit_code_like_git_diff(repo: Repo) -> None:
    same = run("diff", "--base", "HEAD", "--exit-code")
    assert (same.exit_code, same.stdout) == (0, "no differences between HEAD and working tree\n")
    move_training_to_t4(Path(repo.working_tree_dir))
    assert run("diff", "--base", "HEAD").exit_code == 0
    assert run("diff", "--base", "HEAD", "--exit-code").exit_code == 1


def test_diff_json(repo: Repo) -> None:
    move_training_to_t4(Path(repo.working_tree_dir))
    result = run("diff", "--base", "HEAD", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["changed"] is True
    assert data["stages"] == [{"stage": MOVED, "before": ["gpu-cluster-huawei"], "after": ["inference-cluster-aliyun"]}]
    assert data["gpus"] == {"a100": {"before": 16, "after": 8}, "t4": {"before": 7, "after": 15}}
    clusters = {c["name"]: c for c in data["clusters"]}
    assert clusters["gpu-cluster-huawei"]["stagesOut"] == [MOVED]
    assert clusters["inference-cluster-aliyun"]["stagesIn"] == [MOVED]
    cost = clusters["gpu-cluster-huawei"]["costPerHour"]
    assert cost["after"] < cost["before"]


def test_diff_markdown_structure(repo: Repo) -> None:
    move_training_to_t4(Path(repo.working_tree_dir))
    result = run("diff", "--base", "HEAD", "--format", "markdown")
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert text.startswith("### fleetc: review of `HEAD` → `working tree`\n\n**2 dangers**; 2 stages changed; "
                           "1 stage moved; 2 running Jobs restarted;")
    assert "| cluster | objects + / ~ / − | GPUs before → after | cost/h before → after | stages in | stages out |" \
        in text
    # 6 / 2 / 9: besides the moved Job and its release Job, the two prefetches of the model there
    # wait for the moved (changed) run, and the DataProcess that marks the served one done, and the
    # serving releaser waits for it; the serving Deployment and the release Role change
    assert "| `gpu-cluster-huawei` | 6 / 2 / 9 | 16 a100 → 8 a100 |" in text
    assert ("| `gpu-cluster-huawei` | `░░░░░░░░░░░░░░░░░░░░░░░░ 16`<br>`████████████············  8` | -8 |\n"
            "| `inference-cluster-aliyun` | `░░░░░░░░░░··············  7`<br>`██████████████████████·· 15` | +8 |\n"
            ) in text  # GPUs per cluster as bars of text: before and after told apart
    assert "<details><summary>cluster gpu-cluster-huawei: 19 files changed</summary>" in text
    # the stage table says why the stage moved: the constraint that forced it (fleetc explain's)
    assert ("| `llm-chinese-training/model-training` | placement: `gpu-cluster-huawei x1` → "
            "`inference-cluster-aliyun x1`<br>") in text
    assert ("its policy changed (policies/llm-training-pipeline.yaml\\#spec.stages\\[1\\]); no longer allowed on "
            "gpu-cluster-huawei: no t4 |") in text
    # the serving releasers' diffs (their waits' scripts) take the comment to GitHub's limit: the
    # second cluster's diffs are cut, and the comment names every file left out
    assert text.count("<details>") == text.count("</details>") == 2
    assert "**Cut to fit GitHub's comment limit:**" in text
    assert len(text) <= 65_536


def test_diff_leaves_the_working_tree_untouched(repo: Repo) -> None:
    folder = Path(repo.working_tree_dir)
    assert run("compile").exit_code == 0
    move_training_to_t4(folder)
    status, files = repo.git.status("--porcelain"), state(folder)
    index = (folder / ".git" / "index").read_bytes()
    assert run("diff", "--base", "HEAD").exit_code == 0
    assert (repo.git.status("--porcelain"), state(folder)) == (status, files)
    assert (folder / ".git" / "index").read_bytes() == index


def test_diff_base_without_policies_is_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = init_repo(tmp_path)
    (tmp_path / "README.md").write_text("fleet\n")
    commit_all(repo, "readme")
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    monkeypatch.chdir(tmp_path)
    data = json.loads(run("diff", "--base", "HEAD", "--format", "json").stdout)
    assert data["objects"] and {o["status"] for o in data["objects"]} == {"added"}
    assert {s["stage"] for s in data["stages"]} >= {MOVED} and all(s["before"] == [] for s in data["stages"])


def test_diff_unknown_ref_is_a_usage_error(repo: Repo) -> None:
    result = run("diff", "--base", "no-such-branch")
    assert result.exit_code == 2
    assert result.stderr == "error: no-such-branch: unknown revision (not a branch, tag or commit in this repository)\n"


def test_diff_outside_a_repository_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    result = run("diff", "--base", "main")
    assert result.exit_code == 2
    assert result.stderr == f"error: {tmp_path}: not inside a git repository\n"


def test_diff_names_the_side_whose_policies_are_invalid(repo: Repo) -> None:
    folder = Path(repo.working_tree_dir)
    path = folder / "policies/fleet.yaml"
    path.write_text(path.read_text().replace('gpu-count: "64"', 'gpu-count: "sixty"'))
    commit_all(repo, "broken")
    shutil.copy(ROOT / "policies/fleet.yaml", path)
    result = run("diff", "--base", "HEAD")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: the policies at HEAD do not compile:\npolicies/fleet.yaml:")
    assert "expected an integer, got 'sixty'" in result.stderr
    both = run("diff", "--base", "HEAD~1", "--format", "json")
    assert both.exit_code == 0
    path.write_text(path.read_text().replace('gpu-count: "64"', 'gpu-count: "sixty"'))
    now = run("diff", "--base", "HEAD~1", "--format", "json")
    assert now.exit_code == 1
    assert json.loads(now.stdout)["side"] == "in the working tree"


# --------------------------------------------------------------------------- diff: links and submodules at a revision
def _linked_layout(folder: Path) -> None:
    """The policies in config/policies, named through the link policies; the training pipeline
    only through links into a hidden folder (which the walk itself skips): one to the file, one
    to the folder (the file is read once, under its first name)."""
    (folder / "config").mkdir()
    (folder / "policies").rename(folder / "config" / "policies")
    (folder / "policies").symlink_to("config/policies")
    hidden = folder / "config" / "policies" / ".library"
    hidden.mkdir()
    (folder / TRAINING).rename(hidden / "training.yaml")
    (folder / TRAINING).symlink_to(".library/training.yaml")
    (folder / "policies" / "team").symlink_to(".library")


def test_diff_follows_links_at_a_revision_as_the_working_tree_loader_does(repo: Repo) -> None:
    folder = Path(repo.working_tree_dir)
    _linked_layout(folder)
    commit_all(repo, "policies behind links")
    assert run("validate").stdout == "policies: 6 policy documents valid\n"
    same = run("diff", "--base", "HEAD", "--exit-code")
    assert (same.exit_code, same.stdout) == (0, "no differences between HEAD and working tree\n")
    move_training_to_t4(folder)  # through the link: the base side has the stage where it was
    stages = json.loads(run("diff", "--base", "HEAD", "--format", "json").stdout)["stages"]
    assert stages == [{"stage": MOVED, "before": ["gpu-cluster-huawei"], "after": ["inference-cluster-aliyun"]}]


LINK_PROBLEMS = {
    "outside-the-root": ("../README.md", "policies/linked.yaml: error: symbolic link points outside the policy "
                         "folders\n  hint: copy the file into the policy folder instead\n"),
    "outside-the-repository": ("/etc/passwd", "policies/linked.yaml: error: symbolic link points outside the "
                               "policy folders\n  hint: copy the file into the policy folder instead\n"),
    "loop": ("linked.yaml", "policies/linked.yaml: error: symbolic link loop\n"
             "  hint: remove the link, or point it at a policy file or folder\n"),
    "broken": ("nowhere.yaml", "policies/linked.yaml: error: broken symbolic link\n"
               "  hint: remove the link, or point it at a policy file or folder\n"),
    "folder-outside-the-root": ("..", "policies/linked.yaml: error: symbolic link points outside the policy "
                                "folders\n  hint: copy the file into the policy folder instead\n"),
}


@pytest.mark.parametrize("case", LINK_PROBLEMS)
def test_a_link_at_a_revision_is_the_error_the_working_tree_loader_gives(repo: Repo, case: str) -> None:
    folder = Path(repo.working_tree_dir)
    target, message = LINK_PROBLEMS[case]
    (folder / "README.md").write_text("fleet\n")
    (folder / "policies" / "linked.yaml").symlink_to(target)
    now = run("validate")
    assert (now.exit_code, now.stderr) == (1, message + "1 error in 1 file\n")
    commit_all(repo, case)
    (folder / "policies" / "linked.yaml").unlink()  # the working tree side compiles
    result = run("diff", "--base", "HEAD")
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == f"error: the policies at HEAD do not compile:\n{message}1 error in 1 file\n"


def test_a_submodule_at_a_revision_is_an_error_naming_it(repo: Repo) -> None:
    repo.git.update_index("--add", "--cacheinfo", f"160000,{repo.head.commit.hexsha},policies/vendored")
    repo.git.commit("--quiet", "--message", "a submodule among the policies")
    result = run("diff", "--base", "HEAD")
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == ("error: the policies at HEAD do not compile:\n"
                             "policies/vendored: error: a git submodule: its files are in another repository, "
                             "which fleetc does not read\n  hint: copy the policies into this repository\n"
                             "1 error in 1 file\n")


def test_a_file_over_the_limit_at_a_revision_is_refused_unread(repo: Repo) -> None:
    folder = Path(repo.working_tree_dir)
    (folder / "policies" / "huge.yaml").write_bytes(b"#" * (4 * 1024 * 1024 + 1))
    commit_all(repo, "huge")
    (folder / "policies" / "huge.yaml").unlink()
    result = run("diff", "--base", "HEAD")
    assert (result.exit_code, result.stderr) == (1, (
        "error: the policies at HEAD do not compile:\npolicies/huge.yaml: error: file is 4194305 bytes; the limit "
        "is 4194304\n  hint: split it into several policy files\n1 error in 1 file\n"))


@pytest.mark.parametrize(("target", "problem"), [("policies", "symbolic link loop"),
                                                 ("missing", "broken symbolic link"),
                                                 ("/etc", "symbolic link points outside the repository")])
def test_a_named_path_whose_link_cannot_be_followed_at_a_revision_is_a_usage_error(
        repo: Repo, target: str, problem: str) -> None:
    folder = Path(repo.working_tree_dir)
    (folder / "policies").rename(folder / "real")
    (folder / "policies").symlink_to(target)
    commit_all(repo, "policies is a link")
    (folder / "policies").unlink()
    (folder / "real").rename(folder / "policies")
    result = run("diff", "--base", "HEAD")
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"error: policies: {problem} at HEAD\n")


# --------------------------------------------------------------------------- compile --commit
def test_commit_commits_out_with_the_policies_it_came_from_and_leaves_the_rest_alone(repo: Repo) -> None:
    folder = Path(repo.working_tree_dir)
    assert run("compile", "--commit").exit_code == 0
    first = repo.head.commit
    (folder / "notes.txt").write_text("staged by the user\n")
    repo.git.add("notes.txt")
    (folder / "policies/README").write_text("not a policy\n")
    move_training_to_t4(folder)  # the policy edit, unstaged: committed with its compile
    result = run("compile", "--commit")
    assert result.exit_code == 0, result.output
    head = repo.head.commit
    assert head.parents == (first,)
    changed = sorted(str(p) for p in head.stats.files)
    assert TRAINING in changed and all(p.startswith("out/") for p in changed if p != TRAINING)
    assert head.message.splitlines()[0] == ("fleetc: commit 1 policy file and out/ compiled from it "
                                            "(1 stage moved, -8 a100, +8 t4)")
    assert f"{MOVED}: gpu-cluster-huawei -> inference-cluster-aliyun" in head.message
    assert head.message.endswith(f"\nPolicies committed with it:\n  {TRAINING}\n")
    assert result.stdout == f"committed {head.hexsha[:12]}: {head.message.splitlines()[0]}\n"
    assert repo.git.diff("--cached", "--name-only").splitlines() == ["notes.txt"]
    assert repo.git.status("--porcelain", "--", "out", TRAINING) == ""
    assert "?? policies/README" in repo.git.status("--porcelain").splitlines()
    # The point: on the commit --commit made, compile --check passes.
    repo.git.stash("--include-untracked")
    check = run("compile", "--check")
    assert (check.exit_code, check.stdout) == (0, "out/ is up to date\n"), check.output


def test_commit_commits_a_deleted_policy_file_as_deleted(repo: Repo) -> None:
    folder = Path(repo.working_tree_dir)
    assert run("compile", "--commit").exit_code == 0
    (folder / "policies/customer-service-pipeline.yaml").unlink()
    result = run("compile", "--commit")
    assert result.exit_code == 0, result.output
    assert "  policies/customer-service-pipeline.yaml\n" in repo.head.commit.message
    assert repo.git.status("--porcelain") == ""


def test_commit_refuses_a_policy_file_git_ignores(repo: Repo) -> None:
    folder = Path(repo.working_tree_dir)
    assert run("compile", "--commit").exit_code == 0
    head = repo.head.commit.hexsha
    (folder / ".gitignore").write_text("local-*.yaml\n")
    (folder / "policies/local-pipeline.yaml").write_text(
        (folder / "policies/customer-service-pipeline.yaml").read_text().replace(
            "name: customer-service-assistant", "name: local-assistant"))
    result = run("compile", "--commit")
    assert result.exit_code == 2, result.output
    assert result.stderr == ("error: policies/local-pipeline.yaml: a policy file git ignores (.gitignore); "
                             "--commit commits the policies with the output, so that compile --check passes "
                             "on the commit; compile without --commit, or stop ignoring it\n")
    assert repo.head.commit.hexsha == head


def test_commit_refuses_manual_edits_in_out(repo: Repo) -> None:
    folder = Path(repo.working_tree_dir)
    assert run("compile", "--commit").exit_code == 0
    head = repo.head.commit.hexsha
    edited = folder / "out/clusters/gpu-cluster-huawei/workloads/kustomization.yaml"
    edited.write_text(edited.read_text() + "# hand edit\n")
    (folder / "out/extra.yaml").write_text("kind: ConfigMap\n")
    move_training_to_t4(folder)
    before = state(folder)
    result = run("compile", "--commit")
    assert result.exit_code == 1
    assert result.stderr == ("error: out/ has changes fleetc did not make; commit or discard them first "
                             "(nothing was written):\n  out/clusters/gpu-cluster-huawei/workloads/kustomization.yaml\n"
                             "  out/extra.yaml\n")
    assert (repo.head.commit.hexsha, state(folder)) == (head, before)


def test_commit_accepts_output_fleetc_already_wrote(repo: Repo) -> None:
    assert run("compile", "--commit").exit_code == 0
    move_training_to_t4(Path(repo.working_tree_dir))
    assert run("compile").exit_code == 0  # the user looked at the output first
    result = run("compile", "--commit")
    assert result.exit_code == 0, result.output
    assert repo.head.commit.message.startswith(
        "fleetc: commit 1 policy file and out/ compiled from it (1 stage moved, -8 a100, +8 t4)\n")


def test_commit_without_changes_makes_no_commit(repo: Repo) -> None:
    assert run("compile", "--commit").exit_code == 0
    head = repo.head.commit.hexsha
    result = run("compile", "--commit")
    assert (result.exit_code, result.stdout) == (0, "out/ and the policies are unchanged: nothing to commit\n")
    as_json = run("compile", "--commit", "--format", "json")
    assert as_json.exit_code == 0 and json.loads(as_json.stdout)["commit"] is None
    assert repo.head.commit.hexsha == head


def test_commit_in_a_repository_without_commits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = init_repo(tmp_path)
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    monkeypatch.chdir(tmp_path)
    result = run("compile", "--commit")
    assert result.exit_code == 0, result.output
    commit = repo.head.commit
    assert commit.parents == ()
    assert commit.message.startswith("fleetc: commit 6 policy files and out/ compiled from them "
                                     "(7 stages added, +16 a100, +7 t4)\n")
    files = sorted(b.path for b in commit.tree.traverse() if b.type == "blob")
    assert files and all(p.startswith(("out/", "policies/")) for p in files)
    assert "out/.fleetc/files" in files and "out/placement.yaml" in files
    assert repo.git.status("--porcelain") == ""


def test_commit_and_check_cannot_be_combined(repo: Repo) -> None:
    result = run("compile", "--commit", "--check")
    assert (result.exit_code, result.stderr) == (2, "error: --check and --commit cannot be combined\n")


# --------------------------------------------------------------------------- validate --format github
def test_validate_github_annotations_are_capped_and_summarised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    monkeypatch.chdir(tmp_path)
    fleet = tmp_path / "policies/fleet.yaml"
    text = fleet.read_text()
    for n in range(12):  # twelve unknown fields, twelve errors
        text = text.replace("spec:\n", f"spec:\n  unknown{n:02d}: 1\n", 1)
    fleet.write_text(text)
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = run("validate", "--format", "github")
    assert result.exit_code == 1
    annotations = [line for line in result.stdout.splitlines() if line.startswith("::error ")]
    assert len(annotations) == 10
    assert annotations[0].startswith("::error file=policies/fleet.yaml,line=")
    assert ",title=fleetc%3A spec.unknown" in annotations[0] and "::unknown field 'unknown" in annotations[0]
    assert "::notice title=fleetc::12 errors; the first 10 are annotated" in result.stdout
    written = summary.read_text()
    assert written.startswith("### fleetc: 12 errors\n\n```text\n")
    assert written.count("error: spec.unknown") == 12
    assert "12 errors in 1 file" in result.stderr


def test_validate_github_escapes_workflow_command_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    (tmp_path / "bad.yaml").write_text("a: [1\n")
    result = run("validate", "--format", "github", "bad.yaml")
    assert result.exit_code == 1
    line = result.stdout.splitlines()[0]
    assert line.startswith("::error file=bad.yaml,line=")
    assert "\n" not in line and "%0A" not in line.split("::", 2)[1]


# --------------------------------------------------------------------------- CI and hooks
def load_yaml(path: Path) -> object:
    from ruamel.yaml import YAML

    return YAML(typ="safe", pure=True).load(path.read_text())


def test_workflow_pins_actions_and_keeps_permissions_minimal() -> None:
    workflow = load_yaml(ROOT / ".github/workflows/fleetc.yml")
    assert isinstance(workflow, dict)
    assert workflow["permissions"] == {"contents": "read"}
    jobs = workflow["jobs"]
    uses = [step["uses"] for job in jobs.values() for step in job["steps"] if "uses" in step]
    assert all(re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+\.\d+\.\d+", u) for u in uses), uses
    assert "marocchino/sticky-pull-request-comment@v2.9.1" in uses
    writers = {name for name, job in jobs.items() if "permissions" in job}
    assert writers == {"comment"} and jobs["comment"]["permissions"] == {"pull-requests": "write"}
    runs = [step.get("run", "") for job in jobs.values() for step in job["steps"]]
    assert "fleetc validate --format github" in runs
    assert any('fleetc compile --check --base "$BASE"' in r for r in runs)  # tests/test_attacks.py runs it
    assert jobs["test"]["steps"][0]["with"]["fetch-depth"] == 0
    assert any('fleetc diff --base "origin/${BASE_REF}" "$@" --format markdown' in r for r in runs)  # test_what_if
    assert jobs["diff"]["steps"][0]["with"]["fetch-depth"] == 0
    tests = {step.get("name"): step for step in jobs["test"]["steps"]}
    assert tests["Test"]["env"] == {"CI": "false"} and tests["Test"]["run"] == readme_test_command()
    assert [tests[name]["run"] for name in ("Lint (ruff, with a complexity cap)", "Type check (mypy strict)")] == \
        [LINT, TYPE_CHECK]


#: The code-habit gates: the workflow, .ci/run and pre-commit run the same two commands, which
#: read their settings (the complexity cap, strict mode and the files) from pyproject.toml.
LINT, TYPE_CHECK = "ruff check fleetc tests bench", "mypy"


def readme_test_command() -> str:
    """The last step of the README's set-up command that installs and runs the tests."""
    line = next(line for line in (ROOT / "README.md").read_text().splitlines()
                if line.startswith("python3 -m venv") and "pytest" in line)
    return line.split(" && ")[-1]


def test_ci_and_pre_commit_run_the_code_habit_gates() -> None:
    ci = (ROOT / ".ci/run").read_text().splitlines()
    assert ci.index(LINT) < ci.index(TYPE_CHECK) < ci.index(readme_test_command())
    assert readme_test_command().startswith("python -m pytest")
    config = load_yaml(ROOT / ".pre-commit-config.yaml")
    assert isinstance(config, dict)
    entries = {hook["id"]: hook["entry"] for repo in config["repos"] for hook in repo["hooks"]}
    assert entries["ruff"] == LINT and entries["mypy"] == TYPE_CHECK
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    assert settings["mypy"]["strict"] is True and settings["mypy"]["files"] == ["fleetc"]
    assert "C90" in settings["ruff"]["lint"]["select"]
    assert settings["ruff"]["lint"]["mccabe"]["max-complexity"] <= 13


def test_pre_commit_hooks_and_gitattributes() -> None:
    hooks = load_yaml(ROOT / ".pre-commit-hooks.yaml")
    assert isinstance(hooks, list)
    assert {h["id"]: h["entry"] for h in hooks} == {"fleetc-validate": "fleetc validate",
                                                     "fleetc-compile-check": "fleetc compile --check"}
    assert all(h["language"] == "python" and h["pass_filenames"] is False and h["files"] == "^policies/"
               for h in hooks)
    assert "out/** linguist-generated=true" in (ROOT / ".gitattributes").read_text().splitlines()


def test_a_failed_commit_leaves_the_working_tree_and_the_index_as_they_were(repo: Repo) -> None:
    """A pre-commit hook refuses the commit: out/ is the previous compile's, the index too."""
    assert run("compile", "--commit").exit_code == 0
    (Path(repo.working_tree_dir) / "NOTES.md").write_text("staged by the user\n")
    repo.git.add("NOTES.md")
    move_training_to_t4(Path(repo.working_tree_dir))
    before_out = state(Path(repo.working_tree_dir) / "out")
    index = Path(repo.git_dir) / "index"
    before_index = index.read_bytes()
    status = repo.git.status("--porcelain")
    hook = Path(repo.git_dir) / "hooks" / "pre-commit"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text("#!/bin/sh\necho 'hook: refusing' >&2\nexit 1\n")
    hook.chmod(0o755)
    result = run("compile", "--commit")
    assert result.exit_code == 1
    assert result.stderr == ("error: git commit failed: the pre-commit hook (.git/hooks/pre-commit) exited with 1: "
                             "hook: refusing\n")
    assert state(Path(repo.working_tree_dir) / "out") == before_out
    assert index.read_bytes() == before_index
    assert repo.git.status("--porcelain") == status
    assert not [p for p in Path(repo.working_tree_dir).iterdir() if p.name.startswith(".out.")]


@pytest.mark.parametrize(("hook", "script", "message"), [
    ("pre-commit", "#!/bin/sh\nexit 3\n",
     "error: git commit failed: the pre-commit hook (.git/hooks/pre-commit) exited with 3 and said nothing\n"),
    ("commit-msg", "#!/bin/sh\necho 'subject too long' >&2\nexit 5\n",
     "error: git commit failed: the commit-msg hook (.git/hooks/commit-msg) exited with 5: subject too long\n"),
])
def test_a_hook_that_refuses_the_commit_is_named_with_its_exit_code(repo: Repo, hook: str, script: str,
                                                                    message: str) -> None:
    path = Path(repo.git_dir) / "hooks" / hook
    path.parent.mkdir(exist_ok=True)
    path.write_text(script)
    path.chmod(0o755)
    head = repo.head.commit.hexsha
    result = run("compile", "--commit")
    assert (result.exit_code, result.stderr) == (1, message)
    assert repo.head.commit.hexsha == head and not (Path(repo.working_tree_dir) / "out").exists()


def test_an_output_folder_linked_elsewhere_is_followed_at_a_revision(repo: Repo) -> None:
    """out -> build/out, committed: the placement at a revision is read through the link, as
    in the working tree, so --check --base and --commit see what was committed."""
    folder = Path(repo.working_tree_dir)
    (folder / "build").mkdir()
    (folder / "out").symlink_to("build/out")
    assert run("compile").exit_code == 0
    commit_all(repo, "out/ through a link")
    assert previous_at("HEAD", "out", folder).stages  # read through the link
    assert set(read_folder(folder, "HEAD", "out")) == {p.relative_to(folder / "build" / "out").as_posix()
                                                        for p in (folder / "build" / "out").rglob("*") if p.is_file()}
    move_training_to_t4(folder)
    committed = run("compile", "--commit")
    assert committed.exit_code == 0, committed.output
    assert committed.stdout.startswith("committed ")
    assert run("compile", "--check", "--base", "HEAD~1").exit_code == 0


@pytest.mark.parametrize(("target", "message"), [
    ("../../elsewhere.yaml", "error: out/placement.yaml: symbolic link points outside the repository at HEAD\n"),
    ("missing.yaml", "error: out/placement.yaml: broken symbolic link at HEAD\n"),
])
def test_a_placement_linked_out_of_reach_at_a_revision_is_named(repo: Repo, target: str, message: str) -> None:
    folder = Path(repo.working_tree_dir)
    assert run("compile").exit_code == 0
    (folder / "out" / "placement.yaml").unlink()
    (folder / "out" / "placement.yaml").symlink_to(target)
    commit_all(repo, "a linked placement")
    result = run("compile", "--check", "--base", "HEAD")
    assert (result.exit_code, result.stderr) == (2, message)


def test_a_link_inside_the_committed_output_folder_is_named_by_commit(repo: Repo) -> None:
    folder = Path(repo.working_tree_dir)
    assert run("compile").exit_code == 0
    (folder / "out" / "notes.md").symlink_to("placement.yaml")
    commit_all(repo, "a link in out/")
    result = run("compile", "--commit")
    assert (result.exit_code, result.stderr) == (2, (
        "error: out/notes.md: a symbolic link in the output folder at HEAD: fleetc writes only files there, and "
        "does not read it\n  hint: remove it from out/ and commit that\n"))


def test_commit_message_counts_what_the_commit_holds(repo: Repo) -> None:
    """Issue 26: the message said "4 added, 5 changed" while the commit held only modified files."""
    folder = Path(repo.working_tree_dir)
    assert run("compile", "--commit").exit_code == 0
    text = (folder / TRAINING).read_text()
    (folder / TRAINING).write_text(text.replace("gpu: 8", "gpu: 16", 1))
    assert run("compile", "--commit").exit_code == 0, "compile --commit failed"
    head = repo.head.commit
    held = repo.git.diff("--name-status", "--no-renames", "HEAD~1", "HEAD", "--", "out").splitlines()
    counts = {word: sum(line.startswith(letter) for line in held)
              for letter, word in (("A", "added"), ("M", "changed"), ("D", "removed"))}
    assert f"{counts['added']} added, {counts['changed']} changed, {counts['removed']} removed in out/" \
        in head.message, (head.message, held)
