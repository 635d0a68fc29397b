"""No module of fleetc keeps mutable state at module level (issue 29): what a compile remembers
lives in explicit cache objects passed in a context (a render's ``Context.memo``, the YAML
emitter of :func:`fleetc.render.yamlout.caching`, one load's cache of plain scalars), so two
compiles in one process share nothing and the pure middle stays pure.

Read with :mod:`ast`: a module-level name bound to an empty container (to be filled later), or
a ``global`` statement (a function rebinding module state), is such state. Constant tables
filled where they are written (``GPU_PRODUCT_LABELS``) are not."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fleetc"
MODULES = sorted(PACKAGE.rglob("*.py"))
#: Calls that make an empty container to be filled later.
_EMPTY_MAKERS = {"dict", "list", "set", "defaultdict", "Counter", "OrderedDict", "deque",
                 "WeakValueDictionary", "WeakKeyDictionary", "WeakSet"}


def _is_empty_container(value: ast.expr | None) -> bool:
    if isinstance(value, ast.Dict | ast.List | ast.Set):
        return not (value.keys if isinstance(value, ast.Dict) else value.elts)
    if isinstance(value, ast.Call):
        name = value.func.attr if isinstance(value.func, ast.Attribute) else getattr(value.func, "id", "")
        return name in _EMPTY_MAKERS and not value.args
    return False


def module_state(path: Path, root: Path = PACKAGE.parent) -> list[str]:
    """Each binding of mutable state at module level in ``path``, located (relative to ``root``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    where = path.relative_to(root)
    found = [f"{where}:{node.lineno}: an empty container at module level" for node in tree.body
             if isinstance(node, ast.Assign | ast.AnnAssign) and _is_empty_container(node.value)]
    found += [f"{where}:{node.lineno}: global {', '.join(node.names)}"
              for node in ast.walk(tree) if isinstance(node, ast.Global)]
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_no_module_level_mutable_state(path: Path) -> None:
    assert not module_state(path), "\n".join(module_state(path))


def test_the_check_sees_module_state(tmp_path: Path) -> None:
    """What the render's run ids, the YAML emitter and the loader kept at module level before,
    and a function rebinding a module's name; a constant table is no state."""
    sample = tmp_path / "sample.py"
    sample.write_text("import weakref\n_remembered_for: dict[int, weakref.ref[object]] = {}\n"
                      "_tails: dict[str, str] = {}\n_INDENTS: list[str] = []\n_PLAIN_VALUES = dict()\n"
                      "TABLE = {'a': 1}\nCOUNT = 0\n\n\ndef bump() -> None:\n    global COUNT\n    COUNT += 1\n")
    assert [line.split(": ", 1)[0] for line in module_state(sample, tmp_path)] == [
        "sample.py:2", "sample.py:3", "sample.py:4", "sample.py:5", "sample.py:11"]
