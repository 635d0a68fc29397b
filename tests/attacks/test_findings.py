"""Issue 27's findings, each with the tests that hold it and the promise of the issue it checks.

The index (:data:`FINDINGS`) is the issue's list: the critical finding, the 4 high, the 4
medium, the 14 low, the two found trying fleetc as a new user, and what its third round added
(the device plugin's namespace). Each names the test node ids that fail on the code before its
fix and pass now, and the promises of "What must hold" they check:

1. ``compile --check`` and the PR report cover everything the engines apply; fleetc's
   bookkeeping files cannot change what is applied or deleted.
2. No value from a policy reaches a shell unquoted.
3. The report escapes everything from a file name, policy or scenario; the terminal output
   strips control characters.
4. Reserved namespaces are refused as pipeline namespaces (and as the device plugin's).
5. Each finding has a test; the credential patterns cover the common token formats and no
   message echoes a suspected credential; bad input is a clear error, never exit 3.
6. The attack corpus grows with each finding and runs in CI.

:func:`test_every_indexed_test_exists` collects every id, so the index cannot rot: a test
renamed or removed fails here until the index follows.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]

INPUTS = "tests/attacks/test_inputs.py"
OUT_CHECK = "tests/attacks/test_out_check.py"
OUT_MARKS = "tests/attacks/test_out_marks.py"
OUT_KEPT = "tests/attacks/test_out_kept.py"
OUT_TREE = "tests/attacks/test_out_tree.py"
CLUSTER = "gpu-cluster-huawei"


class Finding(NamedTuple):
    severity: str
    title: str
    promises: tuple[int, ...]
    tests: tuple[str, ...]


def attack(name: str) -> str:
    """The node id of a row of tests/attacks/test_inputs.py's table."""
    return f"{INPUTS}::test_attack[{name}]"


TOKENS = ("a Hugging Face token", "an OpenAI API key", "an Anthropic API key", "a Weights & Biases API key",
          "a GitHub token", "a GitLab token", "a Slack token", "a Stripe key", "an Azure storage account key",
          "a Google Cloud service account key", "a SendGrid API key", "an AWS access key id")

