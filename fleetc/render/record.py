"""``.fleetc/render``: what each cluster's folder was rendered from, so that a recompile renders
again only the folders a change reaches.

A cluster's two layers (``clusters/<cluster>/infra/`` and ``workloads/``, :mod:`fleetc.render`)
are a pure function of the cluster, the stages placed there with their assignments, and a few
fleet-wide facts the renderer looks up (:class:`fleetc.render.context.Context`). The record
holds, per cluster, a digest of those inputs (:func:`folder_inputs`) and a digest of the files
they gave (:func:`files_digest`). A compile that writes the output folder checks, beside its
load and placement, which folders still hold exactly the recorded files, each carrying the mark
fleetc put on it when it wrote it (:func:`fleetc.emit.reusable_folders`, :mod:`fleetc.infra.marks`:
the record is a plain file, so a forged one with a tampered manifest's digest keeps nothing, and
a checkout or a copy renders everything); a folder whose inputs digest is the recorded one is then kept
as it is instead of rendered (:class:`Kept`): at 1,000 clusters and 20,000 stages a one-line
change reaches a few folders of 1,000.

The inputs digest must change whenever the folder's bytes could, so it reads every fact the
renderer can reach from a cluster's work, and errs wide where that is cheap: a stage counts
with its whole pipeline (its dependencies and dependants, its from: inputs), a URL with every
stage writing it, a namespace with what is read of its pipelines (one or more, the first with its
policy file, the sovereign platform governing one) and the Secrets it names for the URLs of
the pipelines the cluster's stages and their writers belong to, and everything
the model holds beyond stages and clusters (platforms, teams, policies, GitOps settings) counts
for every folder. ``tests/test_render_record.py`` holds an incremental recompile to a full one
byte for byte over edits of every kind, and :data:`RENDER_VERSION` (in every digest) is bumped
whenever what the renderer writes changes, so an upgrade renders every folder again
(``tests/test_render_version.py`` fails when output changes without the bump). ``fleetc
compile --check``, what CI runs, always renders everything.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fleetc.delivery import INFRA, WORKLOADS
from fleetc.model import Cluster, Stage
from fleetc.render.cluster import sovereign_platform
from fleetc.render.context import Context, Work

#: The version of what the renderer writes, part of every inputs digest: bump it in the same
#: commit as any change to rendered output, so a recompile after an upgrade renders every
#: cluster's folder again. 1: the record is introduced. 2-7: Volcano task defaults, chained run
#: ids, Namespaces never pruned, failure ends. 8-9: the wait, mark and run scripts take policy
#: values as variables and arguments, failure markers, SIGTERM passed on. 10: node fit per
#: cluster (a gang split for the nodes of the cluster it runs on). 11: a CPU-only stage's pods
#: on a GPU cluster tolerate its derived GPU taint. 12: the run wrapper waits again for its
#: command after a trap interrupts its wait. 13: a marking pod's main container requests its
#: share less the marker container's, so the pod requests what the placement counted; a waiting
#: Kueue Job held on a LocalQueue its CPU-only release Job creates; serving waits for its DataLoad.
#: 14: a waiting Volcano Job's pods are scheduling-gated until its CPU-only release Job ungates them.
#: 15: a waiting serving Deployment's pods are scheduling-gated until its CPU-only releaser lets them go.
RENDER_VERSION = "15"

#: Where the record is written, relative to the output folder.
RENDER_RECORD = ".fleetc/render"

_HEADER = ("# fleetc's record of what each cluster's infra/ and workloads/ were rendered from (inputs) and\n"
           "# what they hold (files), so a compile renders again only what changed; written by fleetc\n")
_DIGEST_LENGTH = 32


@dataclass(frozen=True)
class Folder:
    """One cluster's rendered layers, as the record has them."""

    inputs: str  # folder_inputs' digest
    files: str  # files_digest of the layers' files


