"""Issue 27's attacks on fleetc's inputs: the policies, the scenario settings, the command line
and what reaches the terminal. Owner: the input side (other owners keep their own files here).

Every attack is one row of :data:`ATTACKS`: a name, the promise it checks (README and issue 27),
what it changes in a copy of the bundled policies, the command line, and what must come out.
Each runs the real program in a subprocess, so what a user sees is what is asserted: no
traceback, never exit 3, and the message the promise names. Attacks that need more than one
command line, or look at what was rendered, are the test functions below the table.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The promises the attacks check, by the name each row gives.
PROMISES = {
    "reserved-namespace": "a controller's or Kubernetes' own namespace is never a pipeline's",
    "secret-per-url": "one URL is mounted with one Secret in the namespace the pipeline renders into",
    "nothing-dropped": "no file under a policy path is silently ignored",
    "no-exit-3": "bad user input is a clear error (exit 1 or 2), never an internal error",
    "clean-terminal": "no user text forges a workflow command or reaches the terminal as a control",
    "yaml-1.2": "a policy reads as YAML 1.2 whatever its directives say",
    "scenario-bounds": "a scenario reads only small files inside the repository and never echoes them",
    "label-value": "a policy value rendered as a label value is validated as one",
    "no-secret-echo": "a suspected credential is never rendered, and never echoed by a message",
}


def fleetc(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m fleetc ARGS`` in ``cwd``, never a traceback nor an internal error."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    environment.pop("FLEETC_DEBUG", None)
    environment.pop("GITHUB_STEP_SUMMARY", None)
    result = subprocess.run([sys.executable, "-m", "fleetc", *args], cwd=cwd, env=environment,
                            capture_output=True, text=True, timeout=300)
    assert "Traceback" not in result.stderr, result.stderr
    assert "internal error" not in result.stderr, result.stderr
    assert result.returncode != 3, result.stderr
    return result


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


PIPELINE = "policies/customer-service-pipeline.yaml"
TRAINING = "policies/llm-training-pipeline.yaml"
FLEET = "policies/fleet.yaml"


def namespace(name: str) -> Callable[[Path], None]:
    def setup(project: Path) -> None:
        edit(project / PIPELINE, "namespace: aigc-cs", f"namespace: {name}")
    return setup


def unnamespaced(name: str) -> Callable[[Path], None]:
    def setup(project: Path) -> None:
        edit(project / PIPELINE, "  name: customer-service-assistant\n  namespace: aigc-cs\n", f"  name: {name}\n")
    return setup


@dataclass(frozen=True)
class Attack:
    name: str
    promise: str
    setup: Callable[[Path], None]
    args: tuple[str, ...] = ("validate",)
    exit: int = 1
    #: Each must be in stderr (a regular expression).
    says: tuple[str, ...] = ()
    #: None may be in stdout or stderr.
    never: tuple[str, ...] = field(default=())


ATTACKS: list[Attack] = [
    *(Attack(f"namespace {ns}", "reserved-namespace", namespace(ns),
             says=(rf"{PIPELINE}:7:14: error: metadata.namespace: namespace '{ns}' is reserved",
                   r"hint: give the pipeline a namespace of its own"))
      for ns in ("kueue-system", "kurator-system", "cert-manager", "volcano-system", "fluid-system",
                 "gpu-operator", "flux-system", "argocd", "kube-system", "kube-public", "kube-node-lease",
                 "default")),
    Attack("a pipeline named kueue-system without a namespace", "reserved-namespace", unnamespaced("kueue-system"),
           says=(rf"{PIPELINE}:6:9: error: metadata.name: namespace 'kueue-system' \(the pipeline's name",)),
]


def device_plugin_in(name: str) -> Callable[[Path], None]:
    def setup(project: Path) -> None:
        edit(project / GPU_POLICY, "spec:\n", f"spec:\n  devicePlugin:\n    namespace: {name}\n")
    return setup


GPU_POLICY = "policies/gpu-optimization.yaml"
ATTACKS += [
    *(Attack(f"device plugin in {ns}", "reserved-namespace", device_plugin_in(ns),
             says=(rf"{GPU_POLICY}:9:16: error: spec.devicePlugin.namespace: namespace '{ns}' is reserved",
                   r"hint: name the namespace the device plugin runs in"))
      for ns in ("kube-public", "argocd", "flux-system", "kueue-system", "default", "cert-manager")),
    *(Attack(f"device plugin in its own {ns}", "reserved-namespace", device_plugin_in(ns), exit=0)
      for ns in ("gpu-operator", "nvidia-gpu-operator", "kube-system")),
]


def write(name: str, text: str) -> Callable[[Path], None]:
    def setup(project: Path) -> None:
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text, encoding="utf-8")
    return setup


def nothing(project: Path) -> None:
    """The bundled policies as they are."""


BIG = 5 * 1024 * 1024
HUAWEI = "gpu-cluster-huawei"

ATTACKS += [
    Attack("gpus=C=2^63", "no-exit-3", nothing, ("diff", "--what-if", f"gpus={HUAWEI}={2**63}"), exit=2,
           says=(rf"--what-if gpus={HUAWEI}={2**63}: expected at most 1000000 GPUs",)),
    Attack("gpus= with 5000 digits", "no-exit-3", nothing, ("diff", "--what-if", f"gpus={HUAWEI}={'9' * 5000}"),
           exit=2, says=(r"expected at most 1000000 GPUs",)),
    Attack("gpus= above the Fleet's maximum", "scenario-bounds", nothing,
           ("diff", "--what-if", f"gpus={HUAWEI}=1000008"), exit=2,
           says=(rf"gpus={HUAWEI}=1000008: expected at most 1000000 GPUs \(a Fleet's gpu-count\)",)),
    Attack("pipeline= an absolute path", "scenario-bounds", nothing, ("diff", "--what-if", "pipeline=/etc/passwd"),
           exit=2, says=(r"--what-if pipeline=/etc/passwd: outside the working folder",), never=("root:",)),
    Attack("pipeline= a path out of the repository", "scenario-bounds", write("../outside.yaml", "name: leaked\n"),
           ("diff", "--what-if", "pipeline=../outside.yaml"), exit=2,
           says=(r"pipeline=../outside.yaml: outside the working folder",), never=("leaked",)),
    Attack("pipeline= in a scenario file, out of the repository", "scenario-bounds",
           write("scenarios/steal.yaml", "whatIf: [pipeline=../../../../../../etc/passwd]\n"),
           ("diff", "--scenario", "scenarios/steal.yaml"), exit=2,
           says=(r"scenarios/steal.yaml:1:10: whatIf\[0\]: pipeline=.*: outside the working folder",),
           never=("root:",)),
    Attack("pipeline= a file that is no policy is not echoed", "scenario-bounds",
           write("notes.yaml", "the db password is TOPSECRET and more text\n"),
           ("diff", "--what-if", "pipeline=notes.yaml"), exit=1,
           says=(r"notes.yaml:1:1: error: expected a policy object \(a mapping\), got a string",),
           never=("TOPSECRET",)),
    Attack("pipeline= a file of 5 MB", "scenario-bounds", write("big.yaml", "#" * BIG + "\n"),
           ("diff", "--what-if", "pipeline=big.yaml"), exit=1,
           says=(r"big.yaml: error: file is \d+ bytes; the limit",)),
    Attack("a scenario file of 5 MB", "scenario-bounds", write("scenarios/big.yaml", "whatIf: [drain=x]\n" + "#" * BIG),
           ("diff", "--scenario", "scenarios/big.yaml"), exit=1,
           says=(r"scenarios/big.yaml: error: file is \d+ bytes; the limit",)),
]


def yaml_11(project: Path) -> None:
    """``%YAML 1.1`` makes ``gpu: 010`` (ten GPUs in YAML 1.2) eight."""
    path = project / TRAINING
    path.write_text("%YAML 1.1\n---\n" + path.read_text(encoding="utf-8").replace("      gpu: 8\n", "      gpu: 010\n"),
                    encoding="utf-8")


ATTACKS += [
    Attack("%YAML 1.1", "yaml-1.2", yaml_11,
           says=(rf"{TRAINING}:1:1: error: %YAML 1.1: fleetc reads YAML 1.2 only",
                 r"hint: remove the %YAML line")),
    Attack("%YAML 1.1 in a compile", "yaml-1.2", yaml_11, ("compile",), says=(r"%YAML 1.1: fleetc reads YAML 1.2",)),
]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A working folder holding a copy of the bundled policies and scenarios, in a git repository."""
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    shutil.copytree(ROOT / "scenarios", tmp_path / "scenarios")
    return tmp_path


