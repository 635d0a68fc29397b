"""The front door: paths -> validated policies -> model -> placement -> rendered files.

``load_policies`` is the only function here that reads files; ``compile_policies`` is pure
(its result depends on the policies and options alone). The optimizer, and with it numpy, scipy
and HiGHS, is imported only when something is compiled, so ``fleetc validate`` starts fast.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fleetc.errors import Diagnostic, PlacementError, PolicyError
from fleetc.model import Assignment, FleetModel, Placement, StagePlacement
from fleetc.placement import PLACEMENT_VERSION
from fleetc.placement.previous import Previous
from fleetc.policy.load import Document, FieldPath, LoadResult, load_paths, load_sources
from fleetc.policy.validate import PolicySet, validate
from fleetc.progress import NULL_REPORTER, Reporter, phase
from fleetc.resolve import degraded_serving, resolve


@dataclass(frozen=True)
class Options:
    """Everything a compile may be told; built once by the CLI."""

    #: Wall-clock seconds the solver may use; None for no limit.
    time_limit: float | None = None
    #: Clusters to compile as if they were lost (``--drain``): they take no work.
    drain: tuple[str, ...] = ()
    #: The previous placement (its ``placement.yaml``): moving a stage away costs moveCost, and
    #: when it was compiled from these very inputs it is given back as it is.
    previous: Previous = field(default_factory=Previous)
    #: Render what fits and list the rest as unplaced instead of failing (``--allow-unplaced``).
    allow_unplaced: bool = False
    #: Told when each stage starts and ends (a status line on terminals); silent by default.
    reporter: Reporter = NULL_REPORTER


@dataclass(frozen=True)
class Compiled:
    model: FleetModel
    placement: Placement
    files: Mapping[str, str]  # path under the output folder -> file text
    #: Settings that have no Kubernetes form (severity "warning"), sorted; never fatal.
    warnings: tuple[Diagnostic, ...] = ()


@dataclass(frozen=True)
class Loaded:
    policies: PolicySet
    documents: int
    where: str  # how to name the input in messages
    #: The policy paths fleetc was given: provenance names files relative to them.
    roots: tuple[str, ...] = ()


def load_policies(paths: Sequence[str], reporter: Reporter = NULL_REPORTER) -> Loaded:
    """Read and validate the policies; raise :class:`PolicyError` with every problem found."""
    with phase(reporter, "load"):
        loaded = load_paths(paths)
    return _validated(loaded, ", ".join(paths), reporter, tuple(paths))


def check_policies(loaded: Loaded) -> FleetModel:
    """What ``validate`` checks beyond the documents: everything short of placing. The model is
    built (a Fleet is there, each stage's data lies in one jurisdiction, ...), so validate
    refuses what compile would refuse before it solves. Placement outcomes (no cluster has
    room, a rule no cluster satisfies) are the solver's to find, and left to compile."""
    return resolve(loaded.policies, loaded.where, roots=loaded.roots)


def load_policy_sources(sources: Sequence[tuple[str, bytes]], where: str,
                        roots: Sequence[str] = ()) -> Loaded:
    """Validate policies given as (display path, content) pairs, e.g. read from git at a revision;
    ``roots``: the policy paths they were read under."""
    return _validated(load_sources(sources), where, NULL_REPORTER, tuple(roots))


def _validated(loaded: LoadResult, where: str, reporter: Reporter, roots: tuple[str, ...]) -> Loaded:
    with phase(reporter, "validate"):
        policies, diagnostics = validate(loaded.documents)
    problems = [*loaded.diagnostics, *diagnostics]
    if problems:
        raise PolicyError(problems)
    return Loaded(policies, len(loaded.documents), where, roots)


def compile_policies(loaded: Loaded, options: Options = Options()) -> Compiled:
    """Place every stage and render the output tree. Pure: no I/O."""
    from fleetc.render import render

    report = options.reporter
    with phase(report, "resolve"):
        model = resolve(loaded.policies, loaded.where, drained=options.drain, roots=loaded.roots)
    with phase(report, "place"):
        placement = place_model(model, inputs_digest(loaded.policies, options), options)
    report.gap(placement.gap)
    with phase(report, "render"):
        rendered = render(model, placement)
    warnings = positioned([dataclasses.replace(w, path=model.display(w.path))
                           for w in (*degraded_serving(model), *rendered.warnings)], loaded.policies)
    return Compiled(model, placement, rendered.files, warnings)


def positioned(warnings: Sequence[Diagnostic], policies: PolicySet) -> tuple[Diagnostic, ...]:
    """``warnings`` (found on the model, which has no lines) located in their policy documents:
    each gets the line and column of its field, sorted and said once."""
    documents: dict[str, list[Document]] = {}
    for kind in dataclasses.fields(policies):
        for parsed in getattr(policies, kind.name):
            documents.setdefault(parsed.doc.path, []).append(parsed.doc)
    found = set()
    for warning in warnings:
        path = _field_path(warning.field)
        candidates = documents.get(warning.path, [])
        doc = next((d for d in candidates if path in d.values or path in d.keys), None) or next(
            iter(candidates), None)
        if doc is not None and warning.line == 0:
            line, column = doc.locate(path, key=path in doc.keys or path not in doc.values)
            warning = dataclasses.replace(warning, line=line, column=column)
        found.add(warning)
    return tuple(sorted(found))


def _field_path(text: str) -> FieldPath:
    """``spec.stages[1].inputs[0]`` -> ``('spec', 'stages', 1, 'inputs', 0)``."""
    return tuple(int(index) if index else name for name, index in _FIELD_PART.findall(text))


_FIELD_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def place_model(model: FleetModel, inputs: str, options: Options) -> Placement:
    """The placement of ``model``, tagged with its ``inputs`` digest: the previous one when it
    was compiled from the same inputs and still holds (see :func:`_given_back`), else the
    optimizer's."""
    from fleetc.placement.hints import capacity_hints, refused_stages, taint_hints
    from fleetc.placement.optimize import place  # imports numpy, scipy, HiGHS: only when compiling

    given_back = _given_back(model, inputs, options)
    if given_back is not None:
        return given_back
    try:
        placement = place(model, time_limit=options.time_limit, previous=options.previous.clusters,
                          on_gap=options.reporter.gap, allow_unplaced=options.allow_unplaced)
    except PlacementError as err:
        hints = [err.hint] if err.hint else []
        capacity = capacity_hints(model) if any(_about_capacity(r) for r in err.reasons) else []
        err.hint = "\n  hint: ".join(hints + taint_hints(model, refused_stages(model, err.reasons)) + capacity)
        raise
    return dataclasses.replace(placement, inputs=inputs)


def _about_capacity(reason: str) -> bool:
    """Whether a refusal quotes capacity figures (free GPUs, cores or memory, room for replicas)."""
    return " free " in reason or "room for" in reason


def inputs_digest(policies: PolicySet, options: Options) -> str:
    """What the placement depends on, hashed: the placement version (bumped on purpose when how
    fleetc places changes, see :data:`fleetc.placement.PLACEMENT_VERSION`), the drained clusters
    and every policy document's data (not its file: moving a policy between files changes
    nothing). fleetc's release and its source bytes are left out on purpose: an upgrade or a
    comment edit that places the same must not make every committed ``out/`` stale."""
    documents = sorted(json.dumps(parsed.doc.data, sort_keys=True, ensure_ascii=False)
                       for kind in dataclasses.fields(policies) for parsed in getattr(policies, kind.name))
    payload = json.dumps({"placement": PLACEMENT_VERSION, "drain": sorted(options.drain),
                          "policies": documents})
    return "sha256:" + hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _given_back(model: FleetModel, inputs: str, options: Options) -> Placement | None:
    """The previous placement, when it was compiled from these same ``inputs``, lists exactly
    the model's stages, places every one (or ``--allow-unplaced``: leaves some out, with the
    reasons it gave), was not cut short by a time limit other than this compile's (so dropping
    or raising ``--time-limit`` searches again), and the independent verifier still accepts it.

    A compile is then a fixed point: compiling again gives the same bytes, so ``--check`` right
    after a compile passes on a large fleet too (the large path's answer depends on where the
    stages were before, through the move cost, and re-solving moved a few each time); and the
    solver does not run at all.
    """
    from fleetc.placement.verify import verify

    previous, allow_unplaced = options.previous, options.allow_unplaced
    if (not inputs or previous.inputs != inputs or previous.stages != {stage.key for stage in model.stages}
            or (previous.reasons and not allow_unplaced)
            or previous.time_limit not in (None, options.time_limit)):
        return None
    placement = Placement(
        stages=tuple(StagePlacement(stage.key, tuple(
            Assignment(cluster, replicas, replicas * stage.gpus)
            for cluster, replicas in sorted(previous.clusters.get(stage.key, {}).items())),
            previous.scores[stage.key], previous.reasons.get(stage.key, ""))
            for stage in model.stages),
        objective=previous.objective, bound=previous.bound, method=previous.method, inputs=inputs,
        time_limit=previous.time_limit, optimal=previous.optimal)
    return None if verify(model, placement, allow_unplaced=allow_unplaced) else placement
