"""Read the previous compile's ``placement.yaml``: where each stage was, so the optimizer can keep
it there, and the figures and inputs digest it reported, so a compile of the same inputs can
give the same placement back (:mod:`fleetc.compiler`).

:func:`parse_previous` is pure (text in, :class:`Previous` out) and raises :class:`ValueError`
on anything that is not a placement report; :func:`read_previous` is the I/O edge: a missing
file means no previous placement, a malformed one is ignored with a warning, never a crash.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml.error import YAMLError

from fleetc.model import Stage
from fleetc.state.placementfile import PLACEMENT_FILE, yaml_documents

#: More replicas than any stage may ask for (the policies' limit): not a report fleetc wrote.
MAX_REPLICAS = 100_000


@dataclass(frozen=True)
class Recorded:
    """What a report says of one stage besides where it runs: the figures its placement read
    (type, GPU types, GPUs per replica, one per GPU type for a stage asking for throughput,
    replicas) and its score. A recompile re-places a stage whose figures changed
    (:mod:`fleetc.placement.incremental`); a figure the report lacks or garbles never matches."""

    type: str
    gpu_types: tuple[str, ...]
    gpus: int | tuple[tuple[str, int], ...]
    replicas: int
    score: float = field(default=0.0, compare=False)

    @classmethod
    def of(cls, stage: Stage) -> Recorded:
        """The figures of ``stage`` as a report records them."""
        gpus = tuple((o.gpu_type, o.gpus) for o in stage.gpu_options) if stage.gpu_options else stage.gpus
        return cls(str(stage.type), stage.gpu_types, gpus, stage.replicas)


@dataclass(frozen=True)
class Previous:
    """What the last compile's ``placement.yaml`` says (empty when there is none)."""

    #: Stage key -> {cluster: replicas}, placed stages only.
    clusters: dict[str, dict[str, int]] = field(default_factory=dict)
    #: The digest of the inputs it was compiled from ('' when it does not say).
    inputs: str = ""
    #: The ``--solver`` it was compiled with ('' when it does not say: the default).
    solver: str = ""
    #: The clusters it was compiled with ``--drain`` of, sorted.
    drained: tuple[str, ...] = ()
    method: str = ""
    #: The ``--time-limit`` (seconds) that ran out while it was solved, if one did.
    time_limit: float | None = None
    objective: float = 0.0
    bound: float = 0.0
    #: Whether it says it is proven optimal.
    optimal: bool = False
    #: Stage key -> the score it reported.
    scores: dict[str, float] = field(default_factory=dict)
    #: Stage key -> why it was left out (``--allow-unplaced``), for the stages it left out.
    reasons: dict[str, str] = field(default_factory=dict)
    #: Every stage it lists, placed or not.
    stages: frozenset[str] = frozenset()
    #: Stage key -> its recorded figures, for every stage it lists.
    recorded: dict[str, Recorded] = field(default_factory=dict)


def parse_previous(text: str) -> Previous:
    """What the text of a ``placement.yaml`` fleetc wrote says.

    Raises :class:`ValueError` saying what is wrong.
    """
    try:
        documents = yaml_documents(text)
    except YAMLError as err:
        raise ValueError(f"not YAML: {str(err).splitlines()[0]}") from err
    except RecursionError as err:  # ruamel's parser recurses: nesting no report of fleetc's has
        raise ValueError("nested too deeply to be a placement report") from err
    document = documents[0] if len(documents) == 1 else None
    if not isinstance(document, dict) or document.get("kind") != "Placement":
        raise ValueError("not a fleetc placement report (kind: Placement)")
    stages = document.get("stages")
    if not isinstance(stages, list):
        raise ValueError("'stages' is not a list")
    placed: dict[str, dict[str, int]] = {}
    scores: dict[str, float] = {}
    reasons: dict[str, str] = {}
    listed: list[str] = []
    recorded: dict[str, Recorded] = {}
    for index, entry in enumerate(stages):
        key, clusters = _stage_entry(entry, index)
        listed.append(key)
        recorded[key] = _recorded(entry)
        if clusters:
            placed[key] = clusters
        else:
            reasons[key] = _text(entry.get("reason"))
        scores[key] = _number(entry.get("score"))
    return Previous(
        clusters=placed,
        inputs=_text(document.get("inputs")),
        solver=_text(document.get("solver")),
        drained=_names(document.get("drained")),
        method=_text(document.get("method")),
        time_limit=_seconds(document.get("timeLimitReached")),
        objective=_number(document.get("objective")),
        bound=_number(document.get("bound")),
        optimal=document.get("optimal") is True,
        scores=scores,
        reasons=reasons,
        stages=frozenset(listed),
        recorded=recorded,
    )