FINDINGS: tuple[Finding, ...] = (
    Finding("critical", "a folder added by hand as out/clusters/<any-name>/ is synced, --check passes", (1, 6), (
        f"{OUT_TREE}::test_a_folder_added_by_hand_under_clusters_gets_no_application[in-cluster]",
        f"{OUT_TREE}::test_a_folder_added_by_hand_under_clusters_gets_no_application[x]",
        f"{OUT_TREE}::test_flux_reads_only_the_fleets_folders",
        f"{OUT_CHECK}::test_a_plain_compile_keeps_a_file_it_does_not_render_and_says_so",
        f"{OUT_CHECK}::test_a_file_fleetc_does_not_render_fails_check_and_shows_in_the_diff"
        "[clusters/in-cluster/kustomization.yaml]",
    )),
    Finding("high", "a line in .fleetc/files naming local/<c>/kustomization.yaml resets the user's", (1,), (
        f"{OUT_CHECK}::test_a_record_naming_the_users_kustomization_never_resets_it",
    )),
    Finding("high", "shell injection: output URLs pasted unquoted into the wait and mark scripts", (2,), (
        "tests/test_scripts.py::test_no_policy_value_runs_as_a_command",
        "tests/test_scripts.py::test_a_policy_value_reaches_a_shell_only_as_a_variable_or_an_argument",
        "tests/test_scripts.py::test_every_rendered_script_parses[bash-wait]",
    )),
    Finding("high", "out/local/<c>/ applied with its cluster but invisible to --check, the report, "
            ".gitattributes", (1,), (
        f"{OUT_CHECK}::test_the_users_files_are_listed_by_check_and_shown_whole_in_the_diff",
        f"{OUT_CHECK}::test_gitattributes_never_collapses_the_users_folder",
        f"{OUT_CHECK}::test_a_symlink_anywhere_in_out_fails_check",
    )),
    Finding("high", "Markdown injection through scenario file names", (3,), (
        "tests/test_report.py::test_names_from_files_and_scenarios_cannot_break_the_comment",
    )),
    Finding("medium", "a second kustomization.yml beside fleetc's passes --check", (1,), (
        f"{OUT_CHECK}::test_a_file_fleetc_does_not_render_fails_check_and_shows_in_the_diff"
        f"[clusters/{CLUSTER}/kustomization.yml]",
        f"{OUT_CHECK}::test_a_file_fleetc_does_not_render_fails_check_and_shows_in_the_diff"
        f"[clusters/{CLUSTER}/infra/Kustomization]",
    )),
    Finding("medium", "controller namespaces adopted as pipeline namespaces", (4,), (
        *(attack(f"namespace {ns}") for ns in ("kueue-system", "kurator-system", "cert-manager", "default")),
        attack("a pipeline named kueue-system without a namespace"),
        "tests/test_attacks.py::test_a_reserved_namespace_is_refused[kube-system]",
    )),
    Finding("medium", "a pipeline without metadata.namespace keyed as default in the one-Secret-per-URL check",
            (4, 5), (
        f"{INPUTS}::test_two_pipelines_without_namespace_may_name_one_url_with_two_secrets",
        f"{INPUTS}::test_a_pipeline_without_namespace_is_keyed_by_the_one_it_renders_into",
    )),
    Finding("medium", "*.YAML and *.json policy files silently ignored", (5,), (
        attack("a pipeline in *.json"),
        f"{INPUTS}::test_a_pipeline_in_yaml_upper_case_at_the_base_is_read",
    )),
    Finding("low", "a forged .fleetc/render keeps a tampered manifest through a plain compile", (1,), (
        f"{OUT_MARKS}::test_a_forged_render_record_never_keeps_a_tampered_manifest[in place]",
        f"{OUT_MARKS}::test_a_forged_render_record_never_keeps_a_tampered_manifest[replaced]",
        f"{OUT_MARKS}::test_an_unmarked_copy_of_out_keeps_nothing_and_renders_everything",
        f"{OUT_MARKS}::test_every_file_fleetc_writes_is_marked_and_the_mark_names_its_inode",
    )),
    Finding("low", "a race between the kept-folder check and the hard link", (1,), (
        f"{OUT_KEPT}::test_a_file_changed_between_the_check_and_the_link_is_never_kept[kept]",
        f"{OUT_KEPT}::test_a_file_changed_between_the_check_and_the_link_is_never_kept[unchanged]",
        f"{OUT_MARKS}::test_a_file_changed_after_the_check_and_before_the_link_is_never_kept",
    )),
    Finding("low", "exit 3 on seven user inputs", (5,), (
        f"{INPUTS}::test_a_revision_in_any_git_syntax_is_read_by_git",
        attack("gpus=C=2^63"),
        attack("a Kueue GPU type named default"),
        attack("a what-if GPU type named default"),
        attack("two stages whose names are one once cut"),
        f"{INPUTS}::test_a_link_in_out_to_pagemap_is_no_internal_error",
        f"{INPUTS}::test_a_placement_linked_to_pagemap_is_named_never_an_errno",
        f"{OUT_CHECK}::test_a_symlink_to_a_device_file_is_a_finding_not_an_internal_error",
    )),
    Finding("low", "file names reaching stderr raw (workflow commands, terminal escapes)", (3,), (
        attack("a key forging a workflow command"),
        attack("a --base ref forging a workflow command"),
        "tests/test_report.py::test_terminal_output_shows_control_characters_escaped",
        "tests/test_git.py::test_validate_github_escapes_workflow_command_data",
    )),
    Finding("low", "backticks in a what-if heading", (3,), (
        "tests/test_report.py::test_a_what_if_heading_with_backticks_stays_one_code_span",
    )),
    Finding("low", "noise diffs pushing the real change out of the comment", (1, 3), (
        "tests/test_report.py::test_bookkeeping_files_are_summarised_not_diffed",
    )),
    Finding("low", "%YAML 1.1 making 010 an 8", (5,), (
        attack("%YAML 1.1"),
        attack("%YAML 1.1 in a compile"),
        f"{INPUTS}::test_no_reader_takes_yaml_11",
        f"{INPUTS}::test_yaml_12_directive_reads_as_without",
    )),
    Finding("low", "scenario pipeline= reading absolute paths, echoing the file, no size limit", (3, 5), (
        attack("pipeline= an absolute path"),
        attack("pipeline= a path out of the repository"),
        attack("pipeline= in a scenario file, out of the repository"),
        attack("pipeline= a file that is no policy is not echoed"),
        attack("pipeline= a file of 5 MB"),
        attack("a scenario file of 5 MB"),
    )),
    Finding("low", "scenario gpus= above the Fleet's maximum", (5,), (
        attack("gpus= above the Fleet's maximum"),
        attack("gpus= with 5000 digits"),
    )),
    Finding("low", "a planted .fleetc/files making any folder fleetc's so --out deletes what it lists", (1,), (
        f"{OUT_CHECK}::test_a_planted_record_never_makes_fleetc_delete_what_it_lists",
        f"{OUT_MARKS}::test_a_planted_record_never_deletes_yaml_fleetc_did_not_write",
        f"{OUT_MARKS}::test_a_line_added_to_the_record_never_deletes_an_unmarked_file",
        f"{OUT_MARKS}::test_a_checkout_deletes_what_git_holds_as_it_is_and_nothing_else",
        f"{OUT_MARKS}::test_fleetcs_own_files_are_still_deleted",
    )),
    Finding("low", "gpu-product not validated as a label value", (5,), (
        attack("a GPU type whose product label is too long"),
        attack("a scenario GPU type whose product label is too long"),
    )),
    Finding("low", "spec.gitops.path pointing the engines at a folder --check never covers", (1,), (
        f"{OUT_CHECK}::test_a_gitops_path_the_compile_never_covers_is_refused",
    )),
    Finding("low", "--check following symlinks in out/", (1,), (
        f"{OUT_CHECK}::test_a_symlink_anywhere_in_out_fails_check",
        f"{OUT_CHECK}::test_a_symlink_to_a_device_file_is_a_finding_not_an_internal_error",
    )),
    Finding("low", "the fallback swap leaving no out/ after a kill between its two renames", (1,), (
        f"{OUT_CHECK}::test_a_compile_killed_between_the_swaps_renames_is_restored_explicitly",
        "tests/test_atomic.py::test_a_compile_killed_between_the_fallback_renames_is_recovered",
    )),
    Finding("also found", "a schema error for a credential-shaped secretName echoes it (text, json, github)", (5,), (
        *(attack(f"secretName: AKIA... --format {output}") for output in ("text", "json", "github")),
        attack("a schema error quoting an hf_ token"),
        attack("a usage error quoting a token"),
        "tests/test_security.py::test_a_suspected_credential_is_never_echoed_by_any_message",
    )),
    Finding("also found", "an hf_ token rendered into out/; Stripe, SendGrid, Azure, GitLab... not recognised",
            (5,), (
        attack("an hf_ token in a command is not rendered"),
        f"{INPUTS}::test_an_hf_token_in_a_command_never_reaches_out",
        "tests/test_security.py::test_every_common_token_format_is_recognised_and_redacted",
    )),
    Finding("third round", "the device plugin's ConfigMap namespace may be a reserved one", (4,), (
        *(attack(f"device plugin in {ns}") for ns in ("kube-public", "argocd", "flux-system", "kueue-system",
                                                        "default", "cert-manager")),
        attack("device plugin in its own kube-system"),
    )),
)


def test_the_index_holds_every_finding_of_the_issue() -> None:
    counts = {severity: sum(f.severity == severity for f in FINDINGS)
              for severity in ("critical", "high", "medium", "low", "also found")}
    assert counts == {"critical": 1, "high": 4, "medium": 4, "low": 14, "also found": 2}
    assert all(f.tests and set(f.promises) <= {1, 2, 3, 4, 5, 6} for f in FINDINGS)
    assert len({f.title for f in FINDINGS}) == len(FINDINGS)
    assert {p for f in FINDINGS for p in f.promises} >= {1, 2, 3, 4, 5}


@pytest.mark.slow
def test_every_indexed_test_exists() -> None:
    """Collect every file the index names (pytest --collect-only) and find each id there; an id
    without brackets names a test function, found with any parameters."""
    files = sorted({test.split("::")[0] for f in FINDINGS for test in f.tests})
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-p", "no:randomly", *files], cwd=ROOT, env=environment, capture_output=True,
                          text=True, timeout=600)
    collected = set(done.stdout.splitlines())
    functions = {node.split("[")[0] for node in collected}
    missing = [test for f in FINDINGS for test in f.tests
               if test not in collected and ("[" in test or test not in functions)]
    assert not missing, f"not collected: {missing}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
