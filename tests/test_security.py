"""Security: no network at run time, no secrets in policies or output, no path escapes out/."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from support.yamlread import read_all

from fleetc.cli import cli
from fleetc.compiler import compile_policies, load_policies
from fleetc.policy.kinds import DNS_LABEL_PATTERN
from fleetc.render.record import RENDER_RECORD

ROOT = Path(__file__).resolve().parents[1]
HINT = "\n  hint: store it in a Kubernetes Secret and reference the Secret by name\n"

PIPELINE = """\
apiVersion: aigc.kurator.dev/v1alpha1
kind: AIGCPipeline
metadata:
  name: p
  annotations:
    {key}: {value}
spec:
  stages:
  - name: prep
    type: DataProc
    inputs:
    - name: raw
      source: {source}
"""


#: Policies are valid together with their Fleet: the lone pipelines here are validated with it.
SEED_FLEET = Path(__file__).parent / "seed" / "aigc-fleet.yaml"


def validate_pipeline(tmp_path: Path, *, key: str = "team", value: str = "ml",
                      source: str = "s3://bucket/raw/") -> tuple[int, str]:
    policy = tmp_path / "p.yaml"
    policy.write_text(PIPELINE.format(key=key, value=value, source=source))
    result = CliRunner().invoke(cli, ["validate", str(SEED_FLEET), str(policy)])
    return result.exit_code, result.stderr.replace(policy.as_posix(), "p.yaml")


# --- credentials are refused ---------------------------------------------------------------------

AWS_KEY = "AKIA" + "IOSFODNN7EXAMPLE"  # split so scanners of this repo do not flag the test
GITHUB_TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


@pytest.mark.parametrize(("key", "value", "what"), [
    ("aws", AWS_KEY, "an AWS access key id"),
    ("key", '"-----BEGIN OPENSSH PRIVATE KEY-----"', "a private key"),
    ("key", '"-----BEGIN RSA PRIVATE KEY----- MIIEow"', "a private key"),
    ("ci", GITHUB_TOKEN, "a GitHub token"),
    ("apiKey", "9fA8b7C6d5E4f3G2h1J0", "a random-looking value under 'apiKey'"),
    ("db-password", "Tr0ub4dor-and-3-more", "a random-looking value under 'db-password'"),
    ("token", "a3f9c2e1b7d04f6a8c5e9d2b", "a random-looking value under 'token'"),
])
def test_a_credential_in_a_free_form_map_is_refused(tmp_path: Path, key: str, value: str,
                                                    what: str) -> None:
    code, stderr = validate_pipeline(tmp_path, key=key, value=value)
    assert code == 1
    assert stderr == (f"p.yaml:6:{7 + len(key)}: error: metadata.annotations.{key}: looks like a "
                      f"credential ({what}); fleetc never renders secrets{HINT}"
                      "1 error in 1 file\n")


@pytest.mark.parametrize(("source", "what"), [
    ("s3://admin:hunter2@bucket/raw/", "a URL with a password"),
    ("https://data.example.com/raw?token=abc123", "a secret in a URL query"),
    ("https://data.example.com/raw?x=1&password=abc", "a secret in a URL query"),
    ("https://data.example.com/raw?X-Api-Key=abc", "a secret in a URL query"),
])
def test_a_credential_in_a_storage_url_is_refused(tmp_path: Path, source: str, what: str) -> None:
    code, stderr = validate_pipeline(tmp_path, source=source)
    assert code == 1
    assert stderr == (f"p.yaml:13:15: error: spec.stages[0].inputs[0].source: looks like a "
                      f"credential ({what}); fleetc never renders secrets{HINT}"
                      "1 error in 1 file\n")


AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
JWT = "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"


@pytest.mark.parametrize(("value", "what"), [
    ("redis://:hunter2@cache.internal:6379/0", "a URL with a password"),
    ("ci_" + AWS_KEY, "an AWS access key id"),
    ("MY_" + AWS_KEY + "_X", "an AWS access key id"),
    ("AWS_SECRET_ACCESS_KEY " + AWS_SECRET, "an AWS secret access key"),
    ("aws_secret_access_key: " + AWS_SECRET, "an AWS secret access key"),
    ("https://acct.blob.core.windows.net/data?sv=2022-11-02&sig=Zx9%2Bq1w2e3r4t5y6u7i8o9p0aZ%3D",
     "a secret in a URL query"),
    ("Bearer " + JWT, "a bearer token"),
    ("Authorization: bearer abcdefghij0123456789KLMNOP", "a bearer token"),
    ("jwt " + JWT, "a JSON Web Token"),
    ("https://maps.googleapis.com/api?key=AIza" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY", "a secret in a URL query"),
    ("AIza" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY", "a Google API key"),
    ("https://hooks.slack.com/services/" + "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX", "a Slack webhook URL"),
])
def test_every_credential_shape_in_a_value_is_refused(tmp_path: Path, value: str, what: str) -> None:
    code, stderr = validate_pipeline(tmp_path, key="note", value=f'"{value}"')
    assert code == 1
    assert stderr == (f"p.yaml:6:11: error: metadata.annotations.note: looks like a credential "
                      f"({what}); fleetc never renders secrets{HINT}1 error in 1 file\n")


@pytest.mark.parametrize(("words", "what"), [
    (["train.py", "--password=hunter2"], "a secret in an option or variable"),
    (["train.py", "DB_PASSWORD=hunter2"], "a secret in an option or variable"),
    (["train.py", "--api-key=0123abcd"], "a secret in an option or variable"),
    (["sh", "export AWS_SECRET_ACCESS_KEY=" + AWS_SECRET + " && train"], "an AWS secret access key"),
])
def test_a_credential_in_a_command_is_refused(tmp_path: Path, words: list[str], what: str) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(PIPELINE.format(key="team", value="ml", source="s3://bucket/raw/")
                      + "    command:\n" + "".join(f'    - "{word}"\n' for word in words))
    result = CliRunner().invoke(cli, ["validate", str(policy)])
    assert result.exit_code == 1
    assert result.stderr.replace(policy.as_posix(), "p.yaml") == (
        f"p.yaml:16:7: error: spec.stages[0].command[1]: looks like a credential ({what}); fleetc "
        f"never renders secrets{HINT}1 error in 1 file\n")


@pytest.mark.parametrize("argument", [
    "--password=$(DB_PASSWORD)", "--password-file=/var/run/secrets/db", "--token=${TOKEN}",
    "the password is kept in the db-credentials Secret", "--config=/etc/app/config.yaml",
])
def test_passing_a_secret_by_reference_in_a_command_is_accepted(tmp_path: Path, argument: str) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(PIPELINE.format(key="description", value='"rotate the password monthly"',
                                      source="https://user@data.example.com/raw/")
                      + f'    command: ["serve", "{argument}"]\n')
    result = CliRunner().invoke(cli, ["validate", str(SEED_FLEET), str(policy)])
    assert (result.exit_code, result.stderr) == (0, "")


@pytest.mark.parametrize(("key", "value", "source"), [
    ("secretName", "registry-credentials-2024", "s3://bucket/raw/"),  # a reference by name
    ("tokenSecretRef", "a3f9c2e1b7d04f6a8c5e9d2b", "s3://bucket/raw/"),  # also a reference
    ("password-policy", "rotate every 90 days", "s3://bucket/raw/"),  # words, not a secret
    ("token", "gpu-cluster-huawei", "s3://bucket/raw/"),  # a name: one character class
    ("commit", "a3f9c2e1b7d04f6a8c5e9d2b", "s3://bucket/raw/"),  # random, but not a secret key
    ("team", "ml", "https://user@data.example.com/raw?page=2"),  # a user but no password
    ("team", "ml", "cos://my-bucket/raw-data/2024-01-01T00:00:00"),
])
def test_values_that_only_resemble_credentials_are_accepted(tmp_path: Path, key: str, value: str,
                                                            source: str) -> None:
    assert validate_pipeline(tmp_path, key=key, value=f'"{value}"', source=source) == (0, "")


def test_the_bundled_example_and_the_seed_have_no_credentials() -> None:
    result = CliRunner().invoke(cli, ["validate", str(ROOT / "policies"), str(ROOT / "tests/seed")])
    assert "credential" not in result.output


# --- no Secret is rendered -----------------------------------------------------------------------


def test_no_secret_object_is_ever_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    compiled = compile_policies(load_policies(["policies"]))
    kinds = {doc.get("kind") for text in compiled.files.values() for doc in read_all(text)
             if isinstance(doc, dict)}
    assert "Deployment" in kinds  # the check reads real objects
    assert "Secret" not in kinds


# --- paths under out/ come only from validated names ------------------------------------------

#: Valid names that YAML reads as strings when unquoted (the policies do not quote names).
DNS_LABEL = st.from_regex(r"[a-z]([a-z0-9-]{0,14}[a-z0-9])?", fullmatch=True).filter(
    lambda name: name not in {"true", "false", "null", "yes", "no", "on", "off", "y", "n"})
RENAMED = ["gpu-cluster-huawei", "inference-cluster-aliyun", "edge-cluster-factory",
           "llm-chinese-training", "aigc-prod", "model-training", "model-deployment"]


@pytest.mark.slow
@settings(max_examples=12, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(names=st.lists(DNS_LABEL, min_size=len(RENAMED), max_size=len(RENAMED), unique=True))
def test_output_paths_stay_inside_out_for_any_valid_names(tmp_path: Path, names: list[str]) -> None:
    policies = tmp_path / "policies"
    shutil.rmtree(policies, ignore_errors=True)
    policies.mkdir()
    tokens = {old: f"\0{i}\0" for i, old in enumerate(RENAMED)}  # two steps: no chained renames
    for source in sorted((ROOT / "policies").glob("*.yaml")):
        text = source.read_text()
        for old, token in tokens.items():
            text = re.sub(rf"(?<![a-z0-9-]){re.escape(old)}(?![a-z0-9-])", token, text)
        for (_old, token), new in zip(tokens.items(), names, strict=True):
            text = text.replace(token, new)
        (policies / source.name).write_text(text)
    compiled = compile_policies(load_policies([str(policies)]))
    clusters = set(names[:3])
    for rel in compiled.files:
        path = PurePosixPath(rel)
        assert not path.is_absolute() and ".." not in path.parts, rel
        if rel == RENDER_RECORD:  # fleetc's own record, the one name it chooses
            continue
        assert all(re.fullmatch(r"[a-z0-9][a-z0-9.-]*", part) for part in path.parts), rel
        if path.parts[0] == "clusters":
            assert path.parts[1] in clusters, rel


def test_names_that_could_escape_out_are_refused_before_rendering(tmp_path: Path) -> None:
    assert re.fullmatch(DNS_LABEL_PATTERN.strip("^$"), "../etc") is None
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies)
    fleet = policies / "fleet.yaml"
    fleet.write_text(fleet.read_text().replace("- name: edge-cluster-factory", "- name: ../../x"))
    result = CliRunner().invoke(cli, ["compile", str(policies), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert "spec.clusters[2].name: expected a DNS-1123 label" in result.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "x").exists()


# --- nothing reaches the network -------------------------------------------------------------


def test_the_suite_refuses_connections(no_network: list[str]) -> None:
    with pytest.raises(OSError, match="network access during tests"):
        socket.create_connection(("192.0.2.1", 443), timeout=1)
    with socket.socket() as sock, pytest.raises(OSError, match="network access during tests"):
        sock.connect(("192.0.2.1", 443))
    assert len(no_network) == 2
    no_network.clear()  # the attempts above were this test's own


BLOCK_SOCKETS = """\
import socket, sys