# --- promise secret-per-url: keyed by the namespace a pipeline renders into -------------------


def test_two_pipelines_without_namespace_may_name_one_url_with_two_secrets(project: Path) -> None:
    """Before: both were keyed 'default', a false refusal: they render into two namespaces."""
    unnamespaced("assistant-a")(project)
    second = (project / PIPELINE).read_text(encoding="utf-8").replace("name: assistant-a\n", "name: assistant-b\n", 1)
    (project / "policies" / "second.yaml").write_text(second.replace("secretName: cos-credentials",
                                                                     "secretName: other-credentials"),
                                                      encoding="utf-8")
    result = fleetc(project, "validate")
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_a_pipeline_without_namespace_is_keyed_by_the_one_it_renders_into(project: Path) -> None:
    """Before: the pipeline without a namespace was keyed 'default', so another pipeline in the
    namespace it renders into named the same URL with another Secret unseen (one Dataset)."""
    unnamespaced("shared")(project)
    second = (project / PIPELINE).read_text(encoding="utf-8").replace(
        "  name: shared\n", "  name: assistant-b\n  namespace: shared\n", 1)
    (project / "policies" / "second.yaml").write_text(second.replace("secretName: cos-credentials",
                                                                     "secretName: other-credentials"),
                                                      encoding="utf-8")
    result = fleetc(project, "validate")
    assert result.returncode == 1
    assert re.search(r"is read in namespace shared with Secret 'cos-credentials' \(policies/customer-service",
                     result.stderr), result.stderr


