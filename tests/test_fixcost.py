"""bench.fixcost and bench.generate --ha: the variants issue 30 item 4 prices against the plain
fleet (the figures themselves belong in bench/, not here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_scale import model_of

from bench import fixcost
from bench.generate import Spec, generate, spec_of
from bench.generate import _parser as generate_parser


def test_ha_adds_a_platform_serving_on_the_two_largest_t4_clusters_and_nothing_else() -> None:
    spec = Spec(clusters=12, stages=60, load=0.9, ha=True)
    plain, ha = generate(Spec(clusters=12, stages=60, load=0.9)), generate(spec)
    assert {k: v for k, v in ha.files.items() if k != "platform.yaml"} == plain.files
    model = model_of(spec)
    t4 = sorted((c for c in model.clusters if c.gpu_type == "t4"), key=lambda c: (-c.gpus, c.name))
    (platform,) = model.platforms
    assert (platform.primary_cluster, platform.secondary_clusters) == (t4[0].name, (t4[1].name,))
    assert spec_of(generate_parser().parse_args(["--ha", "--clusters", "12", "--stages", "60", "--out", "x"])) == spec


@pytest.mark.slow
def test_fixcost_measures_a_compile_in_cpu_seconds(tmp_path: Path) -> None:
    policies = generate(Spec(clusters=4, stages=12, load=0.9, platform=True, sovereignty=True)).write(tmp_path / "p")
    cpu, summary = fixcost.compile_cpu(policies, tmp_path / "out")
    assert cpu > 0.1 and summary.startswith("placed ")
    assert (tmp_path / "out" / "placement.yaml").is_file()


def test_fixcost_compiles_each_seed_into_a_fresh_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each compile gets a folder of its own, and the one before is removed once measured: the
    outputs of a long run do not pile up on the folder's file system."""
    outs: list[Path] = []

    def compile_cpu(policies: Path, out: Path) -> tuple[float, str]:
        assert not out.exists() and policies.is_dir()
        assert not any(earlier.exists() for earlier in outs)
        outs.append(out)
        (out / "clusters").mkdir(parents=True)
        (out / "placement.yaml").write_text("stages: []\n")
        return 1.0, "placed 12 stages"

    monkeypatch.setattr(fixcost, "compile_cpu", compile_cpu)
    fixcost.main(["--sizes", "4x12", "--repeat", "1", "--seeds", "0", "1", "--write-to", str(tmp_path)])
    assert len(outs) == len(set(outs)) == 2 * len(fixcost.VARIANTS)


def test_fixcost_compiles_the_variants_in_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each round compiles every variant once: a host whose speed drifts slows them alike."""
    order: list[str] = []

    def compile_cpu(policies: Path, out: Path) -> tuple[float, str]:
        order.append(policies.name.split("-")[0])
        return 1.0, "placed 12 stages"

    monkeypatch.setattr(fixcost, "compile_cpu", compile_cpu)
    fixcost.main(["--sizes", "4x12", "--repeat", "2", "--seeds", "0", "--write-to", str(tmp_path)])
    assert order == [*fixcost.VARIANTS] * 2
