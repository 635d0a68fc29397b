"""A compile that keeps the cluster folders its change does not reach (``.fleetc/render``,
:mod:`fleetc.render.record`) writes byte for byte what rendering everything writes.

The guard of the inputs digest's soundness: every golden case and the bundled example, each
edited at leaves of its policy documents chosen at random (seeded), and generated fleets with
completion markers, data and team quotas edited where stages reach each other across clusters
(an output another pipeline's stage reads, a Secret, a team's guaranteed GPUs). Each edit is
compiled twice from the same previous output folder, once keeping what it may and once
rendering everything; the two folders must be identical.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from ruamel.yaml import YAML
from support.corpus import CASES, GOLDEN, ROOT, read_tree_bytes
from support.output import copy_output

from bench.generate import Spec, generate
from fleetc.compiler import Compiled, Options, compile_fleet
from fleetc.emit import WriteError, reusable_folders, write_tree
from fleetc.errors import FleetcError
from fleetc.render.record import RENDER_RECORD, layer_prefixes

EDITS_PER_CASE = 3
_YAML = YAML(typ="safe", pure=True)
Document = Any


def compile_into(workdir: Path, out: str, *, reuse: bool, drain: tuple[str, ...] = ()) -> Compiled:
    """``fleetc compile policies --out OUT --allow-unplaced=*`` run in ``workdir``, in process."""
    compiled = compile_fleet(Options(paths=("policies",), out=out, workdir=workdir, allow_unplaced=True, may_drop=None,
                                     drain=drain, reuse=reuse))
    write_tree(workdir / out, compiled.files, kept=compiled.kept)
    return compiled


def recompiled_both_ways(workdir: Path, drain: tuple[str, ...] = ()) -> tuple[Compiled, dict[str, bytes],
                                                                                dict[str, bytes]]:
    """The policies in ``workdir`` compiled from a copy of its ``out/`` keeping what they may,
    and from another copy rendering everything: (the first compile, both trees)."""
    try:
        copy_output(workdir / "out", workdir / "full")  # two copies of fleetc's output, marked as its own
        copy_output(workdir / "out", workdir / "kept")
        compile_into(workdir, "full", reuse=False, drain=drain)
        compiled = compile_into(workdir, "kept", reuse=True, drain=drain)
        return compiled, read_tree_bytes(workdir / "kept"), read_tree_bytes(workdir / "full")
    finally:
        shutil.rmtree(workdir / "full", ignore_errors=True)
        shutil.rmtree(workdir / "kept", ignore_errors=True)


def documents(folder: Path) -> dict[Path, list[Document]]:
    return {path: list(_YAML.load_all(path.read_text(encoding="utf-8"))) for path in sorted(folder.rglob("*.yaml"))}


def write_documents(found: dict[Path, list[Document]]) -> None:
    for path, docs in found.items():
        with path.open("w", encoding="utf-8") as stream:
            _YAML.dump_all(docs, stream)


def leaves(node: Document, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The paths of every scalar under ``node`` but a document's apiVersion and kind."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        if isinstance(value, (dict, list)):
            yield from leaves(value, (*at, key))
        elif at or key not in ("apiVersion", "kind"):
            yield (*at, key)


def mutated(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return round(value * 1.5 + 0.1, 3)
    if isinstance(value, str):
        return value + "x" if not value.endswith("/") else value + "x/"
    return "x"


def set_at(node: Document, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def get_at(node: Document, path: tuple[Any, ...]) -> Any:
    for key in path:
        node = node[key]
    return node


def case_folder(name: str, tmp_path: Path) -> tuple[Path, tuple[str, ...]]:
    """A copy of a golden case's policies (or the bundled example's) to edit, and its --drain."""
    source = ROOT if name == "bundled" else CASES / name
    shutil.copytree(source / "policies", tmp_path / "policies")
    args = (source / "args").read_text().split() if (source / "args").exists() else []
    return tmp_path, tuple(args[i + 1] for i, arg in enumerate(args) if arg == "--drain")


# The golden cases in the whole suite only (CI's): their 19 recompiles, a second each, were a
# tenth of the fast tier's time; the bundled example stays in it.
@pytest.mark.slow
@pytest.mark.first_row_fast
@pytest.mark.parametrize("name", ["bundled", *GOLDEN])
def test_an_edited_leaf_recompiles_to_what_rendering_everything_writes(name: str, tmp_path: Path) -> None:
    workdir, drain = case_folder(name, tmp_path)
    compile_into(workdir, "out", reuse=False, drain=drain)
    unchanged, kept, full = recompiled_both_ways(workdir, drain)
    assert kept == full
    assert unchanged.kept is not None and unchanged.files.keys().isdisjoint(unchanged.kept.paths)
    everything = {p for p in full if p.startswith("clusters/") and p.split("/")[2] in ("infra", "workloads")}
    assert set(unchanged.kept.paths) == everything  # nothing changed: every cluster's layers are kept
    original = documents(workdir / "policies")
    candidates = [(path, index, leaf) for path, docs in original.items() for index, doc in enumerate(docs)
                  for leaf in leaves(doc)]
    chooser = random.Random(name)
    edited = 0
    for path, index, leaf in chooser.sample(candidates, len(candidates)):
        if edited == EDITS_PER_CASE:
            break
        docs = documents(workdir / "policies")
        set_at(docs[path][index], leaf, mutated(get_at(docs[path][index], leaf)))
        write_documents(docs)
        try:
            _, kept, full = recompiled_both_ways(workdir, drain)
        except FleetcError:  # the edit made the policies invalid or infeasible: another leaf
            continue
        finally:
            write_documents(original)
        assert kept == full, f"{path.name} document {index} {'.'.join(map(str, leaf))} edited"
        edited += 1
    assert edited == EDITS_PER_CASE


#: Edits of the generated fleet's first stage, whose output another pipeline's stage reads
#: (:func:`generated`): the reader's folder, on another cluster, waits for the writer's marker.
CROSS_EDITS: dict[str, Callable[[list[Document]], None]] = {}


def _edit(name: str) -> Callable[[Callable[[list[Document]], None]], Callable[[list[Document]], None]]:
    def register(edit: Callable[[list[Document]], None]) -> Callable[[list[Document]], None]:
        CROSS_EDITS[name] = edit
        return edit
    return register


def _pipelines(docs: list[Document]) -> list[Document]:
    return sorted((d for d in docs if d["kind"] == "AIGCPipeline"), key=lambda d: d["metadata"]["name"])


def _writer(docs: list[Document]) -> Document:
    return _pipelines(docs)[0]["spec"]["stages"][0]


@_edit("command")
def _change_command(docs: list[Document]) -> None:
    _writer(docs)["command"].append("--again")  # its run id, which the reader's wait compares


@_edit("output")
def _move_output(docs: list[Document]) -> None:
    output = _writer(docs)["outputs"][0]
    output["storage"] = output["storage"].rstrip("/") + "-moved/"


@_edit("secret")
def _rename_secret(docs: list[Document]) -> None:
    _writer(docs)["outputs"][0]["secretName"] += "-2"


@_edit("gpu")
def _raise_gpu(docs: list[Document]) -> None:
    stage = next(s for p in _pipelines(docs) for s in p["spec"]["stages"] if s["resources"].get("gpu"))
    stage["resources"]["gpu"] += 1


@_edit("cordon")
def _cordon(docs: list[Document]) -> None:
    next(d for d in docs if d["kind"] == "Fleet")["spec"]["clusters"][0]["cordoned"] = True


@_edit("guaranteed")
def _guarantee(docs: list[Document]) -> None:
    """A team's guaranteed GPUs go to the clusters its gangs run on, in cluster order: one
    cluster's share depends on the others'."""
    team = next(d for d in docs if d["kind"] == "AIGCPlatform")["spec"]["teams"][0]
    team["guaranteed"] = {gpu: count for gpu, count in team["gpuQuota"].items() if count}


def generated(tmp_path: Path) -> tuple[Path, dict[Path, list[Document]]]:
    """A generated fleet with teams, whose second pipeline's first stage also reads what the
    first pipeline's first stage writes; and its documents."""
    generate(Spec(clusters=6, stages=40, load=0.8, platform=True, quotas=0.5, seed=3)).write(tmp_path / "policies")
    found = documents(tmp_path / "policies")
    docs = [doc for docs in found.values() for doc in docs]
    written = _writer(docs)["outputs"][0]
    reader = _pipelines(docs)[1]["spec"]["stages"][0]
    reader["inputs"].append({"name": "shared", "source": written["storage"], "location": written["location"]})
    write_documents(found)
    return tmp_path, found


