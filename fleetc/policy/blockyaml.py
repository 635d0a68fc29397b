"""A faster path for reading YAML in the block layout fleetc writes (:mod:`fleetc.render.yamlout`),
before libyaml's (:mod:`fleetc.policy.fastcompose`), for the previous ``placement.yaml``
(:func:`fleetc.state.placementfile.yaml_documents`) and for policy files written the same way.

libyaml hands Python one event object per node: a 1,000 x 20,000 fleet's ``placement.yaml`` is
600,000 of them (most of a second), its policies a million. Generated files are in one fixed
layout: keys at the indentation of their mapping, a value's block two spaces deeper, a
sequence's items as ``- `` two spaces under their key, a mapping in a sequence starting on its
item's line, one-line plain scalars, ``[]`` and ``{}`` for empty collections, documents
separated by ``---`` lines. :func:`block_stream` reads text made only of that line by line,
resolving and constructing every scalar with the caller's rules (ruamel's), and declines (None)
everything else: any character outside a small set (quotes, ``#``, tabs, flow and node
indicators, anything beyond ASCII), another indentation, a line that is no key or item, a blank
line, an empty value, a key that is not a string or repeats, a scalar the caller declines,
nesting or documents too large. Where it answers, the answer is what a YAML reader gives, with
the lines libyaml marks documents at; ``tests/test_blockyaml.py`` compares it with ruamel and
with :func:`fleetc.policy.fastcompose.load_all` on fleetc's own output, on fuzzed data and on
damaged text.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

#: Any character outside those of the plain scalars, keys and empty collections read here.
_FOREIGN = re.compile(r"[^A-Za-z0-9 \n._/+:,()=%\[\]{}-]")
#: One line: its indentation, ``- `` for a sequence item, then a key, the space after its colon
#: and a value (or no space: a block below), or else the item's text (group 6).
_LINE = re.compile(r"^( *)(- )?(?:([A-Za-z0-9][A-Za-z0-9._/-]*):(?:( )(.*))?|(.*))$", re.MULTILINE)
#: A one-line plain scalar in a block: it starts with no indicator (``-`` only before a digit,
#: letter, dot or ``-``: ``--option``; ``+`` before a digit, letter or dot), words are
#: single-spaced, and no ``[]{}`` (empty collections aside).
_PLAIN = re.compile(r"(?:[A-Za-z0-9._/(]|-(?=[A-Za-z0-9.-])|\+(?=[A-Za-z0-9.]))"
                    r"[A-Za-z0-9._/+:,()=%-]*(?: [A-Za-z0-9._/+:,()=%-]+)*")
_EMPTY: dict[str, Callable[[], Any]] = {"[]": list, "{}": dict}
#: A line that separates documents (and starts the one after it).
_SEPARATOR = re.compile(r"^---$", re.MULTILINE)
_MAX_KEY = 1000  # fleetc's writer's limit for an implicit key, below YAML's
_STEP = 2  # what every block is indented by under its key, and a sequence item's content by


class _Declined(Exception):
    """The text is not in the layout read here."""


def block_documents(text: str, scalar: Callable[[str], Any], max_depth: int) -> list[Any] | None:
    """Every document of ``text`` (a null document as None), as a YAML reader reads them, or
    None where the text is not in the layout read here; see :func:`block_stream`."""
    stream = block_stream(text, scalar, max_depth, sys.maxsize)
    return None if stream is None else stream[0]


def block_stream(text: str, scalar: Callable[[str], Any], max_depth: int,
                 max_values: int) -> tuple[list[Any], list[int]] | None:
    """Every document of ``text`` (each a block mapping at the margin, or nothing: a null
    document, None) and the line (0-based) each starts on as libyaml marks it (its ``---``,
    else the first line), or None where the text is not in the layout read here. Documents are
    separated by ``---`` lines. ``scalar`` gives a plain scalar's value from its text, or raises
    ValueError to decline; collections nesting deeper than ``max_depth`` are declined, and so
    is a document that may hold more than ``max_values`` values and keys (each line adds at
    most five: a key, its value, an item, an item's mapping and a block under a key)."""
    if not text.endswith("\n") or _FOREIGN.search(text) is not None:
        return None
    separators = [m.start() for m in _SEPARATOR.finditer(text)]
    # (offset, line) where each document's text starts, and the offset where it ends
    pieces = [] if separators[:1] == [0] else [(0, 0, separators[0] if separators else len(text))]
    line = 0
    for i, offset in enumerate(separators):
        line += text.count("\n", separators[i - 1] if i else 0, offset)
        pieces.append((offset + 4, line, separators[i + 1] if i + 1 < len(separators) else len(text)))
    reader = _Reader(scalar, max_depth)
    documents: list[Any] = []
    for start, _, end in pieces:
        if start >= end:
            documents.append(None)  # nothing between two ---, or after the last: a null document
            continue
        lines = _LINE.findall(text, start, end - 1)  # every line matches: one tuple each
        if len(lines) * 5 + 1 > max_values:
            return None
        try:
            documents.append(reader.read(lines))
        except _Declined:
            return None
    return documents, [line for _, line, _ in pieces]


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
        """A key's text, which must read as that very string (not a number, a boolean, null),
        and be short enough to be an implicit key (YAML allows 1,024 characters)."""
        if len(text) > _MAX_KEY:
            raise _Declined
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
