"""Fixtures for the whole suite.

fleetc must never reach the network at run time, so every test runs with outgoing connections
refused: a connect attempt raises :class:`NetworkBlocked` (an ``OSError``, as a real network
failure would be, so the code under test cannot tell the difference but the test fails loudly
through the recorded attempt). Subprocesses are covered by ``tests/test_security.py``.

Hypothesis draws the same examples on every run and keeps no example database: no random draw
decides whether the suite passes, on CI or on a fresh clone alike. ``FLEETC_HYPOTHESIS=explore``
searches afresh (and remembers what fails in ``.hypothesis/``); a failure it finds becomes a
test of its own, as ``test_properties`` has.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("deterministic", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("FLEETC_HYPOTHESIS", "deterministic"))


@pytest.hookimpl(tryfirst=True)  # before ``-m "not slow"`` deselects by the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test marked ``first_row_fast`` runs its first parametrized row in the fast tier and
    the others in the whole suite only (marked ``slow``): for rows that each run the real
    program or a full compile, where one row shows the path works and the rest its cases."""
    seen: set[tuple[str, str]] = set()
    for item in items:
        if isinstance(item, pytest.Function) and item.get_closest_marker("first_row_fast"):
            test = (item.nodeid.split("::")[0], item.originalname)
            if test in seen:
                item.add_marker(pytest.mark.slow)
            seen.add(test)


class NetworkBlocked(OSError):
    """Raised instead of connecting: tests run offline."""


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Refuse every outgoing connection; the list records what was attempted."""
    attempts: list[str] = []

    def refuse(*args: Any, **_kwargs: Any) -> Any:
        attempts.append(repr(args[1:] if args and isinstance(args[0], socket.socket) else args))
        raise NetworkBlocked(f"network access during tests: {attempts[-1]}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    yield attempts
    assert not attempts, f"a test reached for the network: {attempts}"
