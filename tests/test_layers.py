"""Stages import only downward (docs/architecture.md, "The import rule").

Every ``import`` of a fleetc module, at the top of a module or inside a function (or under
``TYPE_CHECKING``), is read with :mod:`ast`; a module may import modules of its own layer or of
a layer below. The layers are written here once; docs/architecture.md shows them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fleetc"

#: Bottom first. A name is a module or a package (then every module under it). Within a layer
#: modules may import each other, but never in a circle (:func:`test_no_import_circles`).
LAYERS: tuple[tuple[str, ...], ...] = (
    # infrastructure every stage may use: errors and their wording, what a credential looks like,
    # the parallel map and gc control, progress reports
    ("fleetc.errors", "fleetc.credentials", "fleetc.grouping", "fleetc.progress", "fleetc.infra"),
    # the vocabulary every stage speaks: the model's types and constants, node fit, the engines' names
    ("fleetc.model", "fleetc.nodefit", "fleetc.delivery"),
    ("fleetc.policy",),
    # policies -> model; a scenario's changes to policies; fleetc's own state files, read back
    ("fleetc.resolve", "fleetc.scenario", "fleetc.state"),
    ("fleetc.placement",),
    ("fleetc.render",),
    ("fleetc.emit",),
    ("fleetc.report",),
    ("fleetc.git",),
    ("fleetc.compiler",),
    ("fleetc.cli", "fleetc.__main__", "fleetc"),
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the longest name that is ``module`` or a package above it
    (``fleetc`` itself names the package's ``__init__`` only)."""
    best = None
    for index, names in enumerate(LAYERS):
        for name in names:
            inside = module == name or name != "fleetc" and module.startswith(name + ".")  # the root: itself only
            if inside and (best is None or len(name) > len(best[1])):
                best = (index, name)
    if best is None:
        raise AssertionError(f"{module} is in no layer of LAYERS: add it")
    return best[0]


def imports_of(module: str) -> list[tuple[str, int]]:
    """The fleetc modules ``module`` imports, with the line of each import. ``from package
    import name`` imports the module ``package.name`` when there is one."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names if alias.name.split(".")[0] == "fleetc"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                above = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(above + ([node.module] if node.module else []))
            if base.split(".")[0] != "fleetc":
                continue
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.append((target if target in MODULES else base, node.lineno))
    return found


def test_every_module_is_in_a_layer() -> None:
    for module in MODULES:
        layer_of(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down(module: str) -> None:
    mine = layer_of(module)
    upward = [f"{MODULES[module].relative_to(PACKAGE.parent)}:{line}: imports {target} "
              f"(layer {LAYERS[layer_of(target)][0]} is above {LAYERS[mine][0]})"
              for target, line in imports_of(module) if layer_of(target) > mine]
    assert not upward, "\n".join(upward)


#: The one circle left, inside one stage: a stage's run id (:func:`fleetc.render.order.run_id`)
#: digests its main container as rendered (:mod:`fleetc.render.workloads`, with the mounts of
#: :mod:`fleetc.render.data`), and both render the waits and markers of :mod:`.order`, which
#: name the run ids of upstream stages: the recursion is real, and ``order`` imports the two
#: inside the function that needs them. Breaking it means handing ``run_id`` the renderer of the
#: main container through the Context (issue 29, left for the owner of order.py).
KNOWN_CIRCLES = frozenset({
    "fleetc.render.data -> fleetc.render.order -> fleetc.render.data",
    "fleetc.render.data -> fleetc.render.order -> fleetc.render.workloads -> fleetc.render.data",
    "fleetc.render.order -> fleetc.render.workloads -> fleetc.render.order",
})


@pytest.mark.slow
def test_no_import_circles() -> None:
    """No two modules import each other, however indirectly (imports inside functions and under
    ``TYPE_CHECKING`` count too: a circle is a circle whenever it closes), but for
    :data:`KNOWN_CIRCLES`."""
    graph = {m: {t for t, _ in imports_of(m) if t != m and not _is_package_of(t, m)} for m in MODULES}
    circles = []
    state: dict[str, int] = {}  # 1 on the path, 2 done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                circles.append(" -> ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not set(circles) - KNOWN_CIRCLES, "\n".join(sorted(set(circles) - KNOWN_CIRCLES))


def _is_package_of(package: str, module: str) -> bool:
    """A module importing its own package's ``__init__`` (re-exports) is no circle of its own."""
    return module.startswith(package + ".")


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The imports issue 29 found climbing are upward by these layers: resolve importing
    placement, validate importing render, git/flow importing the compiler, errors importing
    policy/credentials (all gone)."""
    climbs = [("fleetc.resolve", "fleetc.placement.rules"), ("fleetc.policy.validate", "fleetc.render.kurator"),
              ("fleetc.git.flow", "fleetc.compiler"), ("fleetc.errors", "fleetc.policy.load")]
    assert all(layer_of(low) < layer_of(high) for low, high in climbs)
