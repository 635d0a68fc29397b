"""Deterministic, byte-stable YAML for JSON-like data (dict, list, str, int, float, bool, None).

Why a small emitter of our own instead of ruamel.yaml's dumpers:

* **Speed.** The renderer writes thousands of small manifests per compile. ruamel's round-trip
  dumper is slow, and even its pure safe dumper goes through the full event/serializer/emitter
  machinery (analysis of every scalar, line-width bookkeeping); this module is a direct
  recursive walk over a tiny data model, about 25x faster than ruamel's pure safe dumper on
  rendered manifests.
* **Byte stability.** The output must not change when ruamel.yaml is upgraded. ruamel's emitter
  has changed its quoting, wrapping and float formatting between releases; here every rule is
  fixed in this file and pinned by exact-output tests.
* **Correct quoting for YAML 1.1 *and* 1.2 readers.** Argo CD, Flux and kubectl read YAML with
  Go libraries that follow different YAML versions. A string is emitted plain only when no
  YAML 1.1 (spec or PyYAML) and no YAML 1.2 (core or JSON schema) resolver would read it as
  anything but that string; everything else is double-quoted with escapes, which means the same
  in every version. The rules are deliberately a superset of the resolvers' patterns (quoting a
  string that did not need it is harmless; failing to quote one that did is a silent bug), and
  the tests check them against ruamel.yaml (1.1 and 1.2 modes) and PyYAML with hypothesis.

Layout: block style, keys in insertion order, 2-space indentation, sequence items indented two
spaces under their key (``- `` at offset 2, content at +4), empty collections as ``{}`` / ``[]``,
no line wrapping, floats as ``repr`` with a ``.0`` forced into the mantissa (``1e+16`` ->
``1.0e+16``, which YAML 1.1 would otherwise read as a string), ``.inf`` / ``-.inf`` / ``.nan``,
a trailing newline, and multi-line strings under a key or as a sequence item as ``|`` literal blocks when that is
unambiguous (:func:`_is_literal`), else double-quoted.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["Emitter", "caching", "dump", "dump_all"]

#: Implicit keys longer than this are not allowed by YAML (1024 characters); use ``? key``.
_MAX_IMPLICIT_KEY = 1000
_INDENT = "  "

#: Exact strings that some YAML 1.1 or 1.2 resolver reads as bool, null, merge or value.
_KEYWORDS = frozenset(
    "y Y yes Yes YES n N no No NO true True TRUE false False FALSE on On ON off Off OFF "
    "null Null NULL ~ << =".split()
) | {""}

#: Anything that looks like a number in any YAML version: decimal, octal (0o17, 017), binary,
#: hex, sexagesimal (1:30), underscores, exponents with or without a dot, 1.1's odd "1.2.3"
#: floats, and the special floats. A superset on purpose.
_NUMBER_LIKE = re.compile(
    r"[-+]?(?:"
    r"0[bB][0-9a-fA-F_]*|0[oO][0-7_]*|0[xX][0-9a-fA-F_]*"
    r"|[0-9_][0-9_:]*(?:\.[0-9_.]*)?(?:[eE][-+]?[0-9_]*)?"
    r"|\.[0-9_.]*(?:[eE][-+]?[0-9_]*)?"
    r"|\.(?:inf|Inf|INF|nan|NaN|NAN)"
    r")"
)
#: YAML 1.1 timestamps start with a date; quote anything that does.
_DATE_PREFIX = re.compile(r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}")
#: Characters a plain scalar may hold here: printable ASCII (space included).
_PLAIN_CHARS = re.compile(r"[\x20-\x7e]*")
#: Names, paths and URLs without spaces or colons: plain unless a keyword. Starting with a
#: letter, they are neither number-like nor dates, and they hold no indicator sequence.
_WORDLIKE = re.compile(r"[A-Za-z][A-Za-z0-9._/-]*")
#: Characters that may not start a plain scalar (YAML indicators and space).
_BAD_FIRST = frozenset("-?:,[]{}#&*!|>'\"%@` ")

#: Escapes for double-quoted scalars; other non-printable characters use \x, \u or \U.
_ESCAPES = {
    "\0": "\\0", "\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v",
    "\f": "\\f", "\r": "\\r", "\x1b": "\\e", '"': '\\"', "\\": "\\\\",
}
#: Characters that must be escaped: outside YAML's printable set, or line/paragraph separators
#: and the BOM, which some readers treat as line breaks or strip.
_NEEDS_ESCAPE = re.compile(
    "[\"\\\\\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff\ud800-\udfff\ufffe\uffff]"
)


def _needs_quotes(text: str) -> bool:
    if text in _KEYWORDS:
        return True
    if _WORDLIKE.fullmatch(text):  # the common case, and none of the checks below can hit it
        return False
    if not _PLAIN_CHARS.fullmatch(text):
        return True
    first = text[0]
    if first in _BAD_FIRST and not (first == "-" and len(text) > 1 and text[1] != " "):
        return True
    return (
        text.startswith(("---", "..."))
        or text.endswith((" ", ":"))
        or ": " in text
        or " #" in text
        or _NUMBER_LIKE.fullmatch(text) is not None
        or _DATE_PREFIX.match(text) is not None
    )


def _is_literal(text: str) -> bool:
    """Multi-line text (a config file inside a ConfigMap) reads best as a ``|`` block. Only the
    simplest case is emitted so: printable ASCII lines, exactly one final newline (what ``|``
    keeps), a first non-empty line that does not start with a space (readers take the block's
    indentation from it; else the block would need an indentation indicator) and no blank line
    made of spaces (which could confuse it)."""
    if "\n" not in text[:-1] or not text.endswith("\n") or text.endswith("\n\n"):
        return False
    lines = text[:-1].split("\n")
    first = next((line for line in lines if line), "")
    return not first.startswith(" ") and all(
        _PLAIN_CHARS.fullmatch(line) and (line.strip() or not line) for line in lines)


def _escape(char: str) -> str:
    if char in _ESCAPES:
        return _ESCAPES[char]
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02X}"
    return f"\\u{code:04X}"


def _text(text: str) -> str:
    """``text`` plain when that reads back as the same string in every YAML version, else
    double-quoted with escapes."""
    if not _needs_quotes(text):
        return text
    return '"' + _NEEDS_ESCAPE.sub(lambda m: _escape(m.group()), text) + '"'


def _float(value: float) -> str:
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    text = repr(value)
    mantissa, e, exponent = text.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return mantissa + e + exponent


def _scalar(value: object, string: Callable[[str], str] = _text) -> str:
    """The text of a scalar or an empty collection; TypeError for anything not JSON-like.
    ``string`` writes a string (an :class:`Emitter`'s cached :func:`_text`)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return string(value)
    if isinstance(value, int):
        return str(int(value))  # int() drops IntEnum/bool-like subclasses' own __str__
    if isinstance(value, float):
        return _float(float(value))
    if isinstance(value, dict) and not value:
        return "{}"
    if isinstance(value, list) and not value:
        return "[]"
    raise TypeError(f"cannot dump {type(value).__name__} as YAML: {value!r}")


def _is_block(value: object) -> bool:
    return isinstance(value, (dict, list)) and bool(value)


#: An :class:`Emitter` keeps at most this many key heads per depth and one-line string tails
#: (it starts over when full), and remembers this many written strings and multi-line blocks
#: (a few scripts in a rendered fleet, but each may be long).
_CACHE_LIMIT = 1 << 18
_STRINGS = 1 << 16
_BLOCKS = 1 << 10

#: The emitter of the :func:`caching` scope the current code runs in (None: each dump alone).
_CURRENT: ContextVar[Emitter | None] = ContextVar("fleetc_yaml_emitter", default=None)


class Emitter:
    """One emitter and its caches: what it wrote for a mapping key at each depth
    (``<indent><key>:``) and after a key or a sequence's ``-`` for a string value (`` <text>\n``,
    or a multi-line string's block at its depth), and each string's text. Manifests repeat all
    three (at 1,000 x 20,000: 3 million keys of 132 names, 2 million strings of which 8% differ,
    and 76,000 multi-line scripts of a handful of texts), so a render dumps every
    file through one emitter (:func:`caching`); the output never depends on what is cached.
    """

    __slots__ = ("string", "tails", "blocks", "indents", "dashes", "bare_dashes", "heads_at")

    def __init__(self) -> None:
        self.string: Callable[[str], str] = functools.lru_cache(maxsize=_STRINGS)(_text)
        self.tails: dict[str, str] = {}
        self.blocks: dict[tuple[str, int], str] = {}
        #: Per depth: its indentation, a sequence item's first line start there (``<indent>- ``,
        #: and ``<indent>-`` before a cached tail) and the key heads written there. Extended by
        #: :meth:`_deeper` for documents nested deeper than any before.
        self.indents: list[str] = []
        self.dashes: list[str] = []
        self.bare_dashes: list[str] = []
        self.heads_at: list[dict[str, str]] = []
        self._deeper(16)

    def dump(self, obj: object) -> str:
        """One YAML document (without a ``---`` marker), ending in a newline."""
        if not _is_block(obj):
            return _scalar(obj, self.string) + "\n"
        out: list[str] = []
        self._node(obj, 0, out)
        return "".join(out)

    def _deeper(self, depth: int) -> dict[str, str]:
        """Make room for lines at ``depth``; the key heads there."""
        indents = self.indents
        while len(indents) <= depth:
            indent = _INDENT * len(indents)
            indents.append(indent)
            self.dashes.append(indent + "- ")
            self.bare_dashes.append(indent + "-")
            self.heads_at.append({})
        return self.heads_at[depth]

    def _head(self, heads: dict[str, str], depth: int, key: object, out: list[str]) -> str:
        """``<indent><key>:`` for a key at ``depth``, cached in ``heads``. A key too long to be an
        implicit key is written on a line of its own, ``<indent>? <key>``, and its value's line
        starts with ``<indent>:``."""
        if not isinstance(key, str):
            raise TypeError(f"mapping keys must be str, got {type(key).__name__}: {key!r}")
        text = self.string(key)
        indent = self.indents[depth]
        if len(text) > _MAX_IMPLICIT_KEY:
            out.append(f"{indent}? {text}\n")
            return indent + ":"
        if len(heads) >= _CACHE_LIMIT:
            heads.clear()
        head = heads[key] = indent + text + ":"
        return head

    def _tail(self, text: str, depth: int) -> str:
        """What follows a key or a sequence's ``-`` for the string ``text``: `` <text>\n`` for
        one line, else `` |\n`` and its lines at ``depth`` (:func:`_is_literal`) or the quoted
        text; cached, one-line strings in :attr:`tails` and multi-line ones by depth in
        :attr:`blocks` (a rendered fleet repeats a few scripts in every pod)."""
        if "\n" not in text:
            tails = self.tails
            if len(tails) >= _CACHE_LIMIT:
                tails.clear()
            tail = tails[text] = f" {_text(text)}\n"
            return tail
        blocks = self.blocks
        block = blocks.get((text, depth))
        if block is None:
            if len(blocks) >= _BLOCKS:
                blocks.clear()
            block = blocks[text, depth] = self._block(text, depth)
        return block

    def _block(self, text: str, depth: int) -> str:
        """`` |\n`` and the lines of ``text`` at ``depth`` when it reads best as a literal
        block, else `` <quoted text>\n``."""
        if not _is_literal(text):
            return f" {_text(text)}\n"
        self._deeper(depth)
        indent = self.indents[depth]
        return " |\n" + "".join(f"{indent}{part}\n" if part else "\n" for part in text[:-1].split("\n"))

    def _mapping(self, node: dict[object, object], depth: int, out: list[str], first_prefix: str | None) -> None:
        """Emit a non-empty mapping whose keys are at ``depth``; the first line starts with
        ``first_prefix`` (e.g. ``- ``) instead of the indentation when given (it is as long).

        The hot loop of every dump, one ``append`` per line, each line one concatenation: keys
        (with their indentation) and one-line strings come from the caches, values of the exact
        built-in types are dispatched inline (a ``type() is`` test is much cheaper than the
        generic path's ``isinstance`` chain); anything else, subclasses included, takes
        :meth:`_mapping_value`. Every line is written indented, and the first one's indentation
        replaced by ``first_prefix`` at the end, rather than a prefix kept per entry. mypy does
        not narrow through ``kind``, and a ``cast`` costs a call per entry here, so the branches
        that rely on it say so in an ignore."""
        try:
            heads = self.heads_at[depth]
        except IndexError:
            heads = self._deeper(depth)
        tails = self.tails
        inner = depth + 1
        append = out.append  # lines, not concatenated: dump joins them once at the end
        first = 0 if first_prefix is None else len(out)  # the line to prefix, if any
        for key, value in node.items():
            head = heads.get(key)  # type: ignore[call-overload]
            if head is None:
                head = self._head(heads, depth, key, out)
            kind = type(value)
            if kind is str:
                tail = tails.get(value)  # type: ignore[call-overload]
                if tail is None:
                    tail = self._tail(value, inner)  # type: ignore[arg-type]
                append(head + tail)
            elif kind is dict and value:
                append(head + "\n")
                self._mapping(value, inner, out, None)  # type: ignore[arg-type]
            elif kind is list and value:
                append(head + "\n")
                self._sequence(value, inner, out, None)  # type: ignore[arg-type]
            elif kind is int:
                append(f"{head} {value}\n")
            elif kind is bool:
                append(head + (" true\n" if value else " false\n"))
            else:
                self._mapping_value(head, value, inner, out)
        if first_prefix is not None:
            out[first] = first_prefix + out[first][len(first_prefix):]

    def _mapping_value(self, line: str, value: object, inner: int, out: list[str]) -> None:
        """The value of one mapping entry whose line (indentation and key) is ``line``; a block
        value's lines at depth ``inner``."""
        if _is_block(value):
            out.append(line + "\n")
            self._node(value, inner, out)
        elif isinstance(value, str):
            out.append(line + self._tail(value, inner))
        else:
            out.append(f"{line} {_scalar(value, self.string)}\n")

    def _sequence(self, node: list[object], depth: int, out: list[str], first_prefix: str | None) -> None:
        """Emit a non-empty sequence whose ``-`` are at ``depth`` (the first line starting with
        ``first_prefix`` when given, as in :meth:`_mapping`); nested collections start on the
        item's own line."""
        try:
            dash = self.dashes[depth]
        except IndexError:
            self._deeper(depth)
            dash = self.dashes[depth]
        bare = self.bare_dashes[depth]
        inner = depth + 1
        append = out.append
        first = 0 if first_prefix is None else len(out)
        for item in node:
            kind = type(item)
            if kind is dict and item:  # the same dispatch as in _mapping, the same ignores
                self._mapping(item, inner, out, dash)  # type: ignore[arg-type]
            elif kind is str:
                tail = self.tails.get(item) or self._tail(item, inner)  # type: ignore[call-overload, arg-type]
                append(bare + tail)
            elif isinstance(item, dict) and item:
                self._mapping(item, inner, out, dash)
            elif isinstance(item, list) and item:
                self._sequence(item, inner, out, dash)
            else:
                append(f"{dash}{_scalar(item, self.string)}\n")
        if first_prefix is not None:
            out[first] = first_prefix + out[first][len(first_prefix):]

    def _node(self, value: object, depth: int, out: list[str]) -> None:
        """Emit a block collection at ``depth`` (a value under a key or a document root);
        sequences under a key are indented like their siblings' keys."""
        if isinstance(value, dict):
            self._mapping(value, depth, out, None)
        else:
            assert isinstance(value, list)
            self._sequence(value, depth, out, None)


@contextmanager
def caching() -> Iterator[Emitter]:
    """Every :func:`dump` in this scope (a render: :func:`fleetc.render.render`) goes through
    one :class:`Emitter`, whose caches go with the scope; outside one, each dump has its own."""
    emitter = Emitter()
    token = _CURRENT.set(emitter)
    try:
        yield emitter
    finally:
        _CURRENT.reset(token)


def dump(obj: object) -> str:
    """One YAML document (without a ``---`` marker), ending in a newline."""
    return (_CURRENT.get() or Emitter()).dump(obj)


def dump_all(objs: Iterable[object]) -> str:
    """Several documents separated by ``---`` lines; empty input gives an empty string."""
    emitter = _CURRENT.get() or Emitter()
    return "---\n".join(emitter.dump(obj) for obj in objs)
