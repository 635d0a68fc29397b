"""Look-ups over the model, built once per render so rendering stays linear in its size."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from fleetc.errors import InternalError
from fleetc.model import (
    Assignment,
    DataPolicy,
    FleetModel,
    Input,
    Placement,
    Platform,
    Source,
    Stage,
    StagePlacement,
    Team,
)
from fleetc.placement.rules import rendered_on, slots_per_gpu, uses_shared_slots

Work = list[tuple[Stage, Assignment]]


def _storage_secrets(model: FleetModel) -> dict[tuple[str, str], str]:
    """(namespace, url) -> the Secret an input reading or an output writing ``url`` there names
    (validated: at most one per namespace and URL)."""
    urls = {(s.key, o.name): o.url for s in model.stages for o in s.outputs}
    found: dict[tuple[str, str], str] = {}
    for stage in model.stages:
        named: list[tuple[str | None, str | None]] = [(o.url, o.secret_name) for o in stage.outputs]
        for item in stage.inputs:
            url = item.url if item.from_stage is None else urls.get((f"{stage.pipeline}/{item.from_stage}",
                                                                     str(item.from_output)))
            named.append((url, item.secret_name))
        for url, secret in named:
            if secret is not None and url is not None:
                found.setdefault((stage.namespace, url), secret)
    return found


def _writers(model: FleetModel) -> dict[str, tuple[Stage, ...]]:
    found: dict[str, dict[str, Stage]] = defaultdict(dict)
    for stage in model.stages:
        for output in stage.outputs:
            found[output.url][stage.key] = stage
    return {url: tuple(by_key[k] for k in sorted(by_key)) for url, by_key in found.items()}


@dataclass(frozen=True)
class Context:
    model: FleetModel
    output_urls: Mapping[tuple[str, str], str]  # (stage key, output name) -> url
    writers: Mapping[str, tuple[Stage, ...]]  # URL -> the stages of the compile that write it, by key
    namespace_pipelines: Mapping[str, frozenset[str]]  # namespace -> pipelines using it
    governing: Mapping[str, tuple[Platform, ...]]  # pipeline -> platforms governing it, by name
    pipeline_sources: Mapping[str, Source]  # pipeline -> its policy file (field: metadata)
    gpu_slots: int  # time-sliced slots per GPU; 1 when GPUs are not shared
    stages: Mapping[tuple[str, str], Stage]  # (pipeline, stage name) -> stage
    waited_for: frozenset[str]  # keys of the stages another stage depends on
    #: (namespace, url) -> the Secret an input or output naming it there names (at most one)
    storage_secrets: Mapping[tuple[str, str], str]
    #: (team, cluster) -> the GPUs of the team's ``guaranteed`` the cluster's queue keeps for it
    #: (:func:`team_guarantees`)
    guarantees: Mapping[tuple[str, str], int] = field(default_factory=dict)
    #: What a render makes once and asks for again (run ids, the containers waiting for the
    #: same upstreams: :mod:`.order`), for as long as this Context lives. Not an argument: a
    #: Context made by ``replace`` starts an empty one, as it may render differently.
    memo: dict[Hashable, Any] = field(default_factory=dict, init=False, compare=False, repr=False)

    @classmethod
    def of(cls, model: FleetModel) -> Context:
        pipelines: dict[str, set[str]] = defaultdict(set)
        for s in model.stages:
            pipelines[s.namespace].add(s.pipeline)
        names = sorted({s.pipeline for s in model.stages})
        return cls(
            model=model,
            output_urls={(s.key, o.name): o.url for s in model.stages for o in s.outputs},
            writers=_writers(model),
            namespace_pipelines={ns: frozenset(p) for ns, p in pipelines.items()},
            governing={n: tuple(p for p in model.platforms if n in p.pipelines) for n in names},
            pipeline_sources={s.pipeline: replace(s.source, field="metadata") for s in model.stages},
            gpu_slots=slots_per_gpu(model),
            stages={(s.pipeline, s.name): s for s in model.stages},
            waited_for=frozenset(f"{s.pipeline}/{d}" for s in model.stages for d in s.dependencies),
            storage_secrets=_storage_secrets(model),
        )

    def fleet_source(self, field: str) -> Source:
        """``field`` of the Fleet policy (every cluster comes from it)."""
        return replace(self.model.clusters[0].source, field=field)

    @property
    def data_policy(self) -> DataPolicy | None:
        """The data policy of this compile (fleetc reads at most one; it has no selector, so it
        applies to every pipeline)."""
        return self.model.data_policies[0] if self.model.data_policies else None

    def storage_secret(self, stage: Stage, url: str) -> str | None:
        """The Secret ``stage``'s pods reach ``url`` with, if one is named for it in their namespace."""
        return self.storage_secrets.get((stage.namespace, url))

    def stage(self, pipeline: str, name: str) -> Stage | None:
        return self.stages.get((pipeline, name))

    def depended_on(self, stage: Stage) -> bool:
        return stage.key in self.waited_for

    def team(self, stage: Stage) -> Team | None:
        """The team of the stage's pipeline (AIGCPlatform ``spec.teams``), if any."""
        return self.model.team_of(stage.pipeline)

    def platforms(self, pipeline: str) -> tuple[Platform, ...]:
        return self.governing.get(pipeline, ())

    def shares_gpus(self, stage: Stage) -> bool:
        return uses_shared_slots(self.model, stage)

    def input_url(self, stage: Stage, spec: Input) -> str:
        """A ``source:`` input's URL, or the URL of the output a ``from:`` input names."""
        if spec.from_stage is None and spec.url is not None:
            return spec.url
        ref = (f"{stage.pipeline}/{spec.from_stage}", str(spec.from_output))
        if ref not in self.output_urls:
            raise InternalError(f"{stage.key}: input {spec.name!r} refers to unknown output {ref[0]}.{ref[1]}")
        return self.output_urls[ref]

    def input_urls(self, stage: Stage) -> list[tuple[int, str]]:
        """(input index, URL) of every input of the stage."""
        return [(i, self.input_url(stage, spec)) for i, spec in enumerate(stage.inputs)]