@pytest.mark.slow
@pytest.mark.first_row_fast
@pytest.mark.parametrize("edit", sorted(CROSS_EDITS))
def test_an_edit_reaching_other_clusters_recompiles_to_what_rendering_everything_writes(
        edit: str, tmp_path: Path) -> None:
    workdir, found = generated(tmp_path)
    compile_into(workdir, "out", reuse=False)
    CROSS_EDITS[edit]([doc for docs in found.values() for doc in docs])
    write_documents(found)
    compiled, kept, full = recompiled_both_ways(workdir)
    assert kept == full
    # an edit of a pipeline or a cluster reaches some folders, of the platform every one
    assert (compiled.kept is None) == (edit == "guaranteed")


def test_a_file_edited_by_hand_is_rendered_again(tmp_path: Path) -> None:
    workdir, _ = case_folder("bundled", tmp_path)
    compile_into(workdir, "out", reuse=False)
    written = read_tree_bytes(workdir / "out")
    job = next(p for p in sorted(written) if "/workloads/job-" in p)
    (workdir / "out" / job).write_text("edited: by hand\n", encoding="utf-8")
    (workdir / "out" / job).chmod(0o644)
    checked = reusable_folders(workdir / "out")
    cluster = job.split("/")[1]
    assert cluster not in checked.folders and checked.folders  # the others still hold their files
    compiled = compile_into(workdir, "out", reuse=True)
    assert compiled.kept is not None and cluster not in compiled.kept.clusters
    assert read_tree_bytes(workdir / "out") == written