def _refuse(*args, **kwargs):
    sys.stderr.write("NETWORK ATTEMPT: %r\\n" % (args[1:],))
    raise OSError("network disabled for this process")

socket.socket.connect = _refuse
socket.socket.connect_ex = _refuse
socket.create_connection = _refuse
"""


@pytest.mark.slow
def test_a_compile_process_never_connects(tmp_path: Path) -> None:
    """``python -m fleetc compile`` with sockets refused by a ``sitecustomize`` module."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCK_SOCKETS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(site), os.environ.get("PYTHONPATH", "")]))}
    check = subprocess.run([sys.executable, "-c", "import socket; socket.create_connection(('x', 1))"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert "NETWORK ATTEMPT" in check.stderr  # the guard is active in child processes
    result = subprocess.run(
        [sys.executable, "-m", "fleetc", "compile", str(ROOT / "policies"), "--out",
         str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "NETWORK ATTEMPT" not in result.stderr


@pytest.mark.slow
def test_a_compile_runs_without_any_network_namespace(tmp_path: Path) -> None:
    """The same compile in a network namespace with no interfaces (``unshare -n``)."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-n", "true"], capture_output=True).returncode:
        pytest.skip("unshare -n is not available here (needs Linux and privileges)")
    result = subprocess.run(
        [unshare, "-n", sys.executable, "-m", "fleetc", "compile", str(ROOT / "policies"),
         "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "placement.yaml").is_file()


# --- issue 27: every common token format is recognised, and no message echoes one ----------------

_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _text(alphabet: str, size: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=alphabet, min_size=size, max_size=size)


#: One strategy per token format an AI platform's pipeline is likely to hold (issue 27, promise
#: 5), as its issuer documents it: a kind the patterns must name, and (token, its secret part).
TOKEN_FORMATS: dict[str, tuple[str, st.SearchStrategy[tuple[str, str]]]] = {
    "huggingface": ("a Hugging Face token", _text(_ALNUM, 34).map(lambda s: ("hf_" + s, s))),
    "openai": ("an OpenAI API key", st.one_of(
        _text(_ALNUM, 48).map(lambda s: ("sk-" + s, s)),
        _text(_ALNUM + "_-", 64).map(lambda s: ("sk-proj-" + s, s)))),
    "anthropic": ("an Anthropic API key", _text(_ALNUM + "_-", 95).map(lambda s: ("sk-ant-api03-" + s, s))),
    "wandb": ("a Weights & Biases API key", _text("0123456789abcdef", 40).map(lambda s: ("wandb login " + s, s))),
    "github": ("a GitHub token", st.tuples(st.sampled_from(["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]),
                                           _text(_ALNUM, 36)).map(lambda t: (t[0] + t[1], t[1]))),
    "github-fine-grained": ("a GitHub token", _text(_ALNUM + "_", 82).map(lambda s: ("github_pat_" + s, s))),
    "gitlab": ("a GitLab token", _text(_ALNUM + "_-", 20).map(lambda s: ("glpat-" + s, s))),
    "slack": ("a Slack token", st.tuples(st.sampled_from(["xoxb-", "xoxp-", "xapp-"]), _text(_ALNUM, 40))
              .map(lambda t: (t[0] + "1234567890-" + t[1], t[1]))),
    "stripe": ("a Stripe key", st.tuples(st.sampled_from(["sk_live_", "rk_live_", "sk_test_"]), _text(_ALNUM, 24))
               .map(lambda t: (t[0] + t[1], t[1]))),
    "azure": ("an Azure storage account key",
              _text(_ALNUM + "+/", 86).map(lambda s: (f"DefaultEndpointsProtocol=https;AccountKey={s}==", s))),
    "gcp-service-account": ("a Google Cloud service account key", _text(_ALNUM + "+/", 64).map(lambda s: (
        '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----' + s + '-----END PRIVATE KEY-----"}',
        s))),
    "aws": ("an AWS access key id", _text("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16).map(lambda s: ("AKIA" + s, s))),
    "sendgrid": ("a SendGrid API key", st.tuples(_text(_ALNUM, 22), _text(_ALNUM, 43))
                 .map(lambda t: (f"SG.{t[0]}.{t[1]}", t[1]))),
}


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(sorted(TOKEN_FORMATS)), before=st.sampled_from(["", "x ", "--t "]))
def test_every_common_token_format_is_recognised_and_redacted(data: st.DataObject, name: str, before: str) -> None:
    from fleetc.credentials import CREDENTIAL_PATTERNS, looks_like, redact

    what, tokens = TOKEN_FORMATS[name]
    token, secret = data.draw(tokens)
    assert looks_like(before + token), token
    assert any(pattern.search(token) for kind, pattern in CREDENTIAL_PATTERNS if kind == what), token
    assert secret not in redact(f"error: got {before}{token} here")


#: Where a token can sit in a policy, and the message each placement gives: a value the credential
#: check refuses; a value of the wrong type (a schema error quoting it); a Secret's name (a schema
#: error of its pattern); an annotation.
PLACEMENTS = {
    "command": "    command: [train, {token}]\n",
    "replicas": "    replicas: {token}\n",
    "secretName": "    outputs:\n    - name: out\n      storage: s3://bucket/out/\n      secretName: {token}\n",
    "image": "    image: {token}\n",
}


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data(), name=st.sampled_from(sorted(TOKEN_FORMATS)), placement=st.sampled_from(sorted(PLACEMENTS)),
       output=st.sampled_from(["text", "json", "github"]))
def test_a_suspected_credential_is_never_echoed_by_any_message(tmp_path: Path, data: st.DataObject, name: str,
                                                              placement: str, output: str) -> None:
    """A token of every format, in a field whose error would quote the value, under every
    output format: refused (exit 1), and its secret part printed nowhere."""
    _, tokens = TOKEN_FORMATS[name]
    token, secret = data.draw(tokens)
    policy = tmp_path / "p.yaml"
    quoted = '"' + token.replace("\\", "\\\\").replace('"', '\\"') + '"'
    policy.write_text(PIPELINE.format(key="team", value="ml", source="s3://bucket/raw/")
                      + PLACEMENTS[placement].format(token=quoted))
    result = CliRunner().invoke(cli, ["validate", "--format", output, str(SEED_FLEET), str(policy)])
    assert result.exit_code == 1, result.output
    assert secret not in result.stdout + result.stderr
