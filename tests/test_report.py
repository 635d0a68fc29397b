"""The diff report between two compiles, without git: snapshots in, text/Markdown/JSON out."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.builders import make_cluster, make_fleet, make_stage

from fleetc.errors import Diagnostic
from fleetc.model import (
    Assignment,
    Cluster,
    FleetModel,
    GPUPolicy,
    Placement,
    Source,
    Stage,
    StagePlacement,
    StageType,
)
from fleetc.report import (
    EMPTY,
    FLEET_WIDE,
    GITHUB_COMMENT_LIMIT,
    Report,
    Snapshot,
    WhatIf,
    as_json,
    commit_message,
    compare,
    format_markdown,
    format_text,
    format_what_if_markdown,
    github_annotations,
    github_step_summary,
    snapshot,
    snapshot_of_output,
    time_sliced_units,
    untouched_moves,
    what_if,
)
from fleetc.report.review import rendered_jobs

GI = 1024**3


def cluster(name: str, gpu_type: str | None, **kw: Any) -> Cluster:
    fields: dict[str, Any] = dict(
        name=name, provider="aws", region="us-east-1", jurisdiction="us", gpu_type=gpu_type, gpus=64,
        cpu_millis=256_000, memory_bytes=1024 * GI, taints=(), gpu_hour_cost=2.5, cpu_hour_cost=0.04,
        memory_gib_hour_cost=0.005, energy_efficiency=0.8, network_tier="standard", low_latency=False,
        edge=False, utilization=0.0, source=Source("fleet.yaml", "spec.clusters"),
    )
    fields.update(kw)
    return Cluster(**fields)


def stage(name: str, type_: StageType, **kw: Any) -> Stage:
    fields: dict[str, Any] = dict(
        pipeline="llm", namespace="ml", name=name, type=type_, dependencies=(), inputs=(), outputs=(),
        cpu_millis=4000, memory_bytes=16 * GI, gpus=0, gpu_types=(), replicas=1, min_replicas_per_cluster=1,
        tolerations=(), image="img:1", command=(), source=Source("p.yaml", "spec.stages"),
    )
    fields.update(kw)
    return Stage(**fields)


MODEL = FleetModel(
    name="fleet", namespace="fleetc-system",
    clusters=(cluster("east", "a100"), cluster("west", "t4", gpu_hour_cost=0.5)),
    stages=(stage("train", StageType.TRAINING, gpus=8, gpu_types=(), cpu_millis=32_000, memory_bytes=256 * GI),
            stage("serve", StageType.DEPLOYMENT, gpus=1, replicas=3)),
)


def placed(train: str, serve: dict[str, int]) -> Placement:
    return Placement(
        stages=(StagePlacement("llm/train", (Assignment(train, 1, 8),), 0.9),
                StagePlacement("llm/serve", tuple(Assignment(c, n, n) for c, n in sorted(serve.items())), 0.8)),
        objective=1.0, bound=1.0, method="milp",
    )


def job(cluster_name: str, gpus: int) -> str:
    return f"kind: Job\nmetadata:\n  name: train\nspec:\n  cluster: {cluster_name}\n  gpus: {gpus}\n"


BEFORE_FILES = {
    "placement.yaml": "stages:\n- train: east\n",
    "clusters/east/job-ml-train.yaml": job("east", 8),
    "clusters/east/kustomization.yaml": "resources:\n- job-ml-train.yaml\n",
    "clusters/west/deployment-ml-serve.yaml": "replicas: 3\n",
}
AFTER_FILES = {
    "placement.yaml": "stages:\n- train: west\n",
    "clusters/west/job-ml-train.yaml": job("west", 8),
    "clusters/west/deployment-ml-serve.yaml": "replicas: 3\n",
}
BEFORE = snapshot(MODEL, placed("east", {"west": 3}), BEFORE_FILES)
AFTER = snapshot(MODEL, placed("west", {"west": 3}), AFTER_FILES)


def test_snapshot_cost_is_prices_times_placed_demand() -> None:
    # east: 8 GPUs x 2.5 + 32 cores x 0.04 + 256 GiB x 0.005; west: 3 replicas x (1 x 0.5 + 4 x 0.04 + 16 x 0.005)
    assert BEFORE.cost == pytest.approx(
        {"east": 8 * 2.5 + 32 * 0.04 + 256 * 0.005, "west": 3 * (0.5 + 4 * 0.04 + 16 * 0.005)})
    assert BEFORE.gpus == {"east": {"a100": 8}, "west": {"t4": 3}}
    assert BEFORE.stages == {"llm/train": frozenset({"east"}), "llm/serve": frozenset({"west"})}


def test_compare_counts_objects_moves_and_gpus_per_cluster() -> None:
    report = compare(BEFORE, AFTER, base_label="main", head_label="working tree")
    east, west = report.clusters
    assert (east.name, east.added, east.changed, east.removed) == ("east", 0, 0, 1)  # kustomization not counted
    assert (west.name, west.added, west.changed, west.removed) == ("west", 1, 0, 0)
    assert (east.moved_out, east.moved_in, west.moved_in) == (("llm/train",), (), ("llm/train",))
    assert (east.gpus_before, east.gpus_after) == ({"a100": 8}, {})
    assert (west.gpus_before, west.gpus_after) == ({"t4": 3}, {"t4": 11})
    assert east.cost_after == 0.0 and west.cost_after > west.cost_before  # type: ignore[operator]
    assert [(m.stage, m.before, m.after) for m in report.moved] == [("llm/train", ("east",), ("west",))]
    assert [(o.group, o.path, o.status) for o in report.objects] == [
        (FLEET_WIDE, "placement.yaml", "changed"),
        ("east", "clusters/east/job-ml-train.yaml", "removed"),
        ("east", "clusters/east/kustomization.yaml", "removed"),
        ("west", "clusters/west/job-ml-train.yaml", "added"),
    ]
    assert report.objects[0].diff == (
        "--- a/out/placement.yaml\n+++ b/out/placement.yaml\n@@ -1,2 +1,2 @@\n stages:\n"
        "-- train: east\n+- train: west\n")
    assert report.objects[1].diff.startswith("--- a/out/clusters/east/job-ml-train.yaml\n+++ /dev/null\n")


def test_identical_snapshots_have_no_differences() -> None:
    report = compare(AFTER, AFTER, base_label="main", head_label="working tree")
    assert not report.changed
    assert format_text(report) == "no differences between main and working tree\n"
    assert format_markdown(report).endswith("No differences: the rendered manifests and the placement are the same.\n")
    assert as_json(report)["changed"] is False


def test_empty_base_shows_everything_added() -> None:
    report = compare(EMPTY, AFTER, base_label="main", head_label="working tree")
    assert {o.status for o in report.objects} == {"added"}
    assert report.moved == ()  # new stages are not moves
    assert commit_message(report).splitlines()[0] == "fleetc: compile policies (2 stages added, +11 t4)"


def test_text_format() -> None:
    text = format_text(compare(BEFORE, AFTER, base_label="main", head_label="working tree"))
    assert text.startswith(
        "fleetc diff main -> working tree\n\n"
        "stages changed: 1\n"
        "  llm/train: placed anew (fleetc explain llm/train says why)\n"
        "    placement: east x1 -> west x1\n"
        "    GPUs/replica: 8 a100 -> 8 t4\n\n"
        "east: +0 ~0 -1 objects; GPUs 8 a100 -> 0; cost/h 22.56 -> 0.00\n"
        "  - llm/train\n"
        "west: +1 ~0 -0 objects; GPUs 3 t4 -> 11 t4; cost/h 2.22 -> 8.78\n"
        "  + llm/train\n\n"
        "GPUs a100: 8 -> 0 (-8)\nGPUs t4: 3 -> 11 (+8)\n"
        "pipeline llm: GPUs 11 -> 11, cost/h 24.78 -> 8.78\n\n--- a/out/placement.yaml\n")
    assert "+++ b/out/clusters/west/job-ml-train.yaml\n" in text


def test_json_format_round_trips() -> None:
    data = json.loads(json.dumps(as_json(compare(BEFORE, AFTER, base_label="main", head_label="wt"))))
    assert data["changed"] is True
    assert data["stages"] == [{"stage": "llm/train", "before": ["east"], "after": ["west"]}]
    assert data["gpus"] == {"a100": {"before": 8, "after": 0}, "t4": {"before": 3, "after": 11}}
    assert data["clusters"][0] == {
        "name": "east", "added": 0, "changed": 0, "removed": 1,
        "gpus": {"before": {"a100": 8}, "after": {}}, "costPerHour": {"before": 22.56, "after": 0.0},
        "stagesIn": [], "stagesOut": ["llm/train"],
    }
    assert [(o["path"], o["cluster"], o["status"]) for o in data["objects"]][0] == ("placement.yaml", None, "changed")


def test_markdown_has_table_chart_and_collapsible_sections() -> None:
    text = format_markdown(compare(BEFORE, AFTER, base_label="origin/main", head_label="working tree"))
    assert text.startswith("### fleetc: review of `origin/main` → `working tree`\n\n"
                           "no danger found; 1 stage changed; 1 stage moved; 0 running Jobs restarted; "
                           "GPUs a100 8 → 0 (-8), t4 3 → 11 (+8); 4 files changed.\n\n#### Stages\n\n")
    assert ("| `llm/train` | placement: `east x1` → `west x1`<br>GPUs/replica: `8 a100` → `8 t4` | "
            "placed anew (fleetc explain llm/train says why) |\n") in text
    assert ("| `east` | 0 / 0 / 1 | 8 a100 → 0 | 22.56 → 0.00 | – | `llm/train` |\n"
            "| `west` | 1 / 0 / 0 | 3 t4 → 11 t4 | 2.22 → 8.78 | `llm/train` | – |\n") in text
    assert ("| `east` | `░░░░░░░░░░░░░░░░░·······  8`<br>`························  0` | -8 |\n"
            "| `west` | `░░░░░░░·················  3`<br>`████████████████████████ 11` | +8 |\n") in text
    assert text.count("<details><summary>") == text.count("</details>") == 3
    assert "<details><summary>cluster east: 2 files changed</summary>" in text
    assert "```diff\n--- a/out/clusters/east/job-ml-train.yaml\n+++ /dev/null\n" in text
    assert "Cut to fit" not in text


def big_side(prefix: str, clusters: int, files: int) -> Snapshot:
    body = "".join(f"  line{n}: {prefix}-{n}\n" for n in range(60))
    return Snapshot(files={f"clusters/c{c:02d}/job-{f:03d}.yaml": body for c in range(clusters) for f in range(files)})


def test_markdown_is_cut_at_whole_objects_to_fit_github() -> None:
    report = compare(big_side("old", 6, 40), big_side("new", 6, 40), base_label="main", head_label="wt")
    full = format_markdown(report, limit=10**9)
    assert len(full) > 4 * GITHUB_COMMENT_LIMIT
    text = format_markdown(report)
    assert len(text) <= GITHUB_COMMENT_LIMIT
    shown = [o for o in report.objects if f"+++ b/out/{o.path}\n" in text]
    left = report.objects[len(shown):]
    assert shown == list(report.objects[:len(shown)]) and shown and left  # a prefix, whole diffs only
    assert all(o.diff in text for o in shown)
    assert text.count("```diff\n") == text.count("```\n\n") == len(shown)  # every fence closed
    note = text[text.index("> **Cut to fit GitHub's comment limit:**"):]
    assert f"the diffs of {len(left)} files were left out: `out/{left[0].path}`" in note
    assert note.endswith(f" and {len(left) - 40} more. Run `fleetc diff --base main` to see them all (fleetc's "
                         "workflow keeps the whole report, `report.json`, in its `fleetc-diff` artifact).\n")
    assert text.count("<details>") == text.count("</details>")


def test_markdown_cut_keeps_at_most_the_limit_for_small_limits() -> None:
    report = compare(big_side("old", 2, 3), big_side("new", 2, 3), base_label="main", head_label="wt")
    for limit in (3000, 5000, 8000):
        assert len(format_markdown(report, limit=limit)) <= limit


def test_snapshot_of_output_reads_placement_yaml() -> None:
    text = ("kind: Placement\nstages:\n"
            "  - {pipeline: llm, stage: train, gpuType: a100, clusters: [{name: east, replicas: 1, gpus: 8}]}\n"
            "  - {pipeline: llm, stage: serve, gpuType: null, clusters: [{name: west, replicas: 2, gpus: 2},"
            " {name: east, replicas: 0, gpus: 0}]}\n")
    side = snapshot_of_output({"placement.yaml": text}, {"west": "t4"})
    assert side.stages == {"llm/train": frozenset({"east"}), "llm/serve": frozenset({"west"})}
    assert side.gpus == {"east": {"a100": 8}, "west": {"t4": 2}}
    assert side.cost is None
    assert snapshot_of_output({"placement.yaml": "{not: [valid"}, {}).stages == {}


def test_commit_message_summarises_moves_and_gpu_deltas() -> None:
    before = Snapshot(stages={"p/a": frozenset({"x"}), "p/b": frozenset({"x"})}, gpus={"x": {"a100": 8}})
    after = Snapshot(stages={"p/a": frozenset({"y"}), "p/b": frozenset({"y"})}, gpus={"y": {"a100": 16}})
    message = commit_message(compare(before, after, base_label="HEAD", head_label="compile"))
    assert message == ("fleetc: compile policies (2 stages moved, +8 a100)\n\n"
                       "p/a: x -> y\np/b: x -> y\nGPUs a100: 8 -> 16\n0 added, 0 changed, 0 removed in out/\n")


def test_markdown_table_of_a_large_fleet_stays_within_the_budget() -> None:
    before = Snapshot(gpus={f"cluster-{n:04d}": {"a100": 8} for n in range(400)})
    after = Snapshot(gpus={f"cluster-{n:04d}": {"a100": 16} for n in range(400)})
    text = format_markdown(compare(before, after, base_label="main", head_label="wt"))
    assert len(text) <= GITHUB_COMMENT_LIMIT - 1024
    assert text.count("| `cluster-") == 150 + 20  # the table, then the bars of 20 clusters
    assert "| … and 250 more clusters | | | | | |\n" in text
    assert text.count("<br>`████") == 20


def test_github_annotations_escape_and_cap() -> None:
    diagnostics = [Diagnostic("policies/a,b.yaml", n, 3, f"spec.x{n}", f"bad: 100% wrong {n}", hint="fix it")
                   for n in range(1, 13)]
    lines = github_annotations(diagnostics, "unused")
    assert lines[0] == ("::error file=policies/a%2Cb.yaml,line=1,col=3,title=fleetc%3A spec.x1"
                        "::bad: 100%25 wrong 1%0Ahint: fix it")
    assert len(lines) == 11
    assert lines[-1] == "::notice title=fleetc::12 errors; the first 10 are annotated, all are in the step summary"
    whole_file = Diagnostic("p.yaml", 0, 0, "", "empty file")
    assert github_annotations([whole_file], "") == ["::error file=p.yaml,title=fleetc%3A error::empty file"]
    assert github_annotations([], "p: no such file\nor directory") == [
        "::error title=fleetc::p: no such file%0Aor directory"]


def test_github_step_summary_lists_every_diagnostic() -> None:
    diagnostics = [Diagnostic("p.yaml", n, 1, "", f"problem {n}") for n in range(1, 13)]
    summary = github_step_summary(diagnostics, "unused")
    assert summary.startswith("### fleetc: 12 errors\n\n```text\np.yaml:1:1: error: problem 1\n")
    assert summary.endswith("p.yaml:12:1: error: problem 12\n```\n\n")
    assert github_step_summary([], "boom") == "### fleetc: 1 error\n\n```text\nboom\n```\n\n"


def test_time_sliced_replicas_count_as_the_gpus_they_take() -> None:
    """40 serving replicas on T4s time-sliced 4 ways take 10 GPUs, not 40: in the diff's GPU
    columns, in cost, and read back from placement.yaml; an exclusive stage counts whole, and so
    do they where the cluster's device plugin is not configured for time-slicing."""
    t4 = cluster("west", "t4", gpus=16, gpu_hour_cost=0.5, cpu_hour_cost=0.0, memory_gib_hour_cost=0.0,
                 device_plugin_configured=True, gpus_per_node=2)  # time-sliced 2 GPUs (a node) at a time
    serve = stage("serve", StageType.DEPLOYMENT, gpus=1, gpu_types=("t4",), replicas=40, shared_gpu=True)
    batch = stage("batch", StageType.TRAINING, gpus=2, gpu_types=("t4",))
    policy = GPUPolicy("gpu", 4, None, None, False, 1, Source("gpu.yaml", "spec"))
    model = FleetModel("f", "ml", (t4,), (serve, batch), gpu_policy=policy)
    placement = Placement((StagePlacement("llm/serve", (Assignment("west", 40, 40),), 0.8),
                           StagePlacement("llm/batch", (Assignment("west", 1, 2),), 0.8)), 1.0, 1.0, "milp")
    side = snapshot(model, placement, {})
    assert side.gpus == {"west": {"t4": 10 + 2}}
    assert side.cost == {"west": pytest.approx(12 * 0.5)}
    from fleetc.render.report import placement_report
    from fleetc.render.yamlout import dump

    report = dump(placement_report(model, placement))
    assert "    timeSlicing:\n      slotsPerGPU: 4\n" in report
    assert "      - name: west\n        replicas: 40\n        slots: 40\n        gpus: 10\n" in report
    assert snapshot_of_output({"placement.yaml": report}, {"west": "t4"}).gpus == side.gpus
    # 39 replicas share the tenth GPU with nothing: 9.75 GPUs in placement.yaml, 10 taken
    fewer = replace(placement, stages=(replace(placement.stages[0], assignments=(Assignment("west", 39, 39),)),
                                       placement.stages[1]))
    assert "        slots: 39\n        gpus: 9.75\n" in dump(placement_report(model, fewer))
    assert snapshot(model, fewer, {}).gpus == {"west": {"t4": 12}}
    unconfigured = replace(model, clusters=(replace(t4, device_plugin_configured=False),))
    assert snapshot(unconfigured, placement, {}).gpus == {"west": {"t4": 40 + 2}}
    whole = dump(placement_report(unconfigured, placement))
    assert "        slots: 40\n        gpus: 40\n" in whole
    assert snapshot_of_output({"placement.yaml": whole}, {"west": "t4"}).gpus == {"west": {"t4": 40 + 2}}


