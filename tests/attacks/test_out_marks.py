"""Attacks on fleetc's records (issue 27, bookkeeping): ``.fleetc/render`` and ``.fleetc/files``
are plain files a pull request can forge, so a compile takes neither's word for what it keeps
or deletes; it trusts a file only by its mark (:mod:`fleetc.infra.marks`) or, to delete one, by
git holding it as it is.

PROMISE (``bookkeeping``): fleetc's records cannot change what is applied or deleted: a forged
render record never keeps a tampered manifest, and a planted file record never makes fleetc
delete a file it cannot show is its own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.corpus import read_tree_bytes
from support.output import copy_output

from fleetc.compiler import Options, compile_fleet
from fleetc.emit import RECORD, WriteError, reusable_folders, write_tree
from fleetc.errors import FleetcError
from fleetc.infra.marks import MARK, committed_as_is, is_marked
from fleetc.render.record import RENDER_RECORD, files_digest, parse_record, record_text

ROOT = Path(__file__).resolve().parents[2]
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
CLUSTER = "gpu-cluster-huawei"


def fleetc(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    environment.pop("FLEETC_DEBUG", None)
    result = subprocess.run([sys.executable, "-m", "fleetc", *args], cwd=cwd, env=environment,
                            capture_output=True, text=True, timeout=300)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    assert result.returncode != 3, result.stderr
    return result


def git(cwd: Path, *args: str) -> None:
    subprocess.run([*GIT, "-C", str(cwd), *args], check=True, capture_output=True)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    assert fleetc(tmp_path, "compile").returncode == 0
    return tmp_path


def marked(path: Path) -> bool:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        return is_marked(fd, path.read_bytes(), os.fstat(fd))
    finally:
        os.close(fd)


def forge_render_record(out: Path, path: str) -> None:
    """Rewrite ``.fleetc/render`` so that its files digest of ``path``'s cluster matches the
    folder as it is now (what anyone can compute: the digest is no secret)."""
    cluster = path.split("/")[1]
    folders = parse_record((out / RENDER_RECORD).read_text(encoding="utf-8"))
    listed = sorted(rel for rel in (out / RECORD).read_text().splitlines()
                    if rel.startswith((f"clusters/{cluster}/infra/", f"clusters/{cluster}/workloads/")))
    digest = files_digest((rel, (out / rel).read_bytes()) for rel in listed)
    folders[cluster] = type(folders[cluster])(folders[cluster].inputs, digest)
    (out / RENDER_RECORD).write_text(record_text(folders), encoding="utf-8")


# --- a forged .fleetc/render --------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("how", ["in place", "replaced"])
def test_a_forged_render_record_never_keeps_a_tampered_manifest(workdir: Path, how: str) -> None:
    """PROMISE: bookkeeping. A manifest tampered with (in place, keeping its inode and mark; or
    replaced by a new file, as a checkout or an editor does) and the render record forged to
    match: a plain compile renders that cluster again and restores the manifest."""
    out = workdir / "out"
    before = read_tree_bytes(out)
    path = next(p for p in sorted(before) if p.startswith(f"clusters/{CLUSTER}/workloads/job-"))
    evil = before[path] + b"---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: planted\n"
    if how == "in place":
        with open(out / path, "r+b") as file:
            file.write(evil)
    else:
        (out / path).unlink()
        (out / path).write_bytes(evil)
    forge_render_record(out, path)
    assert CLUSTER not in reusable_folders(out).folders
    result = fleetc(workdir, "compile")
    assert result.returncode == 0, result.stderr
    assert (out / path).read_bytes() == before[path]
    assert marked(out / path)


@pytest.mark.slow
def test_an_unmarked_copy_of_out_keeps_nothing_and_renders_everything(workdir: Path) -> None:
    """A copy of out/ (a checkout, cp -r) has no valid mark: nothing is kept, the same bytes come
    out; a copy marked as fleetc's writer would (support.output.copy_output) keeps its folders."""
    shutil.copytree(workdir / "out", workdir / "copy", symlinks=True)
    assert reusable_folders(workdir / "copy").folders == {}
    copy_output(workdir / "out", workdir / "marked")
    assert reusable_folders(workdir / "marked").folders
    compiled = compile_fleet(Options(workdir=workdir, out="copy", reuse=True))
    assert compiled.kept is None or not compiled.kept.clusters
    write_tree(workdir / "copy", compiled.files, kept=compiled.kept)
    assert read_tree_bytes(workdir / "copy") == read_tree_bytes(workdir / "out")
    assert all(marked(workdir / "copy" / rel) for rel in compiled.files if not rel.startswith("local/"))


@pytest.mark.slow
def test_every_file_fleetc_writes_is_marked_and_the_mark_names_its_inode(workdir: Path) -> None:
    out = workdir / "out"
    listed = (out / RECORD).read_text().splitlines()
    assert listed and all(marked(out / rel) for rel in [*listed, RECORD])
    path = out / listed[-1]
    copy = path.with_name("copy.yaml")
    shutil.copy2(path, copy)  # the attribute comes along, the inode does not
    assert os.getxattr(copy, MARK) == os.getxattr(path, MARK) and not marked(copy)


