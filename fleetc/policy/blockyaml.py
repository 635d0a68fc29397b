"""A faster path for :func:`fleetc.policy.load.yaml_documents` on the YAML fleetc writes itself.

A large fleet's ``placement.yaml`` (600,000 libyaml events at 1,000 x 20,000) took a second of a
recompile through libyaml's events, one Python object each. fleetc writes it in block style
with a fixed layout (:mod:`fleetc.render.yamlout`): one document, keys at the indentation of
their mapping, a value's block two spaces deeper, a sequence's items as ``- `` two spaces under
their key, a mapping in a sequence starting on its item's line, one-line plain scalars, ``[]``
and ``{}`` for empty collections. :func:`block_documents` reads text made only of that line by
line, resolving and constructing every scalar with the caller's rules (ruamel's, as
:func:`~fleetc.policy.load.yaml_documents` does), and declines (None) everything else: any
character outside a small set (quotes, ``#``, tabs, flow and node indicators, anything beyond
ASCII), another indentation, a line that is no key or item, an empty value, a key that is not a
string or repeats, a scalar the caller declines. Where it answers, the answer is what a YAML
reader gives; ``tests/test_blockyaml.py`` compares it with ruamel on fleetc's own output, on
fuzzed data and on damaged text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

#: Any character outside those of the plain scalars, keys and empty collections read here.
_FOREIGN = re.compile(r"[^A-Za-z0-9 \n._/+:,()=%\[\]{}-]")
#: One line: its indentation, ``- `` for a sequence item, then a key, the space after its colon
#: and a value (or no space: a block below), or else the item's text (group 6).
_LINE = re.compile(r"^( *)(- )?(?:([A-Za-z0-9][A-Za-z0-9._/-]*):(?:( )(.*))?|(.*))$", re.MULTILINE)
#: A one-line plain scalar in a block: it starts with no indicator (``-`` or ``+`` only before
#: a digit, letter or dot), words are single-spaced, and no ``[]{}`` (empty collections aside).
_PLAIN = re.compile(r"(?:[A-Za-z0-9._/(]|[-+](?=[A-Za-z0-9.]))[A-Za-z0-9._/+:,()=%-]*(?: [A-Za-z0-9._/+:,()=%-]+)*")
_EMPTY: dict[str, Callable[[], Any]] = {"[]": list, "{}": dict}
_STEP = 2  # what every block is indented by under its key, and a sequence item's content by


class _Declined(Exception):
    """The text is not in the layout read here."""


def block_documents(text: str, scalar: Callable[[str], Any], max_depth: int) -> list[Any] | None:
    """The one document of ``text`` (a block mapping at the margin) in a list, as a YAML reader
    reads it, or None where the text is not in the layout read here. ``scalar`` gives a plain
    scalar's value from its text, or raises ValueError to decline; collections nesting deeper
    than ``max_depth`` are declined."""
    if not text.endswith("\n") or _FOREIGN.search(text) is not None:
        return None
    lines = _LINE.findall(text, 0, len(text) - 1)
    if len(lines) != text.count("\n"):
        return None  # pragma: no cover - every line matches; a guard all the same
    try:
        return [_Reader(scalar, max_depth).read(lines)]
    except _Declined:
        return None


class _Reader:
    def __init__(self, scalar: Callable[[str], Any], max_depth: int):
        self.scalar, self.max_depth = scalar, max_depth
        self.values: dict[str, Any] = {}  # plain scalar -> its value; they repeat a lot
        self.keys: set[str] = set()  # the texts read as keys so far, each its own value

    def value(self, text: str) -> Any:
        if text in _EMPTY:
            return _EMPTY[text]()  # a new one each time
        if text.endswith(":") or ": " in text or " :" in text or not _PLAIN.fullmatch(text):
            raise _Declined
        try:
            value = self.values[text] = self.scalar(text)
        except ValueError as err:
            raise _Declined from err
        return value

    def key(self, text: str) -> str:
        """A key's text, which must read as that very string (not a number, a boolean, null)."""
        key = self.values.get(text, self)
        if key is self:
            key = self.value(text)
        if type(key) is not str or key != text:
            raise _Declined
        self.keys.add(text)
        return text

    def read(self, lines: list[tuple[str, str, str, str, str, str]]) -> dict[str, Any]:
        """The lines (:data:`_LINE`'s groups) as the block mapping at the margin they must be.

        ``stack`` holds the open collections but the innermost (``top``, its keys or its items'
        ``- `` at column ``at``); ``pending`` is a key whose value is the block on the next line.
        The loop runs once per line: locals only, a call where the column changes."""
        values, value = self.values, self.value
        top: Any = {}
        root, at = top, 0
        stack: list[tuple[int, Any]] = []
        pending = ""
        for indent, dash, key, space, text, item in lines:
            column = len(indent)
            if pending or column != at:
                top, at = self._move(stack, top, at, column, pending, bool(dash))
            if dash:
                if type(top) is not list:
                    raise _Declined
                if not key:  # a scalar item (a nested sequence's "- " is no plain scalar)
                    found = values.get(item, self)
                    top.append(value(item) if found is self else found)
                    pending = ""
                    continue
                if len(stack) >= self.max_depth - 1:
                    raise _Declined
                stack.append((at, top))
                top.append(top := {})  # an item's mapping: its keys two columns in
                at = column + _STEP
            elif type(top) is not dict or not key:
                raise _Declined
            pending = self._entry(top, key, text if space else None)
        if pending or not lines:
            raise _Declined
        return root  # type: ignore[no-any-return]  # the mapping the first line's key is in

    def _move(self, stack: list[tuple[int, Any]], top: Any, at: int, column: int, pending: str,
              dash: bool) -> tuple[Any, int]:
        """The collection a line at ``column`` belongs to, and its column: the block a pending
        key opens (a mapping, or a sequence for a ``- `` line), two columns deeper; or one of the
        open collections, at that very column."""
        if pending:
            if column != at + _STEP or len(stack) >= self.max_depth - 1:
                raise _Declined  # an empty value (null), or another layout than fleetc's
            stack.append((at, top))
            block: list[Any] | dict[str, Any] = [] if dash else {}
            top[pending] = block
            return block, column
        while column < at and stack:
            at, top = stack.pop()
        if column != at:
            raise _Declined
        return top, at

    def _entry(self, mapping: dict[str, Any], key: str, text: str | None) -> str:
        """Read ``key: text`` into ``mapping``; with no text, the key (its block follows), else ''."""
        if key not in self.keys:
            self.key(key)
        if key in mapping:
            raise _Declined  # a YAML reader refuses duplicate keys
        if text is None:
            mapping[key] = None
            return key
        found = self.values.get(text, self)
        mapping[key] = self.value(text) if found is self else found
        return ""