def test_time_sliced_slots_take_whole_nodes_where_the_device_plugin_is_configured() -> None:
    """As the placement rule counts them (rules.time_sliced_gpus): on 4-GPU nodes whose device
    plugin reads fleetc's config, 10 slots 4 to a GPU take one whole node, 4 GPUs, not 3; 17
    slots two nodes. The diff, the cost and the committed placement.yaml read back agree."""
    t4 = cluster("west", "t4", gpus=16, gpus_per_node=4, device_plugin_configured=True, gpu_hour_cost=0.5,
                 cpu_hour_cost=0.0, memory_gib_hour_cost=0.0)
    serve = stage("serve", StageType.DEPLOYMENT, gpus=1, gpu_types=("t4",), replicas=10, shared_gpu=True)
    policy = GPUPolicy("gpu", 4, None, None, False, 1, Source("gpu.yaml", "spec"))
    model = FleetModel("f", "ml", (t4,), (serve,), gpu_policy=policy)
    from fleetc.render.report import placement_report
    from fleetc.render.yamlout import dump

    for slots, gpus in ((10, 4), (16, 4), (17, 8)):
        placement = Placement((StagePlacement("llm/serve", (Assignment("west", slots, slots),), 0.8),), 1.0, 1.0,
                              "milp")
        side = snapshot(model, placement, {})
        assert side.gpus == {"west": {"t4": gpus}} and side.cost == {"west": pytest.approx(gpus * 0.5)}
        committed = {"placement.yaml": dump(placement_report(model, placement))}
        assert snapshot_of_output(committed, {"west": "t4"}, time_sliced_units(model)).gpus == side.gpus
    unconfigured = replace(model, clusters=(replace(t4, device_plugin_configured=False),))
    assert time_sliced_units(unconfigured) == {"west": 1}
    assert snapshot(unconfigured, placement, {}).gpus == {"west": {"t4": 17}}  # no time-slicing: whole GPUs