@pytest.mark.slow
def test_a_file_changed_after_the_check_and_before_the_link_is_never_kept(workdir: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The race between the kept-folder check and the hard link: a write in place in the window
    leaves the inode's mark stale, so the check of the linked file refuses it."""
    from fleetc import emit

    compiled = compile_fleet(Options(workdir=workdir, reuse=True))
    assert compiled.kept is not None and compiled.kept.clusters
    victim = compiled.kept.paths[0]
    real_link = emit._link

    def link_after_a_write(previous_fd: int, folder_fd: int, name: str) -> bool:
        if name == victim.rpartition("/")[2]:
            fd = os.open(name, os.O_WRONLY | os.O_APPEND, dir_fd=previous_fd)
            os.write(fd, b"# tampered\n")
            os.close(fd)
        return real_link(previous_fd, folder_fd, name)

    monkeypatch.setattr(emit, "_link", link_after_a_write)
    with pytest.raises(WriteError, match="changed while this compile ran"):
        write_tree(workdir / "out", compiled.files, kept=compiled.kept)


# --- a planted .fleetc/files --------------------------------------------------------------------


@pytest.mark.slow
def test_a_planted_record_never_deletes_yaml_fleetc_did_not_write(tmp_path: Path) -> None:
    """PROMISE: bookkeeping: a folder of the user's own manifests with a .fleetc/files planted
    naming them (YAML, outside local/: paths fleetc could have written) is not fleetc's to
    clean: exit 1 naming the file, nothing written."""
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    deploy = tmp_path / "deploy"
    (deploy / ".fleetc").mkdir(parents=True)
    (deploy / "clusters" / "prod").mkdir(parents=True)
    (deploy / "clusters" / "prod" / "sealed-secret.yaml").write_text("kind: SealedSecret\n")
    (deploy / ".fleetc" / "files").write_text("clusters/prod/sealed-secret.yaml\n")
    before = read_tree_bytes(deploy)
    result = fleetc(tmp_path, "compile", "--out", "deploy")
    assert result.returncode == 1
    assert "deploy/clusters/prod/sealed-secret.yaml: deploy/.fleetc/files lists it as fleetc's" in result.stderr
    assert "refusing to delete it; nothing was written" in result.stderr
    assert read_tree_bytes(deploy) == before


@pytest.mark.slow
def test_a_line_added_to_the_record_never_deletes_an_unmarked_file(workdir: Path) -> None:
    """One line added to out/.fleetc/files naming a file of the user's beside fleetc's."""
    out = workdir / "out"
    mine = out / "clusters" / CLUSTER / "workloads" / "my-own.yaml"
    mine.write_text("kind: ConfigMap\n")
    with open(out / RECORD, "a", encoding="utf-8") as record:
        record.write(f"clusters/{CLUSTER}/workloads/my-own.yaml\n")
    result = fleetc(workdir, "compile")
    assert result.returncode == 1
    assert (f"error: out/clusters/{CLUSTER}/workloads/my-own.yaml: out/.fleetc/files lists it as fleetc's, but "
            "fleetc did not write it here") in result.stderr
    assert mine.read_text() == "kind: ConfigMap\n"


@pytest.mark.slow
def test_fleetcs_own_files_are_still_deleted(workdir: Path) -> None:
    """What fleetc wrote (marked) and no longer renders is deleted, as before."""
    out = workdir / "out"
    stale = "clusters/x/infra/old.yaml"
    files = {rel: text.decode() for rel, text in read_tree_bytes(out).items() if rel != RECORD}
    write_tree(out, {**files, stale: "kind: ConfigMap\n"})
    assert marked(out / stale)
    write_tree(out, files)
    assert not (out / stale).exists()


@pytest.mark.slow
def test_a_checkout_deletes_what_git_holds_as_it_is_and_nothing_else(workdir: Path) -> None:
    """A fresh clone has no marks: a file git holds at HEAD with the same bytes may go (git gives
    it back); one changed since may not."""
    git(workdir, "init", "-q", "-b", "main")
    git(workdir, "add", "-A")
    git(workdir, "commit", "-qm", "base")
    clone = workdir.parent / "clone"
    subprocess.run(["git", "clone", "-q", str(workdir), str(clone)], check=True, capture_output=True)
    files = {rel: text.decode() for rel, text in read_tree_bytes(clone / "out").items() if rel != RECORD}
    gone = sorted(rel for rel in files if rel.startswith(f"clusters/{CLUSTER}/workloads/job-"))[:2]
    assert committed_as_is(clone / "out", gone) == set(gone)
    (clone / "out" / gone[1]).write_text("edited: by hand\n")
    with pytest.raises(FleetcError, match=rf"{gone[1]}: .*/out/.fleetc/files lists it"):
        write_tree(clone / "out", {rel: text for rel, text in files.items() if rel not in gone})
    (clone / "out" / gone[1]).unlink()
    write_tree(clone / "out", {rel: text for rel, text in files.items() if rel not in gone})
    assert not any((clone / "out" / rel).exists() for rel in gone)