# --- promise no-exit-3: git revisions gitpython cannot read -------------------------------------


def commit_all(project: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.email=a@example.com", "-c", "user.name=a", *args], cwd=project,
                       check=True, capture_output=True)
    git("init", "-q", "-b", "main")
    git("add", "-A")
    git("commit", "-q", "-m", "policies")


@pytest.mark.slow
@pytest.mark.parametrize("ref, exit_code", [("@{-1}", 2), ("HEAD@{1.year.ago}", 0), ("-x", 2)])
@pytest.mark.parametrize("command", [("diff",), ("compile", "--check")])
def test_a_revision_in_any_git_syntax_is_read_by_git(project: Path, ref: str, exit_code: int,
                                                     command: tuple[str, ...]) -> None:
    """Before: gitpython's reader of revisions raised IndexError or NotImplementedError: exit 3."""
    commit_all(project)
    fleetc(project, "compile")
    result = fleetc(project, *command, "--base", ref)
    if exit_code == 2:
        assert result.returncode == 2
        assert f"error: {ref}: unknown revision" in result.stderr
    else:
        assert result.returncode == 0, result.stderr


# --- promise yaml-1.2: every reader of YAML -------------------------------------------------------


@pytest.mark.parametrize("text", ["%YAML 1.1\n---\na: 010\n", "a: 1\n---\nb: 2\n...\n%YAML 1.1\n---\na: 010\n",
                                  "%YAML 1.1\n--- {a: 010}\n"])
def test_no_reader_takes_yaml_11(text: str) -> None:
    """Policy files from disk and from git (load_sources), and placement.yaml (yaml_documents):
    before, each read a: 8."""
    from ruamel.yaml.error import YAMLError

    from fleetc.policy.load import load_sources
    from fleetc.state.placementfile import yaml_documents

    loaded = load_sources([("f.yaml", text.encode())])
    assert not loaded.documents
    assert [d.message for d in loaded.diagnostics] == [
        "%YAML 1.1: fleetc reads YAML 1.2 only (YAML 1.1 reads 010 as 8 and yes as true)"]
    with pytest.raises(YAMLError):
        yaml_documents(text)