def test_moves_of_stages_the_change_did_not_touch_are_listed_with_their_gain() -> None:
    """llm/train left a for b (scoring 0.02 more, energy 0.6 vs 0.5): a still allows it and has
    room, so the change did not touch it: listed with its gain. llm/moved left a cordoned
    cluster: touched, not listed. llm/stays did not move."""
    clusters = (make_cluster("a", energy_efficiency=0.5, gpus=16), make_cluster("b", energy_efficiency=0.6, gpus=16),
                make_cluster("gone", cordoned=True))
    model = make_fleet(clusters, (make_stage(), make_stage("moved"), make_stage("stays")))
    after = Placement(stages=(
        StagePlacement("llm/moved", (Assignment("a", 1, 8),), 0.0),
        StagePlacement("llm/stays", (Assignment("b", 1, 8),), 0.0),
        StagePlacement("llm/train", (Assignment("b", 1, 8),), 0.0)), objective=0.0, bound=0.0, method="milp")
    before = {"llm/train": {"a": 1}, "llm/moved": {"gone": 1}, "llm/stays": {"b": 1}}
    moves = untouched_moves(model, before, after)
    assert [(m.stage, dict(m.before), dict(m.after), round(m.gain, 6)) for m in moves] == [
        ("llm/train", {"a": 1}, {"b": 1}, 0.02)]
    report = replace(compare(BEFORE, AFTER, base_label="main", head_label="wt"), untouched=moves, move_cost=0.01)
    assert ("\n\nstages the change did not touch that moved (gain per replica moved, moveCost 0.01):\n"
            "  llm/train: a x1 -> b x1, gain +0.0200\n\n--- a/out/") in format_text(report)
    assert ("**Stages the change did not touch that moved**: each must gain more than `moveCost` (0.01) per "
            "replica moved.\n\n| stage | before → after | gain per replica moved |\n|---|---|---|\n"
            "| `llm/train` | a x1 → b x1 | +0.0200 |\n\n") in format_markdown(report)
    data = as_json(report)
    assert data["untouchedMoves"] == [{"stage": "llm/train", "before": {"a": 1}, "after": {"b": 1}, "gain": 0.02}]
    assert data["moveCost"] == 0.01
    assert untouched_moves(model, {"llm/train": {"b": 1}}, after) == ()


