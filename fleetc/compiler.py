"""The front doors: paths -> validated policies -> model -> placement -> rendered files.

One function per command, each over one :class:`Options` (built once, by the CLI):
:func:`compile_fleet`, :func:`explain_stage`, :func:`diff_fleet` and :func:`what_if_fleet`. They read (policies, the
previous ``placement.yaml``, git objects) and never write; the CLI decides where results go.
Below them ``compile_policies`` is pure (its result depends on the policies and options alone).
Nothing here reads the environment or the current directory: relative paths are taken from
``Options.workdir``. The optimizer, and with it numpy, scipy and HiGHS, is imported only when
something is compiled, so ``fleetc validate`` starts fast.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import operator
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetc.errors import Diagnostic, FleetcError, PlacementError, PolicyError, UsageError
from fleetc.infra.collector import freezes_undone
from fleetc.infra.forkmap import Background
from fleetc.model import Assignment, Cluster, FleetModel, Placement, Stage, StagePlacement
from fleetc.placement import LARGE, PLACEMENT_VERSION
from fleetc.placement.previous import Previous, read_previous
from fleetc.placement.solvers import DEFAULT_SOLVER, check_solver, solver_label
from fleetc.policy import kinds
from fleetc.policy.load import Document, FieldPath, LoadResult, Position, load_paths, load_sources
from fleetc.policy.policyset import Parsed, PolicySet
from fleetc.policy.validate import validate
from fleetc.progress import NULL_REPORTER, Reporter, phase
from fleetc.resolve import degraded_serving, resolve
from fleetc.state.placementfile import PLACEMENT_FILE

if TYPE_CHECKING:  # imported where used: explain needs the score matrix (numpy), diff gitpython
    from fleetc.placement.explain import Explanation
    from fleetc.placement.problem import Settings
    from fleetc.render.record import Kept, Reusable
    from fleetc.report import ObjectDiff, Report, WhatIf
    from fleetc.scenario import Scenario


@dataclass(frozen=True)
class Options:
    """Everything a command may be told; built once by the CLI, changed only by ``replace``."""

    #: Policy files and folders, relative to ``workdir`` unless absolute.
    paths: tuple[str, ...] = ("policies",)
    #: The output folder, relative to ``workdir`` unless absolute: its ``placement.yaml`` is the
    #: previous placement (compile, diff) and the placement explained (explain).
    out: str = "out"
    #: The folder relative paths are taken from and messages name files relative to (the CLI:
    #: the current directory); also where the git repository is looked for.
    workdir: Path = Path(".")
    #: Allowed pairs in one component above which the large path places it (``FLEETC_LARGE``);
    #: None for :data:`fleetc.placement.optimize.LARGE`.
    large: int | None = None

    #: Wall-clock seconds the solver may use; None for no limit.
    time_limit: float | None = None
    #: The MILP solver cvxpy runs the exact path on (``--solver``, checked when a solve is needed).
    solver: str = DEFAULT_SOLVER
    #: Clusters to compile as if they were lost (``--drain``): they take no work.
    drain: tuple[str, ...] = ()
    #: The previous placement (its ``placement.yaml``): moving a stage away costs moveCost, and
    #: when it was compiled from these very inputs it is given back as it is. The front doors
    #: read it from ``out``; :func:`compile_policies` takes it from here.
    previous: Previous = field(default_factory=Previous)
    #: A git revision whose committed ``out/placement.yaml`` is the previous placement instead of
    #: the one in ``out`` (``compile --check --base``: the reviewed base, not the change).
    base: str | None = None
    #: Render what fits and list the rest as unplaced instead of failing (``--allow-unplaced``).
    allow_unplaced: bool = False
    #: With ``allow_unplaced``: the stages (``PIPELINE/STAGE``) the previous placement ran that
    #: may be left out (``--allow-unplaced=STAGE,...``); None: any (a what-if scenario). Leaving
    #: out any other stage the previous placement ran is an error: running work is never
    #: dropped silently.
    may_drop: tuple[str, ...] | None = ()
    #: Told when each stage starts and ends (a status line on terminals); silent by default.
    reporter: Reporter = NULL_REPORTER
    #: Keep the output folder's cluster folders whose inputs did not change instead of rendering
    #: them again (``fleetc compile`` when it writes; :mod:`fleetc.render.record`). The files of
    #: such a compile are then ``Compiled.files`` and ``Compiled.kept``.
    reuse: bool = False
    #: The output folder's cluster folders that may be kept (:func:`fleetc.emit.reusable_folders`),
    #: asked for when rendering starts: with ``reuse``, :func:`compile_fleet` checks them in
    #: ``out`` meanwhile; :func:`compile_policies` keeps those whose inputs did not change
    #: (None: it renders everything).
    reusable: Callable[[], Reusable] | None = None


@dataclass(frozen=True)
class Compiled:
    model: FleetModel
    placement: Placement
    files: Mapping[str, str]  # path under the output folder -> file text
    #: Settings that have no Kubernetes form (severity "warning"), sorted; never fatal.
    warnings: tuple[Diagnostic, ...] = ()
    #: Why the output folder's placement.yaml was ignored as the previous placement ('' if not).
    previous_ignored: str = ""
    #: Files of the output folder the compile keeps as they are, not in ``files`` (``Options.reuse``).
    kept: Kept | None = None


@dataclass(frozen=True)
class Loaded:
    policies: PolicySet
    documents: int
    where: str  # how to name the input in messages
    #: The policy paths fleetc was given, and the folder they are relative to: provenance
    #: names files relative to them.
    roots: tuple[str, ...] = ()
    workdir: str = "."
    #: What validate found worth saying but not fatal (a GPU alternative the fleet lacks), located.
    warnings: tuple[Diagnostic, ...] = ()


def load_policies(paths: Sequence[str], reporter: Reporter = NULL_REPORTER, workdir: Path = Path(".")) -> Loaded:
    """Read and validate the policies; raise :class:`PolicyError` with every problem found."""
    with phase(reporter, "load"):
        loaded = load_paths(paths, workdir)
    return _validated(loaded, ", ".join(paths), reporter, tuple(paths), workdir)


def check_policies(loaded: Loaded) -> FleetModel:
    """What ``validate`` checks beyond the documents: everything short of placing. The model is
    built (a Fleet is there, each stage's data lies in one jurisdiction, ...), so validate
    refuses what compile would refuse before it solves. Placement outcomes (no cluster has
    room, a rule no cluster satisfies) are the solver's to find, and left to compile."""
    return resolve(loaded.policies, loaded.where, roots=loaded.roots, workdir=loaded.workdir)


def load_policy_sources(sources: Sequence[tuple[str, bytes]], where: str, roots: Sequence[str] = (),
                        workdir: Path = Path("."), unread: Sequence[Diagnostic] = ()) -> Loaded:
    """Validate policies given as (display path, content) pairs, e.g. read from git at a revision;
    ``roots``: the policy paths they were read under, relative to ``workdir`` unless absolute;
    ``unread``: the entries there that could not be read, reported with the policies' errors."""
    loaded = load_sources(sources)
    return _validated(LoadResult(loaded.documents, (*unread, *loaded.diagnostics)), where, NULL_REPORTER,
                      tuple(roots), workdir)


def _validated(loaded: LoadResult, where: str, reporter: Reporter, roots: tuple[str, ...],
               workdir: Path) -> Loaded:
    with phase(reporter, "validate"):
        policies, diagnostics = validate(loaded.documents)
    problems = [*loaded.diagnostics, *(d for d in diagnostics if d.severity != "warning")]
    if problems:
        raise PolicyError(problems)
    warnings = tuple(sorted((d for d in diagnostics if d.severity == "warning"), key=_DIAGNOSTIC_ORDER))
    return Loaded(policies, len(loaded.documents), where, roots, str(workdir), warnings)


@freezes_undone
def compile_fleet(options: Options) -> Compiled:
    """``fleetc compile``: load and validate the policies, take the output folder's
    placement.yaml (or with ``base``, the one committed at that revision) as the previous
    placement, place and render; with ``reuse``, keep the output folder's cluster folders
    that no change reaches. Writes nothing."""
    if options.base is not None:
        loaded = load_policies(options.paths, options.reporter, options.workdir)
        from fleetc.git.flow import previous_at  # fleetc.git imports this module

        compiled = compile_policies(loaded, dataclasses.replace(
            options, previous=previous_at(options.base, options.out, options.workdir)))
        _check_gitops_path(compiled.model, options.workdir / options.out, loaded)
        return compiled
    from fleetc.emit import RECORD, reusable_folders

    out = options.workdir / options.out
    with contextlib.ExitStack() as children:
        # Read meanwhile on the other core: a large fleet's placement.yaml takes a second (it is
        # needed to place); checking its cluster folders byte for byte a few more (needed to
        # render), started once the policies are read (loading takes both cores).
        reading = children.enter_context(Background(lambda: read_previous(Path(options.out), options.workdir),
                                                    _file_size(out / PLACEMENT_FILE)))
        loaded = load_policies(options.paths, options.reporter, options.workdir)
        checking = (children.enter_context(Background(lambda: reusable_folders(out), _file_size(out / RECORD)))
                    if options.reuse else None)
        previous, ignored = reading.result()
        compiled = compile_policies(loaded, dataclasses.replace(
            options, previous=previous, reusable=None if checking is None else checking.result))
    _check_gitops_path(compiled.model, out, loaded)
    return dataclasses.replace(compiled, previous_ignored=ignored)


def _check_gitops_path(model: FleetModel, out: Path, loaded: Loaded) -> None:
    """Refuse a Fleet whose ``spec.gitops.path`` is not where the output folder is in its git
    repository: the engines would read a folder this compile neither writes nor checks."""
    root = _repository_root(out)
    if root is None or not model.clusters:
        return  # no repository (nothing to compare with), or nothing rendered for an engine
    from fleetc.render.gitops import repository_folder

    where = Path(os.path.abspath(out)).relative_to(root).as_posix()
    folder = repository_folder(model.gitops)
    if where == (folder or "."):
        return
    source = model.clusters[0].source
    problem = Diagnostic(model.display(source.path), 0, 0, "spec.gitops.path",
                         f"the engines would read {folder or '.'}/ of the repository, but this compile "
                         f"writes and checks {where}/",
                         hint=f"set spec.gitops.path: {where}, or compile into --out {folder or '.'}",
                         document=source.document)
    raise PolicyError(positioned([problem], loaded.policies))


def _repository_root(out: Path) -> Path | None:
    """The work tree of the git repository holding the output folder, found as git finds it
    (the nearest parent with ``.git``, a folder or a worktree's file), or None. Not
    :func:`fleetc.git.repo.repo_root`: that imports gitpython, which a plain compile never
    loads otherwise (``diff`` and ``--commit`` do)."""
    return next((folder for folder in Path(os.path.abspath(out)).parents if (folder / ".git").exists()), None)


def _file_size(path: Path) -> int:
    """The size of the file ``path`` (0 where there is none, or it cannot be read)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


@freezes_undone
def explain_stage(target: str, options: Options) -> Explanation:
    """``fleetc explain``: why stage ``target`` (``PIPELINE/STAGE``) is where the placement in the
    output folder puts it. Solves nothing: a placement.yaml that is missing, unreadable or
    compiled from other inputs (the policies, the placement version, ``--drain``,
    ``FLEETC_LARGE`` or the solver's version changed) is an error saying so, since explaining
    it against these policies would mislead. The solver is the one the placement records."""
    from fleetc.placement import explain as why

    loaded = load_policies(options.paths, options.reporter, options.workdir)
    model = resolve(loaded.policies, loaded.where, drained=options.drain, roots=loaded.roots,
                    workdir=loaded.workdir)
    key = why.find_stage(model, target)
    where = (Path(options.out) / PLACEMENT_FILE).as_posix()
    previous, ignored = read_previous(Path(options.out), options.workdir)
    if ignored:
        raise FleetcError(f"cannot explain: {ignored}")
    if not previous.inputs:
        raise FleetcError(f"cannot explain: {where} does not exist; run `fleetc compile` first")
    compiled_with = dataclasses.replace(options, solver=previous.solver or DEFAULT_SOLVER)
    placement = _placement_in_out(model, previous, inputs_digest(loaded.policies, compiled_with))
    if placement is None:
        if previous.drained != tuple(sorted(set(options.drain))):
            raise FleetcError(f"cannot explain: {where} was compiled {drain_words(previous.drained)}, this explain "
                              f"runs {drain_words(options.drain)}; give explain{drain_flags(previous.drained)} to "
                              f"explain it, or run `fleetc compile{drain_flags(options.drain)}` first")
        raise FleetcError(f"cannot explain: {where} is stale: it does not hold for these policies (they, "
                          "FLEETC_LARGE, the solver's version or fleetc's placement version changed since); "
                          f"run `fleetc compile{drain_flags(options.drain)}` first")
    from fleetc.placement.fixes import fixes
    from fleetc.placement.hints import taint_hints

    explanation = why.explain(model, placement, key, previous.clusters)
    fix = "" if explanation.chosen else fixes(model, placed_clusters(placement), [key])[0].text
    return dataclasses.replace(explanation, hints=tuple(taint_hints(model, [key])), fix=fix)


def drain_flags(drained: Sequence[str]) -> str:
    """`` --drain a --drain b`` for the clusters ``drained`` (sorted), '' for none."""
    return "".join(f" --drain {name}" for name in sorted(set(drained)))


def drain_words(drained: Sequence[str]) -> str:
    """``with --drain a --drain b`` or ``without --drain``."""
    return f"with{drain_flags(drained)}" if drained else "without --drain"


def fix_lines(compiled: Compiled) -> list[str]:
    """The smallest change that places each stage ``compiled`` leaves out, a line each
    (:mod:`fleetc.placement.fixes`; joint fixes after the stages' own), as ``fleetc compile
    --allow-unplaced`` prints them."""
    from fleetc.placement.fixes import fixes

    left_out = [p.stage for p in compiled.placement.stages if not p.assignments]
    if not left_out:
        return []
    return [fix.text for fix in fixes(compiled.model, placed_clusters(compiled.placement), left_out)]


def placed_clusters(placement: Placement) -> dict[str, dict[str, int]]:
    """Stage key -> cluster -> replicas of the stages ``placement`` places."""
    return {p.stage: {a.cluster: a.replicas for a in p.assignments} for p in placement.stages if p.assignments}


@freezes_undone
def diff_fleet(base_ref: str, options: Options, scenarios: Sequence[Scenario] = ()) -> Report:
    """``fleetc diff``: the compile of the policies at ``base_ref`` (read from git's objects,
    nothing checked out) against the compile of the working tree, each with its own side's
    placement.yaml as the previous placement. An error in one side's compile carries ``side``.
    Each of ``scenarios`` is compared with the working tree's placement as
    :func:`what_if_fleet` does, and reported below the diff (``Report.scenarios``: the
    pull-request comment of a repository that keeps scenario files)."""
    from fleetc.git.flow import policy_sources_at
    from fleetc.report import EMPTY, compare, snapshot, untouched_moves
    from fleetc.report.review import move_reasons

    for scenario in scenarios:
        _check_pipelines(scenario, options)
    sources, unread, base_previous = policy_sources_at(base_ref, options.paths, options.out, options.workdir)
    at_base = f"at {base_ref}"
    base = EMPTY
    before: dict[str, dict[str, int]] = {}
    if sources or unread:
        with _side(at_base):
            loaded = load_policy_sources(sources, f"{', '.join(options.paths)} {at_base}", options.paths,
                                         options.workdir, unread)
            compiled = compile_policies(loaded, dataclasses.replace(options, previous=base_previous))
        base = snapshot(compiled.model, compiled.placement, compiled.files)
        before = placed_clusters(compiled.placement)
    with _side("in the working tree"):
        compiled = compile_fleet(options)
    head = snapshot(compiled.model, compiled.placement, compiled.files)
    untouched = untouched_moves(compiled.model, before, compiled.placement)
    idle = frozenset(p.stage for p in compiled.placement.stages
                     if any(head.idle.get(c) for c in before.get(p.stage, {})))
    explained = move_reasons(compiled.model, compiled.placement, before,
                             skip=idle | {m.stage for m in untouched})
    report = compare(base, head, base_label=base_ref, head_label="working tree", out=options.out,
                     untouched=untouched, move_cost=compiled.model.move_cost, moves_explained=explained)
    unrendered, user_files = _out_tree(base_ref, options, compiled)
    return dataclasses.replace(report, scenarios=tuple(_what_if(s, options, compiled) for s in scenarios),
                               unrendered=unrendered, user_files=user_files)


def _out_tree(base_ref: str, options: Options, compiled: Compiled
              ) -> tuple[tuple[tuple[str, str], ...], tuple[ObjectDiff, ...]]:
    """What of the working tree's output folder no compile makes, for ``diff``: the files
    fleetc does not render there (``compile --check`` fails on them), and the user's files
    (``local/``) that differ from ``base_ref``'s, diffed whole."""
    from fleetc.emit import changes, user_files
    from fleetc.git.flow import user_files_at
    from fleetc.report import user_file_diffs

    out = options.workdir / options.out
    unrendered = tuple((c.path, c.status) for c in changes(out, compiled.files) if c.status in ("unrendered", "link"))
    now = {rel: (out / rel).read_text(encoding="utf-8", errors="replace") for rel in user_files(out)}
    return unrendered, user_file_diffs(user_files_at(base_ref, options.out, options.workdir), now, options.out)


@freezes_undone
def what_if_fleet(scenario: Scenario, options: Options) -> WhatIf:
    """``fleetc diff --what-if``: the compile of the policies as they are (the output folder's
    placement.yaml the previous placement) against a compile of them in ``scenario`` (clusters
    lost, GPU counts or prices changed, pipelines added), without changing a policy. The scenario
    starts from the current placement, so a stage moves only where the scenario makes that worth
    its move cost, and what no longer fits is listed as unplaced, not an error."""
    _check_pipelines(scenario, options)
    with _side("as they are"):
        now = compile_fleet(options)
    return _what_if(scenario, options, now)


def _check_pipelines(scenario: Scenario, options: Options) -> None:
    """Each ``pipeline=FILE`` names a file inside the working folder (the repository): a scenario
    comes with a pull request, and its report is posted where anyone reads it, so it may not
    read a file the repository does not hold (``/etc/passwd``, ``../../secrets.yaml``, or a
    link out). The file is then read as a policy file (bounded in size, never echoed whole)."""
    settings = [s for s in scenario.settings if s.startswith("pipeline=")]  # in the order of its pipelines
    base = os.path.realpath(options.workdir)
    for setting, path in zip(settings, scenario.pipelines, strict=True):
        real = os.path.realpath(options.workdir / path)
        if Path(path).is_absolute() or os.path.commonpath([base, real]) != base:
            raise UsageError(f"{scenario.named(setting)}: outside the working folder (the repository)\n"
                             "  hint: name a policy file in the repository, relative to the working folder "
                             "(or, in a scenario file, to its folder)")
        if not (options.workdir / path).is_file():
            raise UsageError(f"{scenario.named(setting)}: no such file\n"
                             "  hint: name a policy file with the AIGCPipeline(s) to add")


def _what_if(scenario: Scenario, options: Options, now: Compiled) -> WhatIf:
    """``scenario`` compiled from the placement ``now`` (the policies as they are) and compared with it."""
    from fleetc import scenario as scenarios
    from fleetc.report import capacity, snapshot, what_if

    with _side(f"in the scenario {scenario.file}" if scenario.file else "in the scenario"):
        loaded = load_policies((*options.paths, *scenario.pipelines), options.reporter, options.workdir)
        # Provenance stays relative to the policy paths, so only what the scenario changes differs.
        changed = dataclasses.replace(loaded, policies=scenarios.apply(loaded.policies, scenario),
                                      roots=tuple(options.paths))
        previous, _ = read_previous(Path(options.out), options.workdir)
        # A scenario is never the compile its placement.yaml was made from: it is solved, from there.
        settings = dataclasses.replace(options, drain=(*options.drain, *scenario.drain), allow_unplaced=True,
                                       may_drop=None, previous=dataclasses.replace(previous, inputs=""))
        then = compile_policies(changed, settings)
    unplaced = [(p.stage, p.reason) for p in then.placement.stages if not any(a.replicas for a in p.assignments)]
    return what_if(snapshot(now.model, now.placement, now.files), snapshot(then.model, then.placement, then.files),
                   (capacity(now.model), capacity(then.model)), unplaced, scenario.label, options.out,
                   source=scenario.file, settings=scenario.settings)


@contextlib.contextmanager
def _side(side: str) -> Iterator[None]:
    """Name the side of a diff whose compile failed on the error (the CLI says which)."""
    try:
        yield
    except FleetcError as err:
        err.side = side
        raise


def compile_policies(loaded: Loaded, options: Options = Options()) -> Compiled:
    """Place every stage and render the output tree. Pure: no I/O."""
    from fleetc.render import render

    report = options.reporter
    with phase(report, "resolve"):
        model = resolve(loaded.policies, loaded.where, drained=options.drain, roots=loaded.roots,
                        workdir=loaded.workdir)
    with phase(report, "place"):
        placement = place_model(model, inputs_digest(loaded.policies, options), options)
    if options.allow_unplaced:
        refuse_dropped(model, placement, options.previous, options.may_drop)
    report.gap(placement.gap)
    def located(found: Sequence[Diagnostic]) -> tuple[Diagnostic, ...]:
        return positioned([dataclasses.replace(w, path=model.display(w.path))
                           for w in (*degraded_serving(model, placement), *found)], loaded.policies)

    with phase(report, "render"):  # the warnings are located (seconds on a large fleet) meanwhile
        try:
            rendered = render(model, placement, locate=located,
                              reuse=None if options.reusable is None else options.reusable())
        except PolicyError as err:  # two policy fields that render one object (render.common.folder_files)
            raise PolicyError(positioned([dataclasses.replace(d, path=model.display(d.path))
                                          for d in err.diagnostics], loaded.policies)) from None
    warnings = tuple(sorted({*loaded.warnings, *rendered.warnings}, key=_DIAGNOSTIC_ORDER))
    return Compiled(model, placement, rendered.files, warnings, kept=rendered.kept)


def refuse_dropped(model: FleetModel, placement: Placement, previous: Previous,
                   may_drop: tuple[str, ...] | None) -> None:
    """Raise :class:`PlacementError` when ``placement`` leaves out a stage ``previous`` ran that
    ``may_drop`` does not name (None: any may go); a :class:`UsageError` for a name in
    ``may_drop`` that is no stage."""
    if may_drop is None:
        return
    from fleetc.errors import did_you_mean

    keys = [s.key for s in model.stages]
    for name in may_drop:
        if name not in keys:
            hint = did_you_mean(name, keys)
            raise UsageError(f"--allow-unplaced names no stage '{name}' (expected PIPELINE/STAGE)"
                             + (f"; {hint}" if hint else ""))
    dropped = [p for p in placement.stages if not any(a.replicas for a in p.assignments)
               and any(previous.clusters.get(p.stage, {}).values()) and p.stage not in may_drop]
    if not dropped:
        return
    def ran(key: str) -> str:
        return ", ".join(sorted(c for c, n in previous.clusters[key].items() if n))

    err = PlacementError([f"{p.stage}: runs on {ran(p.stage)} in the previous placement and would be left out: "
                          f"{p.reason}" for p in dropped])
    err.headline = "--allow-unplaced would stop stages the previous placement runs"
    err.hint = ("to drop them on purpose, name them: --allow-unplaced="
                + ",".join(p.stage for p in dropped))
    raise err


def positioned(warnings: Sequence[Diagnostic], policies: PolicySet) -> tuple[Diagnostic, ...]:
    """``warnings`` (found on the model, which has no lines) located in their policy documents:
    each gets the line and column of its field in the document it names (a file may hold
    several policies, each with its own ``spec.stages[0]``), sorted and said once."""
    documents: dict[tuple[str, int], Document] = {}
    for kind in dataclasses.fields(policies):
        for parsed in getattr(policies, kind.name):
            documents[(parsed.doc.path, parsed.doc.index)] = parsed.doc
    found = set()
    located: dict[tuple[str, int, str], Position | None] = {}  # (file, document, field) -> where; fields recur
    for warning in warnings:
        if warning.line == 0:
            where = (warning.path, warning.document, warning.field)
            if where not in located:
                doc = documents.get((warning.path, warning.document))
                located[where] = None if doc is None else _locate(doc, _field_path(warning.field))
            position = located[where]
            if position is not None:
                warning = dataclasses.replace(warning, line=position[0], column=position[1])
        found.add(warning)
    return tuple(sorted(found, key=_DIAGNOSTIC_ORDER))


def _locate(doc: Document, path: FieldPath) -> Position:
    """Where ``path`` is in ``doc``: at its key where it is a mapping's, or at its nearest
    parent's key where the document lacks it."""
    return doc.locate(path, key=not doc.holds(path) or (bool(path) and isinstance(path[-1], str)))


#: Diagnostics' own order (``order=True`` compares their fields in turn), as a sort key: ~5x
#: faster than the generated comparisons on a large fleet's 15,000 warnings.
_DIAGNOSTIC_ORDER = operator.attrgetter(*(f.name for f in dataclasses.fields(Diagnostic) if f.compare))


def _field_path(text: str) -> FieldPath:
    """``spec.stages[1].inputs[0]`` -> ``('spec', 'stages', 1, 'inputs', 0)``."""
    return tuple(int(index) if index else name for name, index in _FIELD_PART.findall(text))


_FIELD_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def place_model(model: FleetModel, inputs: str, options: Options) -> Placement:
    """The placement of ``model``, tagged with its ``inputs`` digest: the previous one when it
    was compiled from the same inputs and still holds (see :func:`_given_back`), else the
    optimizer's."""
    given_back = _given_back(model, inputs, options)
    if given_back is not None:  # neither cvxpy nor HiGHS is imported: `--check` stays light
        return given_back
    from fleetc.placement.fixes import fixes
    from fleetc.placement.hints import capacity_hints, refused_stages, taint_hints
    from fleetc.placement.optimize import place  # imports scipy and HiGHS: only when solving

    check_solver(options.solver)
    try:
        placement = place(model, placement_settings(options))
    except PlacementError as err:
        hints = [err.hint] if err.hint else []
        capacity = capacity_hints(model) if any(_about_capacity(r) for r in err.reasons) else []
        refused = refused_stages(model, err.reasons)
        err.hint = "\n  hint: ".join(hints + taint_hints(model, refused) + capacity)
        err.fixes = tuple(fix.text for fix in fixes(model, err.placed, refused))
        raise
    return dataclasses.replace(placement, inputs=inputs,
                               solver="" if options.solver == DEFAULT_SOLVER else options.solver)


def placement_settings(options: Options) -> Settings:
    """What the placement is asked, of everything a command is told (:class:`Options`)."""
    from fleetc.placement.problem import Settings  # numpy and scipy: only when solving

    return Settings(time_limit=options.time_limit, previous=options.previous.clusters,
                    recorded=options.previous.recorded, allow_unplaced=options.allow_unplaced,
                    large=options.large, solver=options.solver,
                    on_gap=options.reporter.gap, on_placed=options.reporter.placed)


def _about_capacity(reason: str) -> bool:
    """Whether a refusal quotes capacity figures (free GPUs, cores or memory, room for replicas)."""
    return " free " in reason or "room for" in reason


def inputs_digest(policies: PolicySet, options: Options) -> str:
    """What the placement depends on, hashed: the placement version (bumped on purpose when how
    fleetc places changes, see :data:`fleetc.placement.PLACEMENT_VERSION`), the solver and its
    version (:func:`fleetc.placement.solvers.solver_label`), the drained clusters, the size
    above which a component takes the large path when it is not :data:`fleetc.placement.LARGE`
    (``FLEETC_LARGE``: the paths place differently; left out otherwise, so that the digests
    committed before it counted stay as they were), and every policy document's data (not its
    file: moving a policy between files changes nothing). fleetc's release and its source bytes
    are left out on purpose: an upgrade or a comment edit that places the same must not make
    every committed ``out/`` stale. A Fleet's clusters are hashed in name order: the order it
    lists them in changes no placement (the optimizer sorts them), so reordering them gives the
    placement back."""
    documents = sorted(_digested(parsed) for kind in dataclasses.fields(policies)
                       for parsed in getattr(policies, kind.name))
    large = {} if options.large in (None, LARGE) else {"large": options.large}
    payload = json.dumps({"placement": PLACEMENT_VERSION, "solver": solver_label(options.solver),
                          "drain": sorted(options.drain), **large,
                          "policies": documents})
    return "sha256:" + hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _digested(parsed: Parsed[Any]) -> str:
    """A policy document's data as the inputs digest hashes it: JSON, keys sorted, a Fleet's
    ``spec.clusters`` by name."""
    text = json.dumps(parsed.doc.data, sort_keys=True, ensure_ascii=False) if parsed.json is None else parsed.json
    if not isinstance(parsed.obj, kinds.Fleet):
        return text
    data = json.loads(text)
    data["spec"]["clusters"] = sorted(data["spec"]["clusters"], key=lambda cluster: str(cluster["name"]))
    return json.dumps(data, sort_keys=True, ensure_ascii=False)


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
    previous = options.previous
    if (previous.reasons and not options.allow_unplaced) or previous.time_limit not in (None, options.time_limit):
        return None
    return _placement_in_out(model, previous, inputs, allow_unplaced=options.allow_unplaced)


def _gpus_per_replica(known: Mapping[str, Cluster], stage: Stage, cluster: str) -> int:
    """The stage's GPUs per replica on ``cluster`` (a stage asking for throughput: its type's);
    its own figure on a cluster the model does not know (the verifier then names it)."""
    from fleetc.placement.rules import on_cluster

    return on_cluster(stage, known[cluster]).gpus if cluster in known else stage.gpus


def _placement_in_out(model: FleetModel, previous: Previous, inputs: str, *,
                      allow_unplaced: bool = True) -> Placement | None:
    """The placement a placement.yaml holds, when it was compiled from these same ``inputs``,
    lists exactly the model's stages and the independent verifier still accepts it."""
    from fleetc.placement.verify import verify

    if not inputs or previous.inputs != inputs or previous.stages != {stage.key for stage in model.stages}:
        return None
    known = {c.name: c for c in model.clusters}
    placement = Placement(
        stages=tuple(StagePlacement(stage.key, tuple(
            Assignment(cluster, replicas, replicas * _gpus_per_replica(known, stage, cluster))
            for cluster, replicas in sorted(previous.clusters.get(stage.key, {}).items())),
            previous.scores[stage.key], previous.reasons.get(stage.key, ""))
            for stage in model.stages),
        objective=previous.objective, bound=previous.bound, method=previous.method, inputs=inputs,
        time_limit=previous.time_limit, optimal=previous.optimal, solver=previous.solver)
    return None if verify(model, placement, allow_unplaced=allow_unplaced) else placement
