"""Keeping Python's cycle collector out of the stages that allocate much and free little.

Loading, validating, resolving and rendering a large fleet allocate millions of dicts, lists
and strings, almost none of them in a reference cycle: the cyclic collector frees nothing there,
yet it runs each time its young generation fills, and now and then scans every older object
(the whole model). Reference counting still frees everything as usual while it is paused.

:func:`gc_paused` may also *freeze* what a stage leaves (``gc.freeze``), which is process-wide:
so the front doors of :mod:`fleetc.compiler` run inside :func:`freezes_undone`, and a compile
leaves the interpreter's collector as it found it.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from functools import wraps
from typing import ParamSpec, TypeVar

#: A stage that leaves more new objects than this freezes them (see :func:`gc_paused`).
FREEZE_OBJECTS = 50_000

_P = ParamSpec("_P")
_R = TypeVar("_R")


@contextlib.contextmanager
def gc_paused(freeze: bool = True) -> Iterator[None]:
    """Keep the cycle collector out of a stage that builds many objects and frees few.

    Every few hundred allocations it scans the young objects, and now and then all of them: on
    a large fleet that rescanning, not the work, took most of loading and validating. When the
    stage leaves more than :data:`FREEZE_OBJECTS` new objects (a large fleet's data and models,
    which live as long as the compile) and ``freeze`` is true, they are frozen too, or the first
    collection after the stage would scan them all once more; a small stage leaves the collector
    as it was, so that a process running many small compiles (the tests) still collects all its
    garbage. Rendering passes ``freeze=False``: what it makes is handed on and dropped.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze and gc.get_count()[0] > FREEZE_OBJECTS:
            gc.freeze()
        if enabled:
            gc.enable()


def freezes_undone(front_door: Callable[_P, _R]) -> Callable[_P, _R]:
    """``front_door``, undoing when it returns or raises the freezes :func:`gc_paused` made
    during it: a program (or a test session) that compiles many times collects each compile's
    objects afterwards. A freeze that was there before the call (the program's own) is kept."""

    @wraps(front_door)
    def scoped(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        frozen_before = gc.get_freeze_count()
        try:
            return front_door(*args, **kwargs)
        finally:
            if not frozen_before and gc.get_freeze_count():
                gc.unfreeze()

    return scoped
