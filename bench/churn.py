"""What a one-line policy change costs: the recompile's time and which stages it moves.

    python -m bench.churn --clusters 200 --stages 4000 --load 0.9 --scratch
    python -m bench.churn --clusters 1000 --stages 20000 --load 0.9 --changes gpu --write-to /dev/shm

The instance is compiled with the real CLI (``fleetc compile``, a fresh process: wall time and
peak memory), then each change is made to a copy of its policies and compiled again with the
first compile's ``placement.yaml`` as the previous placement, as a user's next commit would be (into a
committed copy of the first compile's out/, as in a fresh checkout, where every cluster's folder
is rendered again; with ``--in-place`` into an out/ compiled in this working copy, whose folders
the change does not reach are kept):

* ``gpu``: one line, the first Training stage's ``gpu:`` raised by one;
* ``cordon``: ``cordoned: true`` on the cluster that holds the most stages;
* ``pipeline``: a new pipeline, a copy of the first one under a name (and buckets) of its own.

Each recompile also reports what fleetc says it re-placed (an incremental recompile,
:mod:`fleetc.placement.incremental`: ``re-placed N stages touched by the change (M candidates);
gap G``) and the placement alone timed in this process (``place`` with the same previous
placement: wall and CPU seconds), the part of the recompile the incremental path makes small.

Every stage that moved is listed with its gain: what its own objective term gained, per replica
moved, in score units (:func:`fleetc.placement.rules.move_gain`), against ``moveCost``. A move
is **justified** when that gain is more than ``moveCost``; **displaced** when it is not, but
the change touched the stage through room: it could not be put back as it was beside the
stages that stay (the churn rule's definition, :func:`fleetc.placement.rules.unjustified_moves`;
the stages the change touches directly, the changed one or those on the cordoned cluster,
are counted apart); otherwise it is **unjustified**: the change did not touch it and it did
not gain ``moveCost`` by leaving (fleetc's verifier refuses such a placement, so a compile
makes none). ``--scratch`` also compiles the changed policies without a previous placement,
for the moves a compile without stability would make.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git

from bench import made_folder
from bench.clock import cpu_seconds, load_words
from bench.generate import Spec, generate
from bench.run import _run_measured
from fleetc.model import FleetModel
from fleetc.placement.previous import Previous

CHANGES = ("gpu", "cordon", "pipeline")


@dataclass(frozen=True)
class Move:
    """An untouched stage the recompile moved."""

    stage: str
    before: dict[str, int]
    after: dict[str, int]
    gain: float  # its own objective term's gain per replica moved, in score units
    move_cost: float  # the Fleet's moveCost, in the same units
    kind: str  # justified, displaced or unjustified


def compile_cli(policies: Path, out: Path, timeout: float | None) -> dict[str, Any]:
    """``fleetc compile POLICIES --out OUT --allow-unplaced=*`` in a fresh process: wall, peak
    RSS (MiB) and what its placement.yaml says (``placement``, a :class:`Previous`)."""
    from fleetc.placement.previous import parse_previous

    command = [sys.executable, "-m", "fleetc", "compile", str(policies), "--out", str(out),
               "--allow-unplaced=*"]  # a cordon may leave stages out: the bench measures, it does not review
    run = _run_measured(command, timeout)
    said = [line for line in run.pop("stdout", "").splitlines() if line.startswith("re-placed ")]
    if said:
        run["replaced"] = said[0]
    if "error" not in run:
        run["placement"] = parse_previous((out / "placement.yaml").read_text(encoding="utf-8"))
    return run


def raise_training_gpus(folder: Path) -> tuple[set[str], str]:
    """Raise the first Training stage's ``gpu:`` by one (one line of the generated YAML)."""
    for path in sorted((folder / "pipelines").glob("*.yaml")):
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        pipeline = stage = ""
        training = False
        for i, line in enumerate(lines):
            if match := re.fullmatch(r"  name: (\S+)\n", line):
                pipeline = match[1]
            elif match := re.fullmatch(r"    - name: (\S+)\n", line):
                stage, training = match[1], False
            elif line == "      type: Training\n":
                training = True
            elif training and (match := re.fullmatch(r"( +)gpu: (\d+)\n", line)):
                lines[i] = f"{match[1]}gpu: {int(match[2]) + 1}\n"
                path.write_text("".join(lines), encoding="utf-8")
                key = f"{pipeline}/{stage}"
                return {key}, f"{key}: gpu {match[2]} -> {int(match[2]) + 1}"
    raise ValueError(f"no Training stage with GPUs under {folder}")


def cordon_busiest(folder: Path, placed: dict[str, dict[str, int]]) -> tuple[set[str], str]:
    """Cordon the cluster holding the most stages (ties: the first name); the stages on it."""
    count: dict[str, int] = {}
    for clusters in placed.values():
        for name in clusters:
            count[name] = count.get(name, 0) + 1
    cluster = min(count, key=lambda name: (-count[name], name))
    fleet = folder / "fleet.yaml"
    text = fleet.read_text(encoding="utf-8")
    entry = f"    - name: {cluster}\n"
    fleet.write_text(text.replace(entry, f"{entry}      cordoned: true\n", 1), encoding="utf-8")
    forced = {key for key, clusters in placed.items() if cluster in clusters}
    return forced, f"cordon {cluster} ({len(forced)} stages on it)"