def test_the_entry_points_the_fleet_chose_are_in_the_report() -> None:
    """A change of the Fleet's spec.gitops.entryPoints is said in one line, not only as files."""
    base = Snapshot({"argocd/a.yaml": "", "flux/east/b.yaml": "", "clusters/east/c.yaml": ""})
    head = Snapshot({"argocd/a.yaml": "", "kurator/app.yaml": "", "clusters/east/c.yaml": ""})
    report = compare(base, head, base_label="main", head_label="wt")
    assert report.entry_points == (("argocd", "flux"), ("argocd", "kurator"))
    assert "GitOps entry points: argocd, flux -> argocd, kurator\n" in format_text(report)
    assert "; GitOps entry points: argocd, flux → argocd, kurator.\n" in format_markdown(report)
    assert as_json(report)["entryPoints"] == {"before": ["argocd", "flux"], "after": ["argocd", "kurator"]}
    same = compare(base, base, base_label="main", head_label="wt")
    assert "entry points" not in format_text(same) + format_markdown(same)


# --------------------------------------------------------------------------- hostile names
#: A scenario file name and label as an attacker writes them (issue 27): a newline and a fence
#: to end the block, a comment to hide the rest, backticks and a tag for raw HTML, a pipe to
#: split a table cell, a forged workflow command and a terminal escape.
HOSTILE = "evil\n```\n<!-- hide\n`<img src=x onerror=alert(1)>`|x ::error::forged \x1b[2J"


