"""fleetc's curated public API: ``__all__`` names the front doors, their options and results, and
the errors; each resolves to its defining module's object, and ``import fleetc`` stays cheap."""

from __future__ import annotations

import subprocess
import sys

import pytest

import fleetc
from fleetc import compiler, errors, model


def test_every_public_name_is_its_modules_object() -> None:
    assert fleetc.compile_fleet is compiler.compile_fleet
    assert fleetc.Options is compiler.Options
    assert fleetc.Placement is model.Placement
    assert issubclass(fleetc.PolicyError, fleetc.FleetcError) and fleetc.FleetcError is errors.FleetcError
    assert set(fleetc.__all__) == {"__version__", *fleetc._HOMES}
    for name in fleetc.__all__:
        assert getattr(fleetc, name) is not None, name
    assert set(fleetc.__all__) <= set(dir(fleetc))
    assert {"compile_fleet", "explain_stage", "diff_fleet", "Options", "Compiled", "Explanation",
            "Report", "FleetcError"} <= set(fleetc.__all__)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'fleetc' has no attribute 'compile'"):
        fleetc.compile  # noqa: B018 - the access is the test


def test_import_fleetc_loads_neither_the_compiler_nor_the_solver() -> None:
    code = ("import sys, fleetc; print(sorted(m for m in ('fleetc.compiler', 'pydantic', 'numpy', 'git') "
            "if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert loaded.stdout == "[]\n"
