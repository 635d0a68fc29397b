"""fleetc: a declarative GitOps policy compiler for AI workloads on Kubernetes fleets.

The public API is what ``__all__`` lists: the front doors (one function per command, each over
one :class:`Options`), what they return, and the errors they raise (all under
:class:`FleetcError`). Everything else is internal and may change. Names are imported when first
used, so ``import fleetc`` stays cheap (the CLI's ``--version`` and ``validate`` need no solver)::

    import fleetc

    compiled = fleetc.compile_fleet(fleetc.Options(workdir=Path("repo"), paths=("policies",)))
    compiled.files  # path under out/ -> text; writing them is the caller's business
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

#: Public name -> the module that defines it.
_HOMES = {
    "Options": "fleetc.compiler",
    "compile_fleet": "fleetc.compiler",
    "explain_stage": "fleetc.compiler",
    "diff_fleet": "fleetc.compiler",
    "what_if_fleet": "fleetc.compiler",
    "Scenario": "fleetc.scenario",
    "WhatIf": "fleetc.report",
    "Compiled": "fleetc.compiler",
    "Placement": "fleetc.model",
    "StagePlacement": "fleetc.model",
    "Assignment": "fleetc.model",
    "Explanation": "fleetc.placement.explain",
    "Report": "fleetc.report",
    "FleetcError": "fleetc.errors",
    "PolicyError": "fleetc.errors",
    "PlacementError": "fleetc.errors",
    "UsageError": "fleetc.errors",
    "InternalError": "fleetc.errors",
    "Diagnostic": "fleetc.errors",
    "ExitCode": "fleetc.errors",
}

__all__ = [
    "__version__",
    # the front doors and their one options object
    "Options", "compile_fleet", "explain_stage", "diff_fleet", "what_if_fleet", "Scenario",
    # what they return
    "Compiled", "Placement", "StagePlacement", "Assignment", "Explanation", "Report", "WhatIf",
    # what they raise: every error a user can cause is a FleetcError
    "FleetcError", "PolicyError", "PlacementError", "UsageError", "InternalError", "Diagnostic", "ExitCode",
]

if TYPE_CHECKING:
    from fleetc.compiler import Compiled, Options, compile_fleet, diff_fleet, explain_stage, what_if_fleet
    from fleetc.errors import (
        Diagnostic,
        ExitCode,
        FleetcError,
        InternalError,
        PlacementError,
        PolicyError,
        UsageError,
    )
    from fleetc.model import Assignment, Placement, StagePlacement
    from fleetc.placement.explain import Explanation
    from fleetc.report import Report, WhatIf
    from fleetc.scenario import Scenario


def __getattr__(name: str) -> object:
    """PEP 562: a public name is imported from its module when first asked for."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'fleetc' has no attribute {name!r}")
    value: object = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