@pytest.mark.parametrize("record", ["", "garbage\n", "a b c\n"])
def test_a_record_that_is_not_fleetc_s_keeps_nothing(record: str, tmp_path: Path) -> None:
    workdir, _ = case_folder("bundled", tmp_path)
    compile_into(workdir, "out", reuse=False)
    written = read_tree_bytes(workdir / "out")
    (workdir / "out" / RENDER_RECORD).write_text(record, encoding="utf-8")
    compiled = compile_into(workdir, "out", reuse=True)
    assert compiled.kept is None and read_tree_bytes(workdir / "out") == written


def test_a_kept_folder_another_compile_changed_meanwhile_is_refused(tmp_path: Path) -> None:
    workdir, _ = case_folder("bundled", tmp_path)
    compile_into(workdir, "out", reuse=False)
    compiled = compile_fleet(Options(paths=("policies",), out="out", workdir=workdir, reuse=True))
    assert compiled.kept is not None
    # another compile writes out/ meanwhile: the same files, so keeping them is still right
    compile_into(workdir, "out", reuse=False)
    write_tree(workdir / "out", compiled.files, kept=compiled.kept)
    # ... and now one that changed a kept folder's file
    cluster = compiled.kept.clusters[0]
    layer = layer_prefixes(cluster)[1]
    other = workdir / "other"
    shutil.copytree(workdir / "out", other)
    found = read_tree_bytes(other)
    changed = next(p for p in sorted(found) if p.startswith(layer) and p.endswith("kustomization.yaml"))
    files = {p: t.decode() for p, t in found.items() if not p.startswith(".fleetc/files")}
    files[changed] += "# changed\n"
    write_tree(workdir / "out", files)
    before = read_tree_bytes(workdir / "out")
    with pytest.raises(WriteError, match=rf"clusters/{cluster}/ is no longer as it was checked"):
        write_tree(workdir / "out", compiled.files, kept=compiled.kept)
    assert read_tree_bytes(workdir / "out") == before


def test_a_local_queue_follows_the_file_of_its_namespace_s_first_pipeline(tmp_path: Path) -> None:
    """A Kueue LocalQueue is sourced from the first pipeline (by name) of its namespace, which
    need not run on the cluster: moving that pipeline to another file reaches the folder."""
    workdir, _ = case_folder("kueue-two-cluster-pipeline", tmp_path)
    policies = workdir / "policies"
    serve = next(s for s in _YAML.load((policies / "pipeline.yaml").read_text())["spec"]["stages"]
                 if s["name"] == "serve")
    first = {"apiVersion": "aigc.kurator.dev/v1alpha1", "kind": "AIGCPipeline",
             "metadata": {"name": "aaa", "namespace": "ml"},
             "spec": {"stages": [{**serve, "name": "other", "replicas": 1, "inputs": []}]}}
    write_documents({policies / "aaa.yaml": [first]})
    compile_into(workdir, "out", reuse=False)
    assert "aaa.yaml#metadata.namespace" in read_tree_bytes(workdir / "out")[
        "clusters/train-kueue/infra/localqueue-ml-fleetc.yaml"].decode()
    (policies / "aaa.yaml").rename(policies / "moved.yaml")
    compiled, kept, full = recompiled_both_ways(workdir)
    assert kept == full
    assert compiled.kept is None or "train-kueue" not in compiled.kept.clusters


def _pipeline_beside(policies: Path, name: str, inputs: list[Document] | None = None) -> None:
    """A pipeline ``name`` in its own file, in the namespace of the one in pipeline.yaml, serving
    a copy of that one's Deployment stage (on the same clusters) with ``inputs``."""
    pipeline = _YAML.load((policies / "pipeline.yaml").read_text(encoding="utf-8"))
    serve = next(s for s in pipeline["spec"]["stages"] if s["type"] == "Deployment")
    write_documents({policies / f"{name}.yaml": [{
        "apiVersion": pipeline["apiVersion"], "kind": "AIGCPipeline",
        "metadata": {"name": name, "namespace": pipeline["metadata"]["namespace"]},
        "spec": {"stages": [{**serve, "name": "other", "replicas": 1, "inputs": inputs or []}]}}]})


