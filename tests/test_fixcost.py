"""bench.fixcost and bench.generate --ha: the variants issue 30 item 4 prices against the plain
fleet (the figures themselves belong in bench/, not here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_scale import model_of

from bench import fixcost
from bench.generate import Spec, fleet_size, fleet_sizes, generate, spec_of
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
    cpu, wall, summary = fixcost.compile_cpu(policies, tmp_path / "out")
    assert cpu > 0.1 and wall > 0.1 and summary.startswith("placed ")
    assert (tmp_path / "out" / "placement.yaml").is_file()


def test_fixcost_compiles_each_seed_into_a_fresh_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each compile gets a folder of its own, and the one before is removed once measured: the
    outputs of a long run do not pile up on the folder's file system."""
    outs: list[Path] = []

    def compile_cpu(policies: Path, out: Path) -> tuple[float, float, str]:
        assert not out.exists() and policies.is_dir()
        assert not any(earlier.exists() for earlier in outs)
        outs.append(out)
        (out / "clusters").mkdir(parents=True)
        (out / "placement.yaml").write_text("stages: []\n")
        return 1.0, 1.0, "placed 12 stages"

    monkeypatch.setattr(fixcost, "compile_cpu", compile_cpu)
    fixcost.main(["--sizes", "4x12", "--repeat", "1", "--seeds", "0", "1", "--write-to", str(tmp_path)])
    assert len(outs) == len(set(outs)) == 2 * len(fixcost.VARIANTS)


def test_fixcost_compiles_the_variants_in_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each round compiles every variant once: a host whose speed drifts slows them alike."""
    order: list[str] = []

    def compile_cpu(policies: Path, out: Path) -> tuple[float, float, str]:
        order.append(policies.name.split("-")[0])
        return 1.0, 1.0, "placed 12 stages"

    monkeypatch.setattr(fixcost, "compile_cpu", compile_cpu)
    fixcost.main(["--sizes", "4x12", "--repeat", "2", "--seeds", "0", "--write-to", str(tmp_path)])
    assert order == [*fixcost.VARIANTS] * 2


def test_fixcost_prints_each_variants_least_and_most_cpu_and_the_least_ones_wall(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The repeats of one variant are the same work: the least CPU is its figure, the most
    beside it shows the host's noise, and the wall time is the least one's own."""
    times = iter([(4.0, 5.0), (9.0, 9.5), (2.0, 2.5), (8.0, 8.2), (6.0, 7.0),   # round 1: plain, sovereign, ...
                  (3.0, 3.9), (12.0, 12.4), (2.5, 2.6), (7.0, 7.5), (6.5, 6.6)])  # round 2

    def compile_cpu(policies: Path, out: Path) -> tuple[float, float, str]:
        cpu, wall = next(times)
        return cpu, wall, "placed 10 of 12 stages, 2 left out (--allow-unplaced)"

    monkeypatch.setattr(fixcost, "compile_cpu", compile_cpu)
    fixcost.main(["--sizes", "4x12", "--repeat", "2", "--seeds", "0", "--write-to", str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["size", "seed", "variant", "CPU", "s", "CPU", "max", "wall", "s", "x", "plain",
                                "left", "out", "load"]
    rows = {line.split()[2]: line.split()[3:8] for line in lines[1:6]}
    assert rows["plain"] == ["3.00", "4.00", "3.90", "1.00", "2"]
    assert rows["sovereign"] == ["9.00", "12.00", "9.50", "3.00", "2"]
    assert rows["quotas"] == ["7.00", "8.00", "7.50", "2.33", "2"]
    assert "worst x plain  sovereign    3.00" in lines


@pytest.mark.parametrize("text", ["8by60", "8x", "0x60", "8x60x2", ""])
def test_a_size_the_benches_cannot_read_is_a_usage_error(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    """bench.fixcost --sizes, bench.exact and bench.exactcheck --instance read CLUSTERSxSTAGES
    alike; what they cannot read is argparse's usage error (exit 2) naming it, not a traceback."""
    from bench import exact, exactcheck

    for main, flag in ((fixcost.main, "--sizes"), (exact.main, "--instance"), (exactcheck.main, "--instance")):
        with pytest.raises(SystemExit) as exited:
            main([flag, text])
        assert exited.value.code == 2
        assert f"argument {flag}: expected " in capsys.readouterr().err


def test_sizes_read_as_clusters_and_stages() -> None:
    assert fleet_size("50X1000") == (50, 1000)
    assert fleet_sizes("20x200,100x2000") == ((20, 200), (100, 2000))
