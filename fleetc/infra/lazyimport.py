"""``import cvxpy`` without importing ``scipy.stats`` with it.

cvxpy 1.9 imports ``scipy.stats`` at import time for one name, ``entropy``, which only its
quantum relative entropy atom calls when such an atom is evaluated numerically; the placement
program never builds one. ``scipy.stats`` is most of cvxpy's import: 0.55-0.76 s of CPU of its
0.73-1.2 s (``python -X importtime -c "import cvxpy"`` after fleetc's own imports), about a fifth
of ``fleetc compile`` of the bundled policies.

:func:`import_cvxpy` imports cvxpy with a stand-in for ``scipy.stats`` in ``sys.modules``: asked
for ``entropy`` it gives a function that imports ``scipy.stats`` when called and calls its
``entropy``; asked for any other name it imports ``scipy.stats`` there and then and gives the real
attribute. So cvxpy behaves as with the real module whatever it reads (a later cvxpy that reads
more of ``scipy.stats`` at import time only imports it, as today). The stand-in leaves
``sys.modules`` when cvxpy is imported: the next ``import scipy.stats`` is the real one.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any

_STATS = "scipy.stats"


def import_cvxpy() -> None:
    """Import cvxpy (once) without ``scipy.stats``; ``import cvxpy`` after it finds it imported."""
    if "cvxpy" in sys.modules or _STATS in sys.modules:
        importlib.import_module("cvxpy")
        return
    stand_in = _DeferredStats(_STATS)
    sys.modules[_STATS] = stand_in
    try:
        importlib.import_module("cvxpy")
    finally:
        if sys.modules.get(_STATS) is stand_in:
            del sys.modules[_STATS]


def _real_stats() -> ModuleType:
    """``scipy.stats`` itself, imported (the stand-in taken out of ``sys.modules`` first)."""
    if isinstance(sys.modules.get(_STATS), _DeferredStats):
        del sys.modules[_STATS]
    return importlib.import_module(_STATS)


def _entropy(*args: Any, **kwargs: Any) -> Any:
    """``scipy.stats.entropy``, imported when first called."""
    return _real_stats().entropy(*args, **kwargs)


class _DeferredStats(ModuleType):
    """``scipy.stats`` while cvxpy is imported: ``entropy`` deferred, anything else real."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # the import system probes __path__, __spec__...: not a package
            raise AttributeError(name)
        if name == "entropy":
            return _entropy
        return getattr(_real_stats(), name)