def test_yaml_12_directive_reads_as_without() -> None:
    from fleetc.policy.load import load_sources
    from fleetc.state.placementfile import yaml_documents

    assert [d.data for d in load_sources([("f.yaml", b"%YAML 1.2\n---\na: 010\n")]).documents] == [{"a": 10}]
    assert yaml_documents("%YAML 1.2\n---\na: 010\n") == [{"a": 10}]


# --- promise no-secret-echo: every common token format is refused, and never printed ------------

#: One made-up token of each format the credential patterns know, with the kind they name.
TOKENS = {
    "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ01234567": "a Hugging Face token",
    "sk-" + "aB3dE" * 10: "an OpenAI API key",
    "sk-proj-" + "aB3_-x" * 10: "an OpenAI API key",
    "sk-ant-api03-" + "A1b_" * 10: "an Anthropic API key",
    "WANDB_API_KEY " + "0123456789abcdef" * 2 + "01234567": "a Weights & Biases API key",
    "ghp_" + "A1b2C3d4" * 5: "a GitHub token",
    "gho_" + "A1b2C3d4" * 5: "a GitHub token",
    "ghs_" + "A1b2C3d4" * 5: "a GitHub token",
    "github_pat_" + "A1b2C3d4" * 4: "a GitHub token",
    "glpat-" + "abcdEFGH1234_-abcdEF": "a GitLab token",
    "xoxb-" + "1234567890-abcdef": "a Slack token",
    "sk_live_" + "a1B2c3D4e5F6g7H8i9J0k1L2": "a Stripe key",
    "rk_live_" + "a1B2c3D4e5F6g7H8i9J0k1L2": "a Stripe key",
    "AccountName=acct;AccountKey=" + "Ab1+" * 21 + "Ab==": "an Azure storage account key",
    '{"type": "service_account", "project_id": "p"}': "a Google Cloud service account key",
    "SG." + "a1B2" * 5 + "a1." + "b2C3" * 10 + "b2C": "a SendGrid API key",
    "AKIA" + "IOSFODNN7EXAMPLE": "an AWS access key id",
}


def command_with(token: str) -> Callable[[Path], None]:
    def setup(project: Path) -> None:
        edit(project / PIPELINE, "command: [python, -m, cs_data.clean_tickets,",
             f"command: [python, -m, cs_data.clean_tickets, {json_string(token)},")
    return setup


def json_string(text: str) -> str:
    import json

    return json.dumps(text)


def secret_name(token: str) -> Callable[[Path], None]:
    def setup(project: Path) -> None:
        edit(project / PIPELINE, "secretName: cos-credentials  #", f"secretName: {json_string(token)}  #")
    return setup


def secret_value(token: str) -> str:
    """The part of a token that must never be printed (the key, not the words around it)."""
    return max(re.split(r"[ ;=\"]", token), key=len)


ATTACKS += [
    *(Attack(f"{what}: {token[:14]}... in a command", "no-secret-echo", command_with(token),
             says=(rf"{PIPELINE}:26:\d+: error: spec.stages\[0\].command\[3\]: looks like a credential "
                   rf"\({re.escape(what)}\); fleetc never renders secrets",),
             never=(secret_value(token),))
      for token, what in TOKENS.items()),
    Attack("an hf_ token in a command is not rendered", "no-secret-echo", command_with(next(iter(TOKENS))),
           ("compile",), never=(secret_value(next(iter(TOKENS))),),
           says=(r"looks like a credential \(a Hugging Face token\)",)),
    *(Attack(f"secretName: AKIA... --format {output}", "no-secret-echo", secret_name("AKIA" + "IOSFODNN7EXAMPLE"),
             ("validate", "--format", output), never=("IOSFODNN7EXAMPLE",))
      for output in ("text", "json", "github")),
    Attack("a schema error quoting an hf_ token", "no-secret-echo", secret_name(next(iter(TOKENS))),
           says=(r"got a value that looks like a credential \(a Hugging Face token; not shown\)",),
           never=(secret_value(next(iter(TOKENS))),)),
    Attack("a usage error quoting a token", "no-secret-echo", nothing,
           ("diff", "--what-if", "drain=ghp_" + "A1b2C3d4" * 5), exit=2,
           says=(r"drain=<redacted>: no cluster '<redacted>'",), never=("A1b2C3d4",)),
]