def _edited(path: Path, edit: Callable[[Document], None]) -> None:
    """``edit`` applied to the first document of ``path``."""
    docs = list(_YAML.load_all(path.read_text(encoding="utf-8")))
    edit(docs[0])
    write_documents({path: docs})


def _rename_train(pipeline: Document) -> None:
    for stage in pipeline["spec"]["stages"]:
        if stage["name"] == "train":
            stage["name"] = "trainer"
        for item in stage.get("inputs", []):
            if str(item.get("from", "")).startswith("train."):
                item["from"] = item["from"].replace("train.", "trainer.", 1)


class Targeted(NamedTuple):
    """An edit of a golden case's policies that reaches a folder by a fact other than its own
    work (or changes the set of folders), and the cluster whose folder it must reach (None:
    any)."""

    case: str
    edit: Callable[[Path], None]
    reached: str | None
    setup: Callable[[Path], None] = lambda _: None
    drain: tuple[str, ...] = ()


_READER = [{"name": "corpus", "source": "s3://corpus/v2/"}]  # what train reads in prefetch-waits-...

TARGETED = {
    # Namespace ml on train-a100 loses its pipeline label: a second pipeline uses it
    "a namespace gains a pipeline on another cluster": Targeted(
        "two-cluster-pipeline", lambda p: _pipeline_beside(p, "aaa"), "train-a100"),
    # train-a100's cached corpus Dataset mounts with the Secret another pipeline names for it
    "a Secret named by another pipeline of the namespace": Targeted(
        "prefetch-waits-for-the-writer",
        lambda p: _pipeline_beside(p, "reader", [{**_READER[0], "secretName": "corpus-store"}]),
        "train-a100", setup=lambda p: _pipeline_beside(p, "reader", _READER)),
    # serve-l4's DataProcess waits for the renamed writer's marker
    "a stage renamed": Targeted(
        "prefetch-waits-for-the-writer", lambda p: _edited(p / "pipeline.yaml", _rename_train), "serve-l4"),
    "prefetching turned off": Targeted(
        "prefetch-waits-for-the-writer",
        lambda p: _edited(p / "data.yaml", lambda d: d["spec"]["prefetching"].update(enabled=False)), "serve-l4"),
    "a cluster renamed": Targeted(
        "two-cluster-pipeline",
        lambda p: _edited(p / "fleet.yaml", lambda d: d["spec"]["clusters"][1].update(name="serve-l4-b")), None),
    "a cluster removed": Targeted(  # a cluster of a GPU type another has (else its stages are invalid)
        "exact-solve-is-optimal",
        lambda p: _edited(p / "fleet.yaml", lambda d: d["spec"]["clusters"].pop(1)), None),
    "a cluster drained": Targeted("two-cluster-pipeline", lambda _: None, "serve-l4", drain=("serve-l4",)),
}


def test_a_pipeline_joining_a_shared_namespace_leaves_the_clusters_it_does_not_run_on(tmp_path: Path) -> None:
    """Namespace ml already serves two pipelines (llm on train-a100 and serve-l4, aaa on
    serve-l4); a third one on serve-l4 changes nothing train-a100's objects read of the
    namespace (not one pipeline, the same first one, no sovereign platform; the Secret it names
    is for a URL no stage of train-a100 reaches), so its folder is kept, and the result is what
    rendering everything writes. Before, every pipeline and Secret of a namespace counted for
    every cluster it had a stage on: a new pipeline at 1,000 x 20,000 re-rendered 123,000 files
    of 173,000."""
    workdir, _ = case_folder("two-cluster-pipeline", tmp_path)
    _pipeline_beside(workdir / "policies", "aaa")
    compile_into(workdir, "out", reuse=False)
    # reading a bucket of its own with a Secret it names: the namespace's Secrets change too
    _pipeline_beside(workdir / "policies", "zzz", [{"name": "own", "source": "s3://zzz-only/",
                                                    "secretName": "zzz-store"}])
    compiled, kept, full = recompiled_both_ways(workdir)
    assert kept == full
    assert compiled.kept is not None and compiled.kept.clusters == ("train-a100",)


@pytest.mark.parametrize("name", sorted(TARGETED))
def test_a_targeted_edit_recompiles_to_what_rendering_everything_writes(name: str, tmp_path: Path) -> None:
    target = TARGETED[name]
    workdir, _ = case_folder(target.case, tmp_path)
    target.setup(workdir / "policies")
    compile_into(workdir, "out", reuse=False)
    target.edit(workdir / "policies")
    compiled, kept, full = recompiled_both_ways(workdir, target.drain)
    assert kept == full
    if target.reached is not None:
        assert compiled.kept is None or target.reached not in compiled.kept.clusters
