"""A fast path for :mod:`fleetc.policy.load`: libyaml's C parser, composed into ruamel.yaml nodes, or
straight into plain data.

ruamel.yaml's pure-Python scanner reads about 200 KB/s, which makes loading the slowest stage of
a large compile. libyaml (through PyYAML's ``CParser``) scans and parses in C; this module
turns its events into exactly the node graph ruamel's composer would build (ruamel's node
classes, tags resolved by ruamel's own YAML 1.2 resolver, the same positions), so everything
after composition, and therefore every Document and diagnostic, is unchanged. PyYAML's own
composer is not used: it is YAML 1.1 and it recurses in C without a
depth limit.

The fast path declines (returns None) and :mod:`fleetc.policy.load` parses with ruamel whenever the
two could disagree or something is wrong: libyaml missing, a ``%`` directive (a ``%YAML 1.1``
document changes the resolver), tabs and the line breaks YAML 1.1 and 1.2 treat differently
(NEL, LS, PS), explicit tags, anchors and aliases, a block scalar at the top of a document, an
empty value in a flow mapping, any parse error (ruamel then words the diagnostic), and nesting
deeper than :data:`MAX_FAST_DEPTH`. ``tests/test_fastcompose.py`` compares both paths on every
policy file of the tests, on corner cases and on fuzzed documents.

:func:`load_all` is faster still: it builds the data without nodes and keeps no positions
(fleetc works them out by :func:`positions_all`, from the events alone, only for a file that
gets a message). It declines
all that :func:`compose_all` declines (so the node path that works out positions never falls
back to ruamel, which could read the file differently), and everything :mod:`fleetc.policy.load` would
report (duplicate keys, keys that are not strings, scalars it refuses, documents too deep or too
large), so that the node path words the diagnostic.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

if TYPE_CHECKING:
    from yaml._yaml import Mark

try:  # PyYAML with libyaml; without it every file takes the ruamel path
    from yaml import YAMLError as _CError
    from yaml._yaml import CParser as _LibyamlParser
    from yaml.events import (
        AliasEvent,
        DocumentEndEvent,
        DocumentStartEvent,
        MappingEndEvent,
        MappingStartEvent,
        ScalarEvent,
        SequenceEndEvent,
        SequenceStartEvent,
    )
    CParser: type[_LibyamlParser] | None = _LibyamlParser
except ImportError:  # pragma: no cover - PyYAML is a dependency; libyaml may be absent
    CParser = None

#: Deeper documents go to ruamel, whose recursion limit produces fleetc's nesting diagnostic.
MAX_FAST_DEPTH = 200
_DECLINE = re.compile(r"[\t\x85\u2028\u2029]")


def _declined(text: str) -> bool:
    """A ``%`` directive (a line starting with ``%``), a tab, NEL, LS or PS anywhere."""
    if text.startswith("%") or "\n%" in text or "\t" in text:
        return True
    return not text.isascii() and _DECLINE.search(text) is not None


def _marked(text: str) -> bool:
    """Whether an anchor, alias or tag may be in ``text``: without these characters none is."""
    return "&" in text or "*" in text or "!" in text


def available() -> bool:
    return CParser is not None


def compose_all(text: str, resolver: Any) -> list[Node] | None:
    """Every document of ``text`` as ruamel nodes, or None to parse with ruamel instead.

    ``resolver`` is the ruamel YAML object's resolver (YAML 1.2 core schema).
    """
    if CParser is None or _declined(text):
        return None
    parser = CParser(text)
    try:
        return _Composer(resolver, text).run(parser)
    except _CError:
        return None
    finally:
        parser.dispose()


def deeper_than(text: str, limit: int) -> bool:
    """Whether mappings and lists in ``text`` nest more than ``limit`` deep, told by libyaml's
    events; ruamel's pure-Python scanner takes time quadratic in the depth to find out (about
    10 s for 2,000 levels). False where libyaml is missing or stops at another error first."""
    if CParser is None:
        return False
    parser = CParser(text)
    depth = 0
    try:
        while (event := parser.get_event()) is not None:
            kind = type(event)
            if kind is MappingStartEvent or kind is SequenceStartEvent:
                depth += 1
                if depth > limit:
                    return True
            elif kind is MappingEndEvent or kind is SequenceEndEvent:
                depth -= 1
    except _CError as err:  # libyaml's scanner looks ahead, and stops at 1,000 flow levels
        return limit < _LIBYAML_MAX_NESTING and "maximum nesting depth" in str(err)
    finally:
        parser.dispose()
    return False


#: The flow nesting at which libyaml's scanner stops (``yaml_set_max_nest_level``'s default).
_LIBYAML_MAX_NESTING = 1000


#: What a ``scalar`` callback of :func:`load_all` returns for a value it leaves to the node path.
DECLINE = object()


class Stream(NamedTuple):
    """What :func:`load_all` reads: each document's data, and the line (0-based) each starts
    on, where :func:`positions_all` may start reading one of them."""

    documents: list[Any]
    lines: list[int]


def load_all(text: str, resolver: Any, scalar: Callable[[Any], Any], *, max_depth: int,
             max_values: int, cache: dict[str, Any] | None = None) -> Stream | None:
    """Every document of ``text`` as plain data, or None to take the node path instead.

    ``scalar`` turns a plain ruamel :class:`ScalarNode` (tag resolved, no position) into its
    value, or :data:`DECLINE`. A document nesting deeper than ``max_depth`` or holding more
    than ``max_values`` values and keys is declined. ``cache`` (plain scalar -> value) may be
    shared by calls with the same ``resolver`` and ``scalar`` rules.
    """
    if CParser is None or _declined(text):
        return None
    parser = CParser(text)
    builder = _Builder(resolver, scalar, max_depth, max_values, marked=_marked(text),
                       cache={} if cache is None else cache)
    try:
        documents = builder.run(parser.get_event)
    except _CError:
        return None
    finally:
        parser.dispose()
    if documents is None or (builder.empty_values and compose_all(text, resolver) is None):
        return None  # where an empty value is, the node path may read the file with ruamel
    return Stream(documents, builder.lines)


def positions_all(text: str, resolver: Any, first_line: int = 0,
                  tags: dict[str, Any] | None = None) -> list[_Tables | None] | None:
    """Where every value and key of each document of ``text`` is, as the node path records
    them (:func:`compose_all`'s nodes converted by :mod:`fleetc.policy.load`), or None to take
    that path instead; a null document gives None. Lines count from ``first_line`` + 1: a
    file's documents from the line each starts on (:attr:`Stream.lines`) are read alone.
    ``tags`` (plain scalar -> its resolved tag) may be shared by calls with the same ``resolver``.

    For a file :func:`load_all` read without a problem: its values and keys, 1-based line and
    column by field path, straight from libyaml's events, with no node built and no value
    constructed (the node path took 4 s of a 200 x 4,000 compile to place its warnings). It
    declines everything :func:`compose_all` declines or marks otherwise (an empty plain
    scalar, which ruamel marks where the next token starts), and what the node path reports
    (a key that is not a string or repeats), so where it answers, the answer is the same.
    """
    if CParser is None or _declined(text):
        return None
    parser = CParser(text)
    try:
        return _PositionWalk(resolver, first_line, {} if tags is None else tags).run(parser.get_event)
    except _CError:
        return None
    finally:
        parser.dispose()


#: One document's positions: of its values, and of its keys, by field path.
_Tables = tuple[dict[tuple[str | int, ...], tuple[int, int]], dict[tuple[str | int, ...], tuple[int, int]]]
_TEXT_TAGS = ("tag:yaml.org,2002:str", "tag:yaml.org,2002:timestamp")
_NULL_TAG = "tag:yaml.org,2002:null"


class _PositionWalk:
    """:func:`positions_all`'s loop over events. Each open collection on the stack is
    ``[path, next index (a sequence) or -1 (a mapping), the pending key's path or None]``."""

    def __init__(self, resolver: Any, first_line: int, tags: dict[str, Any]):
        self.resolve = resolver.resolve
        self.line = first_line + 1  # added to libyaml's 0-based lines
        self.tags = tags  # plain scalar -> its resolved tag; keys repeat a lot
        self.values: dict[tuple[str | int, ...], tuple[int, int]] = {}
        self.keys: dict[tuple[str | int, ...], tuple[int, int]] = {}
        self.stack: list[list[Any]] = []
        self.null = False  # whether the document's root is a null scalar

    def _tag(self, value: str) -> Any:
        tag = self.tags.get(value)
        if tag is None:
            tag = self.tags[value] = self.resolve(ScalarNode, value, (True, False))
        return tag

    def run(self, next_event: Callable[[], Any]) -> list[_Tables | None] | None:
        documents: list[_Tables | None] = []
        stack = self.stack
        while (event := next_event()) is not None:
            kind = type(event)
            if kind is ScalarEvent or kind is MappingStartEvent or kind is SequenceStartEvent:
                if not self._node(event, kind):
                    return None
            elif kind is SequenceEndEvent or kind is MappingEndEvent:
                stack.pop()
            elif kind is DocumentEndEvent:
                documents.append(None if self.null else (self.values, self.keys))
                self.values, self.keys, self.null = {}, {}, False
            elif kind is AliasEvent:
                return None
        return documents

    def _node(self, event: Any, kind: type) -> bool:
        """Note where the scalar or collection ``event`` starts; False to decline."""
        scalar = kind is ScalarEvent
        if _anchored_or_tagged(event) or (scalar and event.value == "" and not event.style):
            return False  # an empty plain scalar: ruamel marks it where the next token starts
        mark = event.start_mark
        stack = self.stack
        path: tuple[str | int, ...] = ()
        if not stack:
            if scalar:
                if event.style in ("|", ">"):
                    return False  # ruamel reads a following '---' into it
                self.null = event.implicit[0] and self._tag(event.value) == _NULL_TAG
        elif (top := stack[-1])[1] >= 0:  # an item of a sequence
            path = top[0] + (top[1],)
            top[1] += 1
        elif top[2] is None:  # a key: a string, said once (else the node path reports it)
            if not scalar or (event.implicit[0] and self._tag(event.value) not in _TEXT_TAGS):
                return False
            top[2] = child = top[0] + (event.value,)
            if child in self.keys:
                return False
            self.keys[child] = (mark.line + self.line, mark.column + 1)
            return True
        else:  # a key's value
            path, top[2] = top[2], None
        self.values[path] = (mark.line + self.line, mark.column + 1)
        if not scalar:
            stack.append([path, 0 if kind is SequenceStartEvent else -1, None])
        return len(stack) <= MAX_FAST_DEPTH


class _Builder:
    """:func:`load_all`'s loop over events, with an explicit stack (no recursion).

    Each open collection is a list of its items, a mapping's keys and values alternating; a
    mapping becomes a dict when it closes, so that every item is a single ``append``.
    """

    def __init__(self, resolver: Any, scalar: Callable[[Any], Any], max_depth: int,
                 max_values: int, *, marked: bool, cache: dict[str, Any]):
        self.resolve, self.scalar = resolver.resolve, scalar
        self.max_depth, self.max_values, self.marked = max_depth, max_values, marked
        self.plain = cache  # plain scalar -> value; they repeat a lot
        self.empty_values = False  # whether an empty plain scalar was read
        self.lines: list[int] = []  # the line each document starts on
        # The first characters the resolver has patterns for (anything else is a string), or
        # None when it has patterns for every character.
        table = resolver.versioned_resolver
        self.resolvable = None if None in table else frozenset(k for k in table if k)

    def run(self, next_event: Callable[[], Any]) -> list[Any] | None:
        documents: list[Any] = []  # the bottom of the stack: each document's root lands here
        stack = [documents]
        top = documents
        values = 0  # in the current document, counted as collections close (the file size
        # limit bounds them until the document ends: without aliases, values take room)
        marked, scalar = self.marked, self._scalar  # the loop runs once per event: locals only
        while (event := next_event()) is not None:
            kind = type(event)
            if marked and (kind is AliasEvent or _anchored_or_tagged(event)):
                return None  # an alias, anchor or tag needs a character that makes text marked
            if kind is ScalarEvent:
                if (value := scalar(event, top is documents)) is DECLINE:
                    return None
                top.append(value)
            elif kind is MappingStartEvent or kind is SequenceStartEvent:
                top = []
                stack.append(top)
                if len(stack) > self.max_depth + 1:
                    return None
            elif kind is SequenceEndEvent or kind is MappingEndEvent:
                items = stack.pop()
                values += len(items) + 1
                value = items if kind is SequenceEndEvent else _mapping(items)
                if value is None:
                    return None
                top = stack[-1]
                top.append(value)
            elif kind is DocumentStartEvent or kind is DocumentEndEvent:
                if not self._document(kind, event, values):
                    return None
                values = 0
        return documents

    def _scalar(self, event: Any, at_top: bool) -> Any:
        """A scalar event's value, or :data:`DECLINE`."""
        if event.implicit[0]:
            value = self.plain.get(event.value, DECLINE)
            return self._plain(event.value) if value is DECLINE else value
        if at_top and event.style in ("|", ">"):
            return DECLINE  # ruamel reads a following '---' into a top-level block scalar
        return event.value

    def _document(self, kind: type, event: Any, values: int) -> bool:
        """Note the line a document starts on; False where one that ends held more than
        ``max_values`` values."""
        if kind is DocumentStartEvent:
            self.lines.append(event.start_mark.line)
            return True
        return values <= self.max_values

    def _plain(self, text: str) -> Any:
        """A plain scalar's value, resolved and constructed by ruamel's rules; cached but for
        the empty one, which must pass here each time to be noted."""
        if text and self.resolvable is not None and text[0] not in self.resolvable:
            value = self.plain[text] = text  # the resolver would say str: names, URLs...
            return value
        value = self.scalar(ScalarNode(self.resolve(ScalarNode, text, (True, False)), text,
                                       None, None))
        if text:
            self.plain[text] = value
        else:
            self.empty_values = True
        return value


def _mapping(items: list[Any]) -> dict[str, Any] | None:
    """Alternating keys and values -> a dict; None where a key is not a string or repeats (the
    node path reports those)."""
    keys = items[::2]
    try:
        "".join(keys)  # the quickest check that every key is a string
    except TypeError:
        return None
    mapping = dict(zip(keys, items[1::2], strict=True))
    return mapping if len(mapping) == len(keys) else None


def _empty_plain(event: Any) -> bool:
    return event.value == "" and not event.style


def _anchored_or_tagged(event: Any) -> bool:
    """Anchors: the two parsers allow different characters in names; explicit tags: they read
    odd ones differently."""
    return getattr(event, "anchor", None) is not None or getattr(event, "tag", None) is not None


def _value_pending(stack: list[list[Any]]) -> bool:
    """Whether the innermost open collection is a mapping whose key waits for its value."""
    return bool(stack) and stack[-1][1] is not None


def _attach(parent: list[Any], node: Node) -> None:
    """Add ``node`` to the open collection ``parent`` ([collection node, pending key or None])."""
    if parent[0].id == "sequence":
        parent[0].value.append(node)
    elif parent[1] is None:
        parent[1] = node
    else:
        parent[0].value.append((parent[1], node))
        parent[1] = None


class _Composer:
    """ruamel's ``Composer.compose_node`` as a loop over events with an explicit stack."""

    def __init__(self, resolver: Any, text: str):
        self.resolve = resolver.resolve
        self.tags: dict[tuple[str, tuple[bool, bool]], Any] = {}  # plain scalars repeat a lot
        self.text = text
        self.lines: list[str] | None = None

    def _lines(self) -> list[str]:
        if self.lines is None:
            self.lines = self.text.split("\n")
        return self.lines

    def _after_colon(self, mark: Mark) -> bool:
        """Whether libyaml put an empty value right after its ``:`` (ruamel does not)."""
        lines = self._lines()
        line = lines[mark.line] if mark.line < len(lines) else ""
        return 0 < mark.column <= len(line) and line[mark.column - 1] == ":"

    def _past_the_end(self, mark: Mark) -> bool:
        """A mark on the line libyaml adds after a file without a final newline."""
        return mark.line >= len(self._lines())

    def run(self, parser: Any) -> list[Node] | None:
        documents: list[Node] = []
        stack: list[list[Any]] = []  # [collection node, pending mapping key or None]
        root: Node | None = None
        empty: ScalarNode | None = None  # an empty plain scalar waiting for its position
        while (event := parser.get_event()) is not None:
            kind = type(event)
            if empty is not None and not self._place_empty(empty, event.start_mark):
                return None
            empty = None
            if kind is AliasEvent or _anchored_or_tagged(event):
                return None
            node: Node
            if kind is ScalarEvent:
                if self._scalar_declined(event, stack):
                    return None
                node = self._scalar(event)
                if _empty_plain(event) and _value_pending(stack) and self._after_colon(event.start_mark):
                    empty = node  # ruamel marks where the next token starts
            elif kind is SequenceStartEvent or kind is MappingStartEvent:
                node = self._collection(event, kind is SequenceStartEvent)
            elif kind is SequenceEndEvent or kind is MappingEndEvent:
                stack.pop()[0].end_mark = event.end_mark
                continue
            elif kind is DocumentEndEvent:
                assert root is not None  # libyaml gives every document a root, an empty one ""
                documents.append(root)
                root = None
                continue
            else:  # stream and document start
                continue
            if stack:
                _attach(stack[-1], node)
            else:
                root = node
            if kind is not ScalarEvent:
                stack.append([node, None])
                if len(stack) > MAX_FAST_DEPTH:
                    return None
        return documents

    def _place_empty(self, empty: ScalarNode, mark: Mark) -> bool:
        """Mark an empty plain scalar where the next event starts, as ruamel does; False where that
        is past the end (ruamel marks the end of the last line instead)."""
        if self._past_the_end(mark):
            return False
        empty.start_mark = empty.end_mark = mark
        return True

    def _scalar_declined(self, event: Any, stack: list[list[Any]]) -> bool:
        """Whether ruamel must read the file because of this scalar event."""
        if not stack and event.style in ("|", ">"):
            return True  # ruamel reads a following '---' into a top-level block scalar
        if not _empty_plain(event):
            return False
        if self._past_the_end(event.start_mark):
            return True  # ruamel marks the end of the last line instead
        # In a flow mapping ruamel marks the ':' itself; rare enough to leave to it.
        return _value_pending(stack) and bool(stack[-1][0].flow_style)

    def _scalar(self, event: Any) -> ScalarNode:
        key = (event.value, event.implicit)
        tag = self.tags.get(key)
        if tag is None:
            tag = self.tags[key] = self.resolve(ScalarNode, event.value, event.implicit)
        return ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)

    def _collection(self, event: Any, sequence: bool) -> Node:
        cls = SequenceNode if sequence else MappingNode
        return cls(self.resolve(cls, None, event.implicit), [], event.start_mark, None,
                   flow_style=event.flow_style)