@pytest.mark.slow
def test_an_hf_token_in_a_command_never_reaches_out(project: Path) -> None:
    """Before: the Hugging Face token was rendered into the stage's Job in out/."""
    token = next(iter(TOKENS))
    command_with(token)(project)
    result = fleetc(project, "compile")
    assert result.returncode == 1
    assert not (project / "out").exists()


# --- promise clean-terminal: no file name or value forges a workflow command --------------------

FORGED = "x\n::error title=forged::pwned\x1b[2J\x9b31m\u202e"


def forged_file(project: Path) -> None:
    (project / "policies" / f"{FORGED}.yaml").write_text("kind: Nope\n", encoding="utf-8")


def forged_key(project: Path) -> None:
    edit(project / PIPELINE, "spec:\n", f"spec:\n  {json_string(FORGED)}: 1\n")


ATTACKS += [
    *(Attack(f"a file name forging a workflow command --format {output}", "clean-terminal", forged_file,
             ("validate", "--format", output), says=(r"x\\n::error title=forged::pwned\\x1b\[2J\\x9b31m\\u202e",),
             never=("\x1b", "\x9b", "\u202e", "\n::error title=forged"))
      for output in ("text", "github")),
    Attack("a key forging a workflow command", "clean-terminal", forged_key, ("validate", "--format", "github"),
           says=(r"unknown field 'x\\n::error title=forged::pwned\\x1b\[2J",),
           never=("\x1b", "\n::error title=forged")),
    Attack("a --base ref forging a workflow command", "clean-terminal", commit_all,
           ("diff", "--base", "x\n::error title=forged::pwned\x1b[2J"), exit=2,
           says=(r"error: .*x\n\\x3a:error title=forged::pwned\\x1b\[2J: ",), never=("\x1b", "\n::error")),
]


# --- promise label-value: gpu-product and the product a GPU type implies ------------------------


def gpu_attribute(line: str) -> Callable[[Path], None]:
    def setup(project: Path) -> None:
        edit(project / FLEET, '      gpu-type: "a100"\n', f'      gpu-type: "a100"\n      {line}\n')
    return setup


ATTACKS += [
    *(Attack(f"gpu-product {value!r}", "label-value", gpu_attribute(f"gpu-product: {json_string(value)}"),
             says=(rf"{FLEET}:17:20: error: spec.clusters\[0\].attributes.gpu-product: expected the nodes' "
                   r"nvidia.com/gpu.product label: a Kubernetes label value",))
      for value in ("NVIDIA A100 40GB", "-NVIDIA", "A" * 57, "NVIDIA-A100\n", "x;$(id)")),
    Attack("a GPU type whose product label is too long", "label-value",
           lambda project: edit(project / FLEET, 'gpu-type: "t4"', f'gpu-type: "{"t" * 50}"'),
           says=(rf"{FLEET}:29:17: error: spec.clusters\[1\].attributes.gpu-type: its nodes' label "
                 r"nvidia.com/gpu.product would be 'NVIDIA-TTTT",)),
    Attack("a scenario GPU type whose product label is too long", "label-value", nothing,
           ("diff", "--what-if", f"gpus={HUAWEI}:{'h' * 50}=8"), exit=2,
           says=(r"GPU type 'hhhhhhhhhhhhhhhhhhhh'... is too long: its nodes' label nvidia.com/gpu.product would "
                 r"be 57 characters, more than 56",)),
]


# --- promise nothing-dropped: every file under a policy path is read, a note, or an error -------

BROKEN = "replicas: 6\n"  # the serving stage's; -6 is refused


def renamed(name: str, *, broken: bool = True) -> Callable[[Path], None]:
    def setup(project: Path) -> None:
        if broken:
            edit(project / PIPELINE, BROKEN, "replicas: -6\n")
        (project / PIPELINE).rename(project / "policies" / name)
    return setup


