"""Whatever text a policy file holds, fleetc answers with a report and exit 0 or 1, never a
traceback (hypothesis mutates the bundled policies)."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetc.cli import cli

ROOT = Path(__file__).resolve().parents[1]
POLICIES = sorted((ROOT / "policies").glob("*.yaml"))
TOKENS = ["", " ", "\t", ":", "- ", "{", "}", "[", "]", "&a ", "*a", "!!binary ", "!x ", "'",
          '"', "#", "---\n", "\n", "null", "-1", "1e400", ".nan", "0x10", "yes", "~", "??",
          "\x00", "\ufeff", "é", "../", "<<: ", "64Gi", "sixty", "100%"]


@st.composite
def mutated_text(draw: st.DrawFn) -> tuple[str, str]:
    """One bundled policy file with a few random splices, deletions and line swaps."""
    path = draw(st.sampled_from(POLICIES))
    text = path.read_text(encoding="utf-8")
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["insert", "delete", "swap-lines"]))
        if action == "insert":
            text = text[:at] + draw(st.sampled_from(TOKENS) | st.text(max_size=6)) + text[at:]
        elif action == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 30)):]
        else:
            lines = text.splitlines(keepends=True)
            i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            text = "".join(lines)
    return path.name, text


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_text())
def test_validate_never_crashes(workdir: Path, mutation: tuple[str, str]) -> None:
    policies = workdir / "policies"
    shutil.rmtree(policies, ignore_errors=True)
    shutil.copytree(ROOT / "policies", policies)
    name, text = mutation
    (policies / name).write_text(text, encoding="utf-8", errors="surrogatepass")
    result = CliRunner().invoke(cli, ["validate", str(policies)])
    assert result.exit_code in (0, 1), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    if result.exit_code == 1:
        assert result.stderr.strip(), "an error exit must say why"


# --- compile fuzz: mutate parsed values, then compile ----------------------------------------

NUMBERS = [0, 1, 2, 3, 7, -1, -0.5, 0.5, 10**6, 10**12, 10**30, 1e308]
STRINGS = ["", "x", "a100", "t4", "0", "-1", "64Gi", "1e3", "100%", "0.5", "true", "../x",
           "gpu-cluster-huawei", "inference-cluster-aliyun", "edge-cluster-factory",
           "model-training", "data-preparation", "NoSchedule", "high-performance"]


def _load_bundled() -> dict[str, list[object]]:
    from fleetc.policy.load import load_files

    loaded = load_files(POLICIES)
    assert not loaded.diagnostics
    by_file: dict[str, list[object]] = {}
    for doc in loaded.documents:
        by_file.setdefault(Path(doc.path).name, []).append(doc.data)
    return by_file


BUNDLED = _load_bundled()


def _paths(data: object, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    found = [path]
    if isinstance(data, dict):
        for key, value in data.items():
            found += _paths(value, path + (key,))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            found += _paths(value, path + (i,))
    return found


def _get(data: object, path: tuple[str | int, ...]) -> object:
    for part in path:
        data = data[part]  # type: ignore[index]
    return data


def _is_number(value: object) -> bool:
    """An int or float (not a bool), or a string of digits (like Fleet's ``gpu-count``)."""
    if isinstance(value, str):
        return value.isdigit()
    return isinstance(value, int | float) and not isinstance(value, bool)


@st.composite
def mutated_policies(draw: st.DrawFn) -> dict[str, list[object]]:
    """The bundled policies with 1-3 value-level mutations: numbers and strings replaced, keys
    deleted, list items duplicated, booleans flipped."""
    files = copy.deepcopy(BUNDLED)
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(sorted(files)))
        doc = files[name][0]
        paths = _paths(doc)[1:]
        numeric = [q for q in paths if _is_number(_get(doc, q))]
        # Half the mutations change a number: those mostly keep the policies valid, so the
        # solver and the verifier see many different fleets, not only the validator.
        path = draw(st.sampled_from(numeric if numeric and draw(st.booleans()) else paths))
        parent, last = _get(doc, path[:-1]), path[-1]
        value = parent[last]  # type: ignore[index]
        action = draw(st.sampled_from(["replace", "delete", "duplicate"]))
        if action == "delete":
            del parent[last]  # type: ignore[attr-defined]
        elif action == "duplicate" and isinstance(parent, list):
            parent.insert(last, copy.deepcopy(value))  # type: ignore[arg-type]
        elif isinstance(value, bool):
            parent[last] = not value  # type: ignore[index]
        elif _is_number(value):
            number = draw(st.integers(1, 64) | st.sampled_from(NUMBERS))
            parent[last] = str(number) if isinstance(value, str) else number  # type: ignore[index]
        elif isinstance(value, str):
            parent[last] = draw(st.sampled_from(STRINGS) | st.text(max_size=8))  # type: ignore[index]
        elif isinstance(value, list) and value:
            value.append(copy.deepcopy(value[0]))
    return files


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_policies())
def test_compile_never_crashes_and_every_placement_verifies(
        workdir: Path, files: dict[str, list[object]]) -> None:
    from ruamel.yaml import YAML

    from fleetc.compiler import Options, compile_policies, load_policies
    from fleetc.errors import FleetcError, InternalError
    from fleetc.placement.verify import verify

    policies = workdir / "compile-policies"
    shutil.rmtree(policies, ignore_errors=True)
    policies.mkdir()
    yaml = YAML(typ="safe", pure=True)
    for name, docs in files.items():
        with (policies / name).open("w", encoding="utf-8") as stream:
            yaml.dump_all(docs, stream)
    try:
        compiled = compile_policies(load_policies([str(policies)]), Options(time_limit=30))
    except InternalError as err:  # fleetc broke its own guarantee: a bug, whatever the input
        pytest.fail(f"internal error: {err}")
    except FleetcError as err:
        assert err.exit_code == 1 and str(err).strip(), "an error must say why"
        return
    assert verify(compiled.model, compiled.placement) == []
    assert all(".." not in Path(rel).parts and not Path(rel).is_absolute() for rel in compiled.files)