@dataclass(frozen=True)
class Reusable:
    """The cluster folders of an output folder that hold exactly their recorded files
    (:func:`fleetc.emit.reusable_folders` read and hashed them), with those files' paths.

    ``identity`` tells the output folder as it was read from a folder written since (its
    inode, its records' inodes and times): the writer keeps files only from the tree checked.
    ``stamps``: each file's stamp as it was read and hashed, those of files unchanged long
    enough before the check (:func:`fleetc.emit.reuse.file_stamp`); a file whose stamp still
    holds once linked into the new tree is not read and hashed again."""

    folders: Mapping[str, Folder] = field(default_factory=dict)
    paths: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    identity: tuple[int, ...] = ()
    stamps: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Kept:
    """The cluster folders of the output folder that a compile keeps as they are instead of
    rendering them (``clusters``, of ``source``'s)."""

    clusters: tuple[str, ...]
    source: Reusable

    @property
    def paths(self) -> tuple[str, ...]:
        """The kept files, relative POSIX paths."""
        return tuple(path for name in self.clusters for path in self.source.paths[name])


def layer_prefixes(cluster: str) -> tuple[str, str]:
    """The paths of a cluster's two layers, as prefixes of the files in them."""
    return f"clusters/{cluster}/{INFRA}/", f"clusters/{cluster}/{WORKLOADS}/"