def placements(model: FleetModel, placement: Placement) -> list[tuple[Stage, StagePlacement]]:
    """Each model stage with its placement, in model order."""
    by_key = {p.stage: p for p in placement.stages}
    missing = [s.key for s in model.stages if s.key not in by_key]
    if missing:
        raise InternalError(f"placement has no entry for stage(s): {', '.join(missing)}")
    return [(s, by_key[s.key]) for s in model.stages]


def work_by_cluster(model: FleetModel, placed: list[tuple[Stage, StagePlacement]]) -> dict[str, Work]:
    """Cluster name -> the stages that run pods there with their assignment, in model order;
    each stage as it runs there (:func:`rendered_on`: a stage asking for throughput with the
    GPUs of the cluster's type, a CPU-only stage on a GPU cluster tolerating its derived taint)."""
    clusters = {c.name: c for c in model.clusters}
    work: dict[str, Work] = defaultdict(list)
    for stage, p in placed:
        for a in p.assignments:
            if a.replicas > 0:
                work[a.cluster].append((rendered_on(stage, clusters[a.cluster]), a))
    return dict(work)


def queue_gpus(stages: list[Stage]) -> int:
    """The ``nvidia.com/gpu`` the pods of ``stages`` request together (time-sliced slots one
    each): what a queue admitting them all must hold."""
    return sum(stage.pods * stage.pod_gpus for stage in stages)


def team_guarantees(model: FleetModel, work: Mapping[str, Work]) -> dict[tuple[str, str], int]:
    """(team, cluster) -> the part of the team's ``guaranteed`` GPUs of the cluster's type that
    the cluster's queue for the team keeps (Volcano Queue ``guarantee``): the guaranteed GPUs of
    a type go to the clusters of that type where the team's gangs run, in cluster name order,
    each at most the GPUs those gangs request there (:func:`queue_gpus`)."""
    shares: dict[tuple[str, str], int] = {}
    for team in model.teams:
        for gpu_type, guaranteed in team.guaranteed:
            left = guaranteed
            for cluster in model.clusters:
                if cluster.gpu_type != gpu_type or left <= 0:
                    continue
                gangs = [s for s, _ in work.get(cluster.name, []) if s.is_gang and s.pipeline in team.pipelines]
                share = min(left, queue_gpus(gangs))
                if share:
                    shares[(team.name, cluster.name)] = share
                    left -= share
    return shares