def add_pipeline(folder: Path) -> tuple[set[str], str]:
    """A new pipeline file: the first pipeline, renamed, its buckets its own; its stages."""
    first = sorted((folder / "pipelines").glob("*.yaml"))[0].read_text(encoding="utf-8")
    document = first.split("\n---\n")[0].rstrip("\n") + "\n"
    old = re.search(r"^  name: (\S+)$", document, re.MULTILINE)
    if old is None:
        raise ValueError(f"no pipeline name in {folder / 'pipelines'}")
    new = "pipeline-churn"
    bucket = re.compile(r"cos://bench-" + re.escape(old[1].removeprefix("pipeline-")) + "/")
    text = bucket.sub("cos://bench-churn/", document.replace(f"  name: {old[1]}\n", f"  name: {new}\n", 1))
    (folder / "pipelines" / "churn.yaml").write_text(text, encoding="utf-8")
    stages = {f"{new}/{name}" for name in re.findall(r"^    - name: (\S+)$", text, re.MULTILINE)}
    return stages, f"new pipeline {new} ({len(stages)} stages, a copy of {old[1]})"


def model_at(policies: Path) -> FleetModel:
    from fleetc.compiler import load_policies
    from fleetc.resolve import resolve

    return resolve(load_policies([str(policies)]).policies, str(policies))


def time_placement(model: FleetModel, previous: Previous) -> dict[str, float]:
    """Wall and CPU seconds of :func:`fleetc.placement.optimize.place` alone on ``model`` with
    ``previous`` as the previous placement (as the recompile ran it)."""
    from fleetc.placement.optimize import place

    wall, cpu = time.perf_counter(), cpu_seconds()
    place(model, previous=previous.clusters, recorded=previous.recorded, allow_unplaced=True)
    return {"place_wall": time.perf_counter() - wall, "place_cpu": cpu_seconds() - cpu}


def untouched_moves(model: FleetModel, before: dict[str, dict[str, int]],
                    after: dict[str, dict[str, int]], changed: set[str]) -> list[Move]:
    """The stages other than ``changed`` placed differently in ``after`` than in ``before``, with
    their gain and whether the move was justified, displaced or unjustified (the churn rule)."""
    from fleetc.placement import rules
    from fleetc.placement.scoring import score_matrix

    total = score_matrix(model).total
    stage_index = {s.key: i for i, s in enumerate(model.stages)}
    index = {c.name: i for i, c in enumerate(model.clusters)}

    def score(key: str, cluster: str) -> float:
        return float(total[stage_index[key], index[cluster]]) if cluster in index else 0.0

    unjustified = rules.unjustified_moves(model, before, after, score)
    moves = []
    for stage in model.stages:
        old, new = before.get(stage.key, {}), after.get(stage.key, {})
        if stage.key in changed or not old or not rules.moved_replicas(old, new):
            continue
        gain = rules.move_gain(old, new, {c: score(stage.key, c) for c in {*old, *new}})
        kind = ("unjustified" if stage.key in unjustified
                else "justified" if gain > model.move_cost + 1e-9 else "displaced")
        moves.append(Move(stage.key, old, new, round(gain, 6), model.move_cost, kind))
    return moves


def moved_count(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]],
                touched: set[str]) -> int:
    return sum(1 for key in set(before) | set(after)
               if key not in touched and before.get(key) != after.get(key))


def committed_copy(out: Path, to: Path) -> Path:
    """``out`` copied to ``to`` and committed there: the out/ a user's next commit compiles on.

    A copy carries none of fleetc's marks (they name the file's device and inode), so fleetc
    may delete a stale file of it only because git holds it unchanged (``fleetc.infra.marks``),
    as in a fresh clone of the user's repository.
    """
    shutil.copytree(out, to, symlinks=True)
    repository = git.Repo.init(to)
    repository.git.add("--all")
    repository.git.execute(["git", "-c", "user.name=fleetc bench", "-c", "user.email=bench@fleetc.invalid",
                            "-c", "commit.gpgsign=false",
                            "commit", "--quiet", "--no-verify", "-m", "the last compile's output"])
    return to


def compiled_here(policies: Path, out: Path, timeout: float | None) -> Path:
    """``policies`` compiled into ``out`` by this user on this machine: the out/ of a working
    copy, whose files carry fleetc's marks, so a recompile keeps the cluster folders a change
    does not reach (:mod:`fleetc.render.record`) instead of rendering them again."""
    run = compile_cli(policies, out, timeout)
    if "error" in run:
        raise RuntimeError(f"compiling {policies} into {out}: {run['error']}")
    return out