def files_digest(files: Iterable[tuple[str, bytes]]) -> str:
    """A digest of files, given as (relative path, bytes) in path order."""
    digest = hashlib.sha256()
    for path, data in files:
        digest.update(f"{path}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:_DIGEST_LENGTH]


def record_text(folders: Mapping[str, Folder]) -> str:
    """The record: a line ``<cluster> <inputs> <files>`` per cluster, sorted."""
    return _HEADER + "".join(f"{name} {folders[name].inputs} {folders[name].files}\n" for name in sorted(folders))


def parse_record(text: str) -> dict[str, Folder]:
    """The folders a record lists; ValueError when it is not one :func:`record_text` wrote."""
    folders: dict[str, Folder] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name, inputs, files = line.split(" ")  # ValueError unless three fields
        if len(inputs) != _DIGEST_LENGTH or len(files) != _DIGEST_LENGTH or name in folders:
            raise ValueError(f"not a render record line: {line!r}")
        folders[name] = Folder(inputs, files)
    return folders


def folder_inputs(ctx: Context, work: Mapping[str, Work]) -> dict[str, str]:
    """Cluster name -> the digest of everything its two layers are rendered from (see the
    module's docstring for what counts). ``repr`` is the canonical form: the model holds
    frozen dataclasses of tuples, strings and numbers only, so it is complete and the same on
    every machine and hash seed."""
    shared = _shared_inputs(ctx)
    return {cluster.name: _digest("\n".join(_cluster_lines(ctx, shared, cluster, work.get(cluster.name, []))))
            for cluster in ctx.model.clusters}


@dataclass(frozen=True)
class _SharedInputs:
    """What the digests of all clusters read, computed once: the fleet's text, each stage's
    text by key, and the digests of each pipeline, namespace and cluster's guarantees."""

    fleet: str
    stages: Mapping[str, str]
    pipelines: Mapping[str, str]
    namespaces: Mapping[str, str]
    guarantees: Mapping[str, list[tuple[str, int]]]
    urls: Mapping[str, frozenset[str]]  # pipeline -> every URL its stages read or write


def _shared_inputs(ctx: Context) -> _SharedInputs:
    model = ctx.model
    # all but the stages, the clusters and policy_files (how messages name the files: only
    # warnings read it, and it holds the folder the policies were read from)
    fleet = repr((RENDER_VERSION, model.name, model.namespace, model.score_weights, model.class_weights,
                  model.platforms, model.gpu_policy, model.data_policies, model.move_cost, model.gitops,
                  model.teams, model.budgets, ctx.gpu_slots, ctx.fleet_source("")))
    texts = {stage.key: repr(stage) for stage in model.stages}
    urls: dict[str, set[str]] = defaultdict(set)
    for stage in model.stages:
        urls[stage.pipeline] |= {url for _, url in ctx.input_urls(stage)} | {o.url for o in stage.outputs}
    return _SharedInputs(fleet, texts, _pipeline_digests(ctx, texts), _namespace_digests(ctx),
                         _guarantees_by_cluster(ctx), {name: frozenset(found) for name, found in urls.items()})


def _pipeline_digests(ctx: Context, texts: Mapping[str, str]) -> dict[str, str]:
    """Pipeline name -> the digest of its stages' texts, in the model's order."""
    by_pipeline: dict[str, list[str]] = defaultdict(list)
    for stage in ctx.model.stages:
        by_pipeline[stage.pipeline].append(texts[stage.key])
    return {name: _digest("\n".join(stages)) for name, stages in by_pipeline.items()}


def _namespace_digests(ctx: Context) -> dict[str, str]:
    """Namespace -> the digest of what the renderer reads of its pipelines (:func:`_namespace_reads`;
    its storage Secrets are digested per URL a cluster's stages reach, :func:`_data_lines`)."""
    return {name: _digest(repr(_namespace_reads(ctx, name, members)))
            for name, members in ctx.namespace_pipelines.items()}


def _namespace_reads(ctx: Context, name: str, members: frozenset[str]) -> tuple[object, ...]:
    """What a cluster's objects read of the pipelines using namespace ``name`` (in the whole
    fleet, also those that do not run on the cluster): whether it is one pipeline (its Namespace
    is then labelled with it, :func:`fleetc.render.cluster.namespace`), the first by name with
    its file (the Namespace's, its LocalQueues' and release RBAC's source: ``kueue``,
    ``release``), and the sovereign platform governing one of them. Not the others: a pipeline
    added to a busy namespace then re-renders only the clusters its stages run on, not every
    cluster the namespace has a stage on (at 1,000 x 20,000: 7,700 files, not 123,000)."""
    first = min(members)
    sovereign = sovereign_platform(ctx, name)
    return (len(members) == 1, first, ctx.pipeline_sources[first], sovereign.name if sovereign else None)


def _guarantees_by_cluster(ctx: Context) -> dict[str, list[tuple[str, int]]]:
    """Cluster name -> the (team, GPUs) guaranteed there, sorted."""
    guarantees: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for (team, name), gpus in sorted(ctx.guarantees.items()):
        guarantees[name].append((team, gpus))
    return guarantees


def _cluster_lines(ctx: Context, shared: _SharedInputs, cluster: Cluster, placed: Work) -> list[str]:
    """The lines digested for one cluster: the fleet, the cluster and its guarantees, each stage
    placed there, then the data they read and write, their pipelines and namespaces."""
    lines = [shared.fleet, repr(cluster), repr(shared.guarantees.get(cluster.name, []))]
    # each stage as it runs here (on_cluster may change its GPUs), with its assignment
    lines += [f"{shared.stages[stage.key] if stage is _base(ctx, stage) else repr(stage)} {assignment!r}"
              for stage, assignment in placed]
    return lines + _data_lines(ctx, shared, placed)


def _data_lines(ctx: Context, shared: _SharedInputs, placed: Work) -> list[str]:
    """The URLs the stages ``placed`` read and write with each one's writers, then the digests of
    the pipelines of those stages and writers, of the stages' namespaces, and the storage Secret
    each of those namespaces names for a URL of those pipelines (a Secret is looked up by
    namespace and URL: one named for another URL, by another pipeline, does not count)."""
    urls = sorted({ctx.input_url(stage, item) for stage, _ in placed for item in stage.inputs}
                  | {output.url for stage, _ in placed for output in stage.outputs})
    writers = {url: ctx.writers.get(url, ()) for url in urls}
    lines = [f"{url} {' '.join(writer.key for writer in writers[url])}" for url in urls]
    named = {stage.pipeline for stage, _ in placed} | {w.pipeline for ws in writers.values() for w in ws}
    lines += [f"{name} {shared.pipelines[name]}" for name in sorted(named)]
    namespaces = sorted({stage.namespace for stage, _ in placed})
    lines += [f"{name} {shared.namespaces[name]}" for name in namespaces]
    reached = sorted(frozenset().union(*(shared.urls[name] for name in named)))  # holds ``urls``
    return lines + [f"{namespace} {url} {ctx.storage_secrets[namespace, url]}" for namespace in namespaces
                    for url in reached if (namespace, url) in ctx.storage_secrets]


def _base(ctx: Context, stage: Stage) -> Stage | None:
    """The model's stage of ``stage``'s key (the same object unless on_cluster changed it)."""
    return ctx.stage(stage.pipeline, stage.name)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:_DIGEST_LENGTH]
