"""The compiler's front door: the inputs digest, and giving a previous placement back when it
was compiled from the same inputs (a compile is a fixed point, so ``--check`` passes after it)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fleetc.cli import cli
from fleetc.compiler import Loaded, Options, compile_policies, inputs_digest, load_policy_sources
from fleetc.errors import PlacementError
from fleetc.placement import optimize
from fleetc.placement.previous import parse_previous

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is a folder of the repository, not an installed package
    sys.path.insert(0, str(ROOT))

from bench.generate import Spec, generate  # noqa: E402

#: A fleet the large path places (more pairs than the exact MILP takes), small enough for CI.
SPEC = Spec(clusters=30, stages=600, load=0.95, seed=4)


def loaded_of(files: dict[str, str]) -> Loaded:
    return load_policy_sources([(path, text.encode()) for path, text in sorted(files.items())], "bench")


@pytest.fixture(scope="module")
def files() -> dict[str, str]:
    return generate(SPEC).files


def recompile(loaded: Loaded, before: dict[str, str]) -> dict[str, str]:
    return dict(compile_policies(loaded, Options(previous=parse_previous(before["placement.yaml"]))).files)


def test_the_digest_depends_on_the_policies_and_the_drain_not_on_file_names(files: dict[str, str]) -> None:
    loaded = loaded_of(files)
    renamed = loaded_of({f"elsewhere/{i}-{path.rsplit('/', 1)[-1]}": text
                         for i, (path, text) in enumerate(reversed(sorted(files.items())))})
    digest = inputs_digest(loaded.policies, Options())
    assert digest.startswith("sha256:") and len(digest) == len("sha256:") + 64
    assert inputs_digest(renamed.policies, Options()) == digest
    assert inputs_digest(loaded.policies, Options(drain=("cluster-000",))) != digest
    fleet = next(path for path in files if "fleet" in path)
    changed = loaded_of({**files, fleet: files[fleet].replace("utilization: 0.", "utilization: 0.0", 1)})
    assert inputs_digest(changed.policies, Options()) != digest


@pytest.mark.slow
def test_the_digest_does_not_depend_on_the_order_of_the_fleets_clusters(files: dict[str, str]) -> None:
    """The optimizer sorts clusters by name, so their order in the Fleet places nothing
    differently: reordering them keeps the digest (and the placement given back, the same
    placement compiled anew); a cluster changed still changes it (failed before: the Fleet's
    data was hashed in list order)."""
    import yaml

    fleet = next(path for path in files if "fleet" in path)
    data = yaml.safe_load(files[fleet])
    data["spec"]["clusters"].reverse()
    reordered = loaded_of({**files, fleet: yaml.safe_dump(data, sort_keys=False)})
    loaded = loaded_of(files)
    assert inputs_digest(reordered.policies, Options()) == inputs_digest(loaded.policies, Options())
    assert compile_policies(reordered, Options()).files["placement.yaml"] == \
        compile_policies(loaded, Options()).files["placement.yaml"]
    data["spec"]["clusters"][0]["cordoned"] = True
    moved = loaded_of({**files, fleet: yaml.safe_dump(data, sort_keys=False)})
    assert inputs_digest(moved.policies, Options()) != inputs_digest(loaded.policies, Options())


def test_the_digest_holds_the_large_path_threshold_when_it_is_not_the_default(files: dict[str, str]) -> None:
    """Another FLEETC_LARGE sends components down the other path, which places differently: a
    placement compiled under it is not given back to, nor passes --check for, a compile without."""
    from fleetc.placement import LARGE

    policies = loaded_of(files).policies
    digest = inputs_digest(policies, Options())
    assert inputs_digest(policies, Options(large=LARGE)) == digest
    assert len({digest, inputs_digest(policies, Options(large=0)), inputs_digest(policies, Options(large=10**9))}) == 3


def test_the_digest_changes_with_the_placement_version(files: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetc import compiler

    policies = loaded_of(files).policies
    before = inputs_digest(policies, Options())
    monkeypatch.setattr(compiler, "PLACEMENT_VERSION", "a new optimizer")
    assert inputs_digest(policies, Options()) != before


@pytest.mark.slow
def test_compiling_again_from_the_same_inputs_gives_the_same_bytes_without_solving(
    files: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = loaded_of(files)
    first = dict(compile_policies(loaded).files)
    assert parse_previous(first["placement.yaml"]).method == "colgen-lp-round"

    def no_solver(*args: object, **kwargs: object) -> None:
        raise AssertionError("the solver ran")

    monkeypatch.setattr(optimize, "place", no_solver)
    assert recompile(loaded, first) == first


@pytest.mark.slow
def test_a_previous_placement_from_other_inputs_is_only_a_starting_point(files: dict[str, str]) -> None:
    loaded = loaded_of(files)
    first = dict(compile_policies(loaded).files)
    other = {**first, "placement.yaml": first["placement.yaml"].replace("inputs: sha256:", "inputs: sha256:0", 1)}
    again = recompile(loaded, other)
    assert parse_previous(again["placement.yaml"]).inputs == parse_previous(first["placement.yaml"]).inputs
    assert recompile(loaded, again) == again  # and what that solve gives is a fixed point


@pytest.mark.slow
def test_a_previous_placement_that_breaks_a_rule_is_solved_again(
    files: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = loaded_of(files)
    first = dict(compile_policies(loaded).files)
    previous = parse_previous(first["placement.yaml"])
    stage, clusters = next(iter(previous.clusters.items()))
    tampered = dataclasses.replace(previous, clusters={**previous.clusters,
                                                       stage: {name: n + 1000 for name, n in clusters.items()}})
    solved, place = [], optimize.place

    def counted(*args: object, **kwargs: object) -> object:
        solved.append(True)
        return place(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(optimize, "place", counted)
    compiled = compile_policies(loaded, Options(previous=tampered))
    assert solved  # the solver ran (place may call itself once on a reordered model)
    assert sum(a.replicas for a in compiled.placement.of(stage).assignments) < 1000


@pytest.mark.slow
def test_check_passes_right_after_a_compile_of_a_large_fleet(
    files: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    generate(SPEC).write(tmp_path / "policies")
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    compiled = runner.invoke(cli, ["compile", "policies"])
    assert compiled.exit_code == 0, compiled.output
    for _ in range(2):
        checked = runner.invoke(cli, ["compile", "policies", "--check"])
        assert checked.exit_code == 0, checked.output


def test_a_placement_that_leaves_stages_out_is_given_back_only_with_allow_unplaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loaded = loaded_of(generate(Spec(clusters=5, stages=60, load=1.4)).files)  # over-full
    first = compile_policies(loaded, Options(allow_unplaced=True))
    left_out = [p for p in first.placement.stages if not p.assignments]
    assert left_out and all(p.reason for p in left_out)
    previous = parse_previous(first.files["placement.yaml"])
    solved, place = [], optimize.place

    def counted(*args: object, **kwargs: object) -> object:
        solved.append(True)
        return place(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(optimize, "place", counted)
    again = compile_policies(loaded, Options(previous=previous, allow_unplaced=True))
    assert not solved and dict(again.files) == dict(first.files)
    assert [p.reason for p in again.placement.stages] == [p.reason for p in first.placement.stages]
    with pytest.raises(PlacementError):  # without --allow-unplaced the solver runs, and says why
        compile_policies(loaded, Options(previous=previous))
    assert solved


def test_a_placement_the_time_limit_cut_short_is_searched_again_unless_the_limit_is_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loaded = loaded_of(generate(Spec(clusters=5, stages=25, seed=2)).files)
    monkeypatch.setattr(optimize, "_ran_out", lambda deadline: deadline is not None)  # every limit runs out
    solves, place = [], optimize.place

    def counted(*args: object, **kwargs: object) -> object:
        """``place`` may call itself on a reordered model: calls, not solves, are counted."""
        solves.append(True)
        return place(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(optimize, "place", counted)
    limited = compile_policies(loaded, Options(time_limit=30))
    assert limited.placement.time_limit == 30
    previous = parse_previous(limited.files["placement.yaml"])
    assert previous.time_limit == 30  # placement.yaml says so: timeLimitReached

    solved = len(solves)
    same = compile_policies(loaded, Options(previous=previous, time_limit=30))
    assert len(solves) == solved and dict(same.files) == dict(limited.files)  # given back, not solved

    unlimited = compile_policies(loaded, Options(previous=previous))
    assert len(solves) > solved  # searched again: more time may place better
    solved = len(solves)
    assert unlimited.placement.time_limit is None
    assert "timeLimitReached" not in unlimited.files["placement.yaml"]
    again = compile_policies(loaded, Options(previous=parse_previous(unlimited.files["placement.yaml"]),
                                             time_limit=60))
    assert len(solves) == solved  # a limit that never ran out gives a fixed point to every compile
    assert dict(again.files) == dict(unlimited.files)


@pytest.mark.slow
def test_a_compile_the_large_path_places_never_imports_cvxpy() -> None:
    """The default solver is checked without cvxpy (about a second of every large compile's
    time), and the large path places on HiGHS directly: nothing imports cvxpy."""
    import subprocess

    script = ("import sys\n"
              "from fleetc.compiler import Options, compile_policies, load_policies\n"
              "compiled = compile_policies(load_policies([sys.argv[1]]), Options(large=0))\n"
              "print(compiled.placement.method, sorted({m.split('.')[0] for m in sys.modules} & {'cvxpy'}))\n")
    out = subprocess.run([sys.executable, "-c", script, str(ROOT / "policies")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "colgen-lp-round []\n"


def test_the_inputs_digest_hashes_the_text_validate_made_as_json_dumps_writes_it() -> None:
    """validate keeps each document's JSON text (keys sorted) and the digest hashes it: the same
    text, and so the same digest, as json.dumps of the data (non-ASCII text, nested lists and
    mappings, numbers of every kind)."""
    import json

    sources = {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8")
               for path in sorted((ROOT / "policies").rglob("*.yaml"))}
    sources["extra.yaml"] = ("apiVersion: aigc.kurator.dev/v1alpha1\nkind: AIGCPipeline\nmetadata: {name: zz, "
                             "namespace: ml, labels: {note: \"état ü 日本\"}}\nspec:\n  stages:\n"
                             "    - {name: s, type: Training, resources: {gpu: 1, cpu: 0.5, memory: 1.5Gi}, "
                             "command: [run, \"--x=1\"]}\n")
    loaded = loaded_of(sources)
    parsed = [item for kind in dataclasses.fields(loaded.policies) for item in getattr(loaded.policies, kind.name)]
    assert parsed and all(item.json == json.dumps(item.doc.data, sort_keys=True, ensure_ascii=False) for item in parsed)
    assert any("日本" in (item.json or "") for item in parsed)
    without = dataclasses.replace(loaded.policies, **{
        kind.name: tuple(dataclasses.replace(item, json=None) for item in getattr(loaded.policies, kind.name))
        for kind in dataclasses.fields(loaded.policies)})
    assert inputs_digest(loaded.policies, Options()) == inputs_digest(without, Options())