def churn(spec: Spec, changes: Sequence[str] = CHANGES, *, scratch: bool = False, in_place: bool = False,
          write_to: Path | None = None, timeout: float | None = None) -> dict[str, Any]:
    """Compile ``spec``'s instance, then each change on top of it; what each recompile took and
    moved (see the module's docstring). ``in_place``: each change is recompiled into an out/
    compiled here (:func:`compiled_here`), not into a committed copy (:func:`committed_copy`)."""
    result: dict[str, Any] = {"spec": vars(spec), "changes": {}}
    with tempfile.TemporaryDirectory(prefix="fleetc-churn-", dir=write_to) as work:
        root = Path(work)
        base = generate(spec).write(root / "policies")
        first = compile_cli(base, root / "out", timeout)
        result["first"] = _figures(first)
        if "error" in first:
            return result
        before = first["placement"].clusters
        for change in changes:
            policies = root / f"policies-{change}"
            shutil.copytree(base, policies)
            changed, what = (raise_training_gpus(policies) if change == "gpu"
                             else cordon_busiest(policies, before) if change == "cordon"
                             else add_pipeline(policies))
            out = (compiled_here(base, root / f"out-{change}", timeout) if in_place
                   else committed_copy(root / "out", root / f"out-{change}"))
            run = compile_cli(policies, out, timeout)
            record: dict[str, Any] = {"what": what, "changed": len(changed), **_figures(run)}
            if "error" not in run:
                after = run["placement"].clusters
                model = model_at(policies)
                record["moves"] = [vars(m) for m in untouched_moves(model, before, after, changed)]
                record.update(time_placement(model, first["placement"]))
                if scratch:
                    fresh = compile_cli(policies, root / f"out-{change}-scratch", timeout)
                    if "error" not in fresh:
                        record["from_scratch_moved"] = moved_count(before, fresh["placement"].clusters,
                                                                   changed)
            result["changes"][change] = record
    return result


def _figures(run: dict[str, Any]) -> dict[str, Any]:
    figures = {k: run[k] for k in ("wall", "cpu", "rss_mib", "error", "replaced", "load") if k in run}
    if "placement" in run:
        placement = run["placement"]
        figures.update(objective=placement.objective, bound=placement.bound, method=placement.method,
                       placed=len(placement.clusters), stages=len(placement.stages),
                       gap=1 - placement.objective / placement.bound if placement.bound else 0.0)
    return figures


def report(result: dict[str, Any]) -> list[str]:
    spec, first = result["spec"], result["first"]
    lines = [f"{spec['clusters']} clusters x {spec['stages']} stages, load {spec['load']:.0%}, "
             f"seed {spec['seed']}: compile {_describe(first)}"]
    for change in result["changes"].values():
        lines.append(f"  {change['what']}: recompile {_describe(change)}")
        if "place_wall" in change:
            lines.append(f"    method {change['method']}: {change.get('replaced', 're-placed everything')}; "
                         f"placement alone {change['place_wall']:.2f}s wall ({change['place_cpu']:.2f}s CPU)")
        moves = change.get("moves", [])
        kinds = {k: sum(1 for m in moves if m["kind"] == k)
                 for k in ("justified", "displaced", "unjustified")}
        scratch = (f"; from scratch {change['from_scratch_moved']} would move"
                   if "from_scratch_moved" in change else "")
        lines.append(f"    other stages moved: {len(moves)} ({', '.join(f'{n} {k}' for k, n in kinds.items())}); "
                     f"untouched ones: {kinds['justified'] + kinds['unjustified']}{scratch}")
        lines += [f"    {m['stage']:<32} {_where(m['before'])} -> {_where(m['after'])}  "
                  f"gain {m['gain']:+.4f} per replica (moveCost {m['move_cost']:g})  {m['kind']}"
                  for m in moves]
    return lines


def _describe(run: dict[str, Any]) -> str:
    if "error" in run:
        return f"failed after {run.get('wall', 0):.2f}s: {run['error']}"
    return (f"{run['wall']:.2f}s wall ({run['cpu']:.2f}s CPU, {load_words(run.get('load'))} before), "
            f"peak RSS {run['rss_mib']:,.0f} MiB, "
            f"{run['placed']}/{run['stages']} placed, objective {run['objective']:.3f}, gap {run['gap']:.2%}")


def _where(clusters: dict[str, int]) -> str:
    return ",".join(f"{c}x{n}" for c, n in sorted(clusters.items())) or "(unplaced)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=200)
    parser.add_argument("--stages", type=int, default=4000)
    parser.add_argument("--load", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--changes", nargs="+", choices=CHANGES, default=list(CHANGES))
    parser.add_argument("--scratch", action="store_true",
                        help="also compile each change without a previous placement")
    parser.add_argument("--in-place", action="store_true",
                        help="recompile each change into an out/ compiled here (a working copy: its folders "
                             "are kept), not into a committed copy (a fresh checkout: every folder is rendered)")
    parser.add_argument("--timeout", type=float, default=None, help="kill a compile after this (s)")
    parser.add_argument("--write-to", type=made_folder, help="folder for the instance and outputs")
    args = parser.parse_args(argv)
    result = churn(Spec(args.clusters, args.stages, args.load, args.seed), args.changes,
                   scratch=args.scratch, in_place=args.in_place, write_to=args.write_to, timeout=args.timeout)
    print("\n".join(report(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