def _hostile_report() -> tuple[Report, WhatIf]:
    scenario = what_if(BEFORE, AFTER, ({"a100": 8}, {"a100": 8}), [("llm/train", HOSTILE)], HOSTILE,
                       source=f"scenarios/{HOSTILE}.yaml", settings=(HOSTILE,))
    report = compare(BEFORE, AFTER, base_label=HOSTILE, head_label="working tree")
    return replace(report, scenarios=(scenario,)), scenario


def _outside_code(markdown: str) -> list[str]:
    """The lines of ``markdown`` outside fenced blocks, with code spans removed (CommonMark: a
    fence ends at a line of at least as many backticks; a span at the same run of backticks)."""
    lines, fence = [], ""
    for line in markdown.splitlines():
        run = re.match(r" {0,3}(`{3,})", line)
        if fence:
            if run and len(run.group(1)) >= len(fence) and not line.strip().strip("`"):
                fence = ""
            continue
        if run:
            fence = run.group(1)
            continue
        lines.append(re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", line))
    assert not fence, "a fence is left open"
    return lines


def test_names_from_files_and_scenarios_cannot_break_the_comment() -> None:
    report, scenario = _hostile_report()
    for text in (format_markdown(report), format_what_if_markdown(scenario)):
        assert HOSTILE not in text and "evil\n" not in text  # never raw: the newline is shown escaped
        assert "evil\\n```\\n<!-- hide" in text  # but shown
        visible = _outside_code(text)
        assert not [line for line in visible if "<!--" in line or "<img" in line or "::error" in line]
        assert "\x1b" not in text
        for line in visible:
            if line.startswith("|"):  # a table row keeps its cells: no pipe from a name splits one
                assert "|x ::error" not in line


def test_a_what_if_heading_with_backticks_stays_one_code_span() -> None:
    _, scenario = _hostile_report()
    label = "a`b``c <b>bold</b>"
    text = format_what_if_markdown(replace(scenario, report=replace(scenario.report, head=label)))
    assert "#### What-if ```a`b``c <b>bold</b>```\n" in text


def test_terminal_output_shows_control_characters_escaped() -> None:
    report, _ = _hostile_report()
    text = format_text(report)
    assert "\x1b" not in text and "fleetc diff evil\\n```\\n<!-- hide" in text
    assert not any(line.startswith("::error") for line in text.splitlines())


def test_bookkeeping_files_are_summarised_not_diffed() -> None:
    """Issue 26/27: `.fleetc/render`'s digests and placement.yaml's header led the comment and
    pushed the real change out of it; they are one summary line now."""
    header = "kind: Placement\ninputs: sha256:{}\nobjective: {}\nstages:\n  - stage: a\n"
    before = Snapshot(files={".fleetc/render": "c1 aaa bbb\n", ".fleetc/files": "x\n",
                             "placement.yaml": header.format("1" * 64, "1.0")})
    after = Snapshot(files={".fleetc/render": "c1 ccc ddd\n", ".fleetc/files": "x\ny\n",
                            "placement.yaml": header.format("2" * 64, "2.0")})
    report = compare(before, after, base_label="main", head_label="wt")
    assert report.objects == ()  # nothing to diff: every change is bookkeeping
    assert report.bookkeeping == (
        ".fleetc/render: 2 lines differ (fleetc's record of what it rendered)",
        ".fleetc/files: 1 line differs (fleetc's record of what it rendered)",
        f"placement.yaml: inputs sha256:{'1' * 12}… -> sha256:{'2' * 12}…, objective 1.0 -> 2.0")
    assert report.changed  # still a difference (git diff would say so)
    assert "fleetc's bookkeeping, not diffed: .fleetc/render: 2 lines differ" in format_markdown(report)


def test_a_stages_job_is_its_own_not_its_release_job() -> None:
    """A gated stage's release Job carries the stage's labels (and ``fleetc.dev/role:
    release``): the Job the report says a change restarts is the stage's Volcano Job, whatever
    the order the files are read in."""
    out = Path(__file__).resolve().parents[1] / "out"
    files = {str(p.relative_to(out)): p.read_text() for p in (out / "clusters").rglob("job-*.yaml")}
    assert any("-release-" in path for path in files)
    for order in (sorted(files), sorted(files, reverse=True)):
        jobs = rendered_jobs({path: files[path] for path in order})
        training = jobs["llm-chinese-training/model-training"]
        assert list(training) == ["gpu-cluster-huawei"] and "-release-" not in training["gpu-cluster-huawei"]
        assert not any("-release-" in name for names in jobs.values() for name in names.values())