def as_json(project: Path) -> None:
    import json

    from ruamel.yaml import YAML

    data = YAML(typ="safe", pure=True).load((project / PIPELINE).read_text(encoding="utf-8"))
    data["spec"]["stages"][2]["replicas"] = -6
    (project / "policies" / "pipeline.json").write_text(json.dumps(data, indent="\t"), encoding="utf-8")
    (project / PIPELINE).unlink()


ATTACKS += [
    *(Attack(f"a pipeline in *{suffix}", "nothing-dropped", renamed(f"pipeline{suffix}"),
             says=(rf"policies/pipeline{re.escape(suffix)}:\d+:\d+: error: spec.stages\[2\].replicas",))
      for suffix in (".YAML", ".Yml", ".yml")),
    Attack("a pipeline in *.json", "nothing-dropped", as_json,
           says=(r"policies/pipeline.json:\d+:\d+: error: spec.stages\[2\].replicas",)),
    *(Attack(f"a pipeline saved as {name}", "nothing-dropped", renamed(name, broken=False),
             says=(rf"policies/{re.escape(name)}: error: not a policy file: fleetc reads \*.yaml, \*.yml and "
                   r"\*.json",))
      for name in ("pipeline.yaml.bak", "pipeline.yaml~", "pipeline", "pipeline.yaml.orig")),
    Attack("notes beside the policies are skipped", "nothing-dropped",
           write("policies/README.md", "# policies\n"), exit=0),
]


@pytest.mark.slow
def test_a_pipeline_in_yaml_upper_case_at_the_base_is_read(project: Path) -> None:
    """Before: the revision's walk skipped pipeline.YAML as the working tree's did."""
    renamed("pipeline.YAML")(project)
    commit_all(project)
    (project / "policies" / "pipeline.YAML").unlink()
    result = fleetc(project, "diff", "--base", "HEAD")
    assert result.returncode == 1
    assert "error: the policies at HEAD do not compile:" in result.stderr
    assert re.search(r"policies/pipeline.YAML:\d+:\d+: error: spec.stages\[2\].replicas", result.stderr)


# --- promise no-exit-3: a Kueue GPU type named default, names one once cut ---------------------

KUEUE = ROOT / "tests" / "cases" / "kueue-two-cluster-pipeline" / "policies"


def kueue_default(project: Path) -> None:
    shutil.rmtree(project / "policies")
    shutil.copytree(KUEUE, project / "policies")
    edit(project / "policies" / "fleet.yaml", "gpu-type: a100", "gpu-type: default")
    text = (project / "policies" / "pipeline.yaml").read_text(encoding="utf-8")
    (project / "policies" / "pipeline.yaml").write_text(text.replace("gpuType: a100", "gpuType: default"),
                                                         encoding="utf-8")


def cut_to_one_name(project: Path) -> None:
    """Two serving stages: one named so that its objects' name is cut to 63 characters (54 and
    a hash), the other named exactly as the cut name."""
    from fleetc.render.common import shorten

    pipeline, first = "p" * 40, "s" * 40
    second = shorten(f"{pipeline}-{first}")[len(pipeline) + 1:]
    stages = "".join(f"""  - name: {name}
    type: Deployment
    resources: {{cpu: 1, memory: 1Gi}}
    image: registry.example.com/x:1
    command: [run]
""" for name in (first, second))
    (project / "policies" / "clash.yaml").write_text(f"""apiVersion: aigc.kurator.dev/v1alpha1
kind: AIGCPipeline
metadata:
  name: {pipeline}
  namespace: clash
spec:
  stages:
{stages}""", encoding="utf-8")