def _recorded(entry: dict[str, Any]) -> Recorded:
    """A stage entry's figures (:class:`Recorded`); ones it lacks or garbles are recorded as
    no stage's (an empty type), so the stage counts as changed."""
    gpu_type, gpus, replicas = entry.get("gpuType"), entry.get("gpusPerReplica"), entry.get("replicas")
    types: tuple[str, ...] | None = (
        () if gpu_type is None else (gpu_type,) if isinstance(gpu_type, str)
        else tuple(gpu_type) if isinstance(gpu_type, list) and all(isinstance(t, str) for t in gpu_type) else None)
    per_type: int | tuple[tuple[str, int], ...] | None = (
        gpus if type(gpus) is int
        else tuple((str(t), n) for t, n in gpus.items()) if isinstance(gpus, dict)
        and all(type(n) is int for n in gpus.values()) else None)
    if types is None or per_type is None or type(replicas) is not int:
        return Recorded("", (), -1, -1, _number(entry.get("score")))
    return Recorded(_text(entry.get("type")), types, per_type, replicas, _number(entry.get("score")))


def _names(value: Any) -> tuple[str, ...]:
    """A list of names, sorted ('' for anything that is not one: the file says no drain)."""
    return tuple(sorted(v for v in value if isinstance(v, str))) if isinstance(value, list) else ()


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _seconds(value: Any) -> float | None:
    seconds = _number(value)
    return seconds if seconds > 0 else None


def _number(value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return 0.0
    try:
        return float(value)
    except OverflowError as err:  # an integer of hundreds of digits: no figure fleetc writes
        raise ValueError(f"a number too large to be one fleetc wrote ({str(value)[:20]}...)") from err


def _stage_entry(entry: Any, index: int) -> tuple[str, dict[str, int]]:
    where = f"stages[{index}]"
    if not isinstance(entry, dict):
        raise ValueError(f"{where} is not a mapping")
    pipeline, stage = entry.get("pipeline"), entry.get("stage")
    if not isinstance(pipeline, str) or not isinstance(stage, str):
        raise ValueError(f"{where} has no pipeline and stage names")
    clusters: dict[str, int] = {}
    listed = entry.get("clusters") or []
    if not isinstance(listed, list):
        raise ValueError(f"{where}.clusters is not a list")
    for item in listed:
        name = item.get("name") if isinstance(item, dict) else None
        replicas = item.get("replicas") if isinstance(item, dict) else None
        if not isinstance(name, str) or type(replicas) is not int or not 0 <= replicas <= MAX_REPLICAS:
            raise ValueError(f"{where}.clusters has an entry without a name and replicas")
        clusters[name] = clusters.get(name, 0) + replicas
    return f"{pipeline}/{stage}", clusters


def read_previous(out_dir: Path, workdir: Path = Path(".")) -> tuple[Previous, str]:
    """The previous placement under ``out_dir`` (relative to ``workdir`` unless absolute; the
    warning names it as given) and a warning ('' when none is due).

    No file: no previous placement and no warning. An unreadable or malformed file: no previous
    placement and a warning naming the file and the problem.
    """
    path = out_dir / PLACEMENT_FILE
    try:
        info = os.lstat(workdir / path)
    except FileNotFoundError:
        return Previous(), ""
    except OSError as err:
        return Previous(), f"{path}: ignored as the previous placement: {err.strerror or err}"
    if not stat.S_ISREG(info.st_mode):  # a symlink, FIFO or device is never opened nor followed
        return Previous(), (f"{path}: ignored as the previous placement: a symlink or other special file "
                            "(fleetc writes it as a regular file)")
    try:
        return parse_previous((workdir / path).read_text(encoding="utf-8")), ""
    except OSError as err:
        return Previous(), f"{path}: ignored as the previous placement: {err.strerror or err}"
    except (UnicodeDecodeError, ValueError) as err:
        return Previous(), f"{path}: ignored as the previous placement: {err}"