ATTACKS += [
    Attack("a Kueue GPU type named default", "no-exit-3", kueue_default, ("compile",),
           says=(r"policies/fleet.yaml:14:17: error: spec.clusters\[0\].attributes.gpu-type: GPU type 'default' is "
                 r"reserved: its Kueue ResourceFlavor would be fleetc-default",)),
    Attack("a what-if GPU type named default", "no-exit-3", nothing,
           ("diff", "--what-if", f"gpus={HUAWEI}:default=8"), exit=2, says=(r"'default' is not a GPU type",)),
    Attack("two stages whose names are one once cut", "no-exit-3", cut_to_one_name, ("compile",),
           says=(r"policies/clash.yaml:8:5: error: spec.stages\[0\]: renders Deployment 'p{40}-s{13}-[0-9a-f]{8}' "
                 r"in namespace 'clash', as clash.yaml#spec.stages\[1\] does: their names are one once cut",
                 r"policies/clash.yaml:13:5: error: spec.stages\[1\]: renders Deployment")),
]


# --- the table, run (below every row) -----------------------------------------------------------


def test_every_attack_names_a_known_promise() -> None:
    assert {a.promise for a in ATTACKS} <= set(PROMISES)
    assert len({a.name for a in ATTACKS}) == len(ATTACKS)


def tiered(attacks: list[Attack]) -> list[object]:
    """Each attack as a test case: the first of each promise in the fast tier, the others marked
    slow (each runs the real program, about 0.6 s: the 79 rows were a sixth of the fast tier's
    time). The whole suite, which CI runs, runs them all."""
    seen: set[str] = set()
    cases: list[object] = []
    for attack in attacks:
        cases.append(pytest.param(attack, id=attack.name, marks=pytest.mark.slow if attack.promise in seen else ()))
        seen.add(attack.promise)
    return cases


@pytest.mark.parametrize("attack", tiered(ATTACKS))
def test_attack(attack: Attack, project: Path) -> None:
    attack.setup(project)
    result = fleetc(project, *attack.args)
    assert result.returncode == attack.exit, result.stderr
    for pattern in attack.says:
        assert re.search(pattern, result.stderr), f"{pattern!r} not in:\n{result.stderr}"
    for text in attack.never:
        assert text not in result.stdout + result.stderr, result.stdout + result.stderr


# --- promise no-exit-3: a link in out/ to /proc/self/pagemap, outside --check -------------------
# (compile --check on links in out/ is the "integrity" owner's; these hold every other reader)


@pytest.mark.parametrize("link", ["placement.yaml", "clusters/edge-cluster-factory/infra/evil.yaml",
                                  ".fleetc/files", ".fleetc/render"])
@pytest.mark.parametrize("command", [("compile",), ("diff", "--what-if", "drain=edge-cluster-factory"),
                                     ("explain", "llm-chinese-training/data-preparation")])
@pytest.mark.slow
def test_a_link_in_out_to_pagemap_is_no_internal_error(project: Path, link: str, command: tuple[str, ...]) -> None:
    fleetc(project, "compile")
    path = project / "out" / link
    path.unlink(missing_ok=True)
    path.symlink_to("/proc/self/pagemap")
    assert fleetc(project, *command).returncode in (0, 1, 2)


@pytest.mark.slow
@pytest.mark.parametrize("command", [("compile", "--check"), ("diff", "--what-if", "drain=edge-cluster-factory"),
                                     ("explain", "llm-chinese-training/data-preparation"), ("validate",)])
def test_a_placement_linked_to_pagemap_is_named_never_an_errno(project: Path, command: tuple[str, ...]) -> None:
    """The previous placement.yaml a link to /proc/self/pagemap: every front door names it in
    words ('[Errno 22] Invalid argument' was all explain said); explain, which needs it, exits 1."""
    fleetc(project, "compile")
    path = project / "out" / "placement.yaml"
    path.unlink()
    path.symlink_to("/proc/self/pagemap")
    result = fleetc(project, *command)
    assert "Errno" not in result.stderr, result.stderr
    if command[0] == "explain":
        assert result.returncode == 1
        assert result.stderr == ("error: cannot explain: out/placement.yaml: ignored as the previous placement: "
                                 "a symlink or other special file (fleetc writes it as a regular file)\n")


@pytest.mark.slow
def test_a_policy_named_pagemap_is_a_read_error(project: Path) -> None:
    result = fleetc(project, "validate", "/proc/self/pagemap")
    assert result.returncode == 1
    assert "/proc/self/pagemap: error: cannot read file" in result.stderr
