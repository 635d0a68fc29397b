"""Load stage: policy files -> plain data that remembers where every value came from.

YAML is composed to nodes (not constructed), so fleetc converts the node graph itself and can
keep a line and column for every value and key, refuse duplicate keys, and bound alias
expansion (a "billion laughs" file stops at :data:`MAX_NODES`). Nothing here knows policy kinds.

Positions cost more than the data, and only a file with a message needs them: a file that
:func:`fastcompose.load_all` reads without a problem becomes data at once, and its positions are
worked out from libyaml's events when something first asks for one (:class:`_Positions`). On a
large input, files are read by that fast path on every core (:mod:`fleetc.infra.forkmap`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, cast

from ruamel.yaml import YAML
from ruamel.yaml.composer import Composer
from ruamel.yaml.constructor import ConstructorError, SafeConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import AliasEvent
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.reader import ReaderError
from ruamel.yaml.tag import Tag

from fleetc.credentials import may_hold_credentials
from fleetc.errors import Diagnostic
from fleetc.infra.collector import gc_paused
from fleetc.infra.forkmap import fork_map
from fleetc.policy import blockyaml, fastcompose
from fleetc.policy import files as policy_files
from fleetc.policy.files import discover, display_path, read_source, too_large

#: Values one document may expand to, counting every alias expansion (bounds alias bombs).
MAX_NODES = 200_000
#: How deep mappings and lists may nest.
MAX_DEPTH = 64
#: Integers of more digits are refused: no policy field takes one, and Python will not even
#: print one of more than 4,300 digits in a message.
MAX_INT_DIGITS = 100


FieldPath = tuple[str | int, ...]
Position = tuple[int, int]  # 1-based line and column


def format_field(path: FieldPath) -> str:
    """``('spec', 'clusters', 1, 'name')`` -> ``spec.clusters[1].name``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


class Scanned(NamedTuple):
    """What validation reads of a document's data as a whole (:func:`scan`)."""

    #: The data as JSON text, keys sorted: what the inputs digest hashes; None where the data
    #: holds NaN, infinity or what JSON cannot hold.
    json: str | None
    #: Whether a value may be a credential (:func:`may_hold_credentials`; always, without text).
    suspect: bool


_ENCODER = json.JSONEncoder(ensure_ascii=False, check_circular=False, allow_nan=False, sort_keys=True)


def scan(data: Any) -> Scanned:
    """``data`` as JSON text (``json.dumps(data, sort_keys=True, ensure_ascii=False)``, the same
    for finite data: one pass in C that tells for most documents that they hold no NaN to report)
    and whether it may hold a credential (most documents then skip the check of every value)."""
    try:
        text = _ENCODER.encode(data)
    except (ValueError, TypeError):
        return Scanned(None, True)
    return Scanned(text, may_hold_credentials(text))


@dataclass(frozen=True)
class Document:
    """One YAML document: its data and the position of every value and key in it."""

    path: str  # as the user named it, for messages
    index: int  # position of the document in its file (0-based)
    data: Any
    values: Mapping[FieldPath, Position]
    keys: Mapping[FieldPath, Position]
    #: :func:`scan` of ``data``, made where it was read (on a large input by the forked loaders,
    #: beside the parsing, so that validation does not do it alone); None where it was not.
    scanned: Scanned | None = field(default=None, compare=False, repr=False)

    def holds(self, path: FieldPath) -> bool:
        """Whether ``path`` has a value in the document (is in ``values``), told by its data,
        so that positions are worked out only for the document a message names."""
        value = self.data
        for part in path:
            if isinstance(part, str) and isinstance(value, dict) and part in value:
                value = value[part]
            elif type(part) is int and isinstance(value, list) and 0 <= part < len(value):
                value = value[part]
            else:
                return False
        return True

    def locate(self, path: FieldPath, *, key: bool = False) -> Position:
        """Position of ``path`` (of its key when ``key``), else of its nearest known parent."""
        table = self.keys if key else self.values
        while path not in table and path:
            path = path[:-1]
        return table.get(path, self.values.get((), (1, 1)))

    def diagnostic(
        self, path: FieldPath, message: str, *, hint: str = "", key: bool = False
    ) -> Diagnostic:
        line, column = self.locate(path, key=key)
        return Diagnostic(self.path, line, column, format_field(path), message, hint)


@dataclass(frozen=True)
class LoadResult:
    documents: tuple[Document, ...]
    diagnostics: tuple[Diagnostic, ...]


def load_files(files: Iterable[Path], workdir: Path = Path(".")) -> LoadResult:
    """Read and parse every file; problems become diagnostics, never exceptions. Files are named
    as :func:`display_path` names them relative to ``workdir``.

    A file is opened without blocking and read only when it is a regular file, and never
    beyond :data:`~fleetc.policy.files.MAX_FILE_BYTES` (a file that grows while read, or lies about its size, is
    refused all the same).
    """
    sources: list[tuple[str, bytes]] = []
    refused: list[Diagnostic] = []
    for path in files:
        source = read_source(path, display_path(path, workdir))
        if isinstance(source, Diagnostic):
            refused.append(source)
        else:
            sources.append(source)
    loaded = load_sources(sources)
    return LoadResult(loaded.documents, (*refused, *loaded.diagnostics))


def load_paths(paths: Sequence[str], workdir: Path = Path(".")) -> LoadResult:
    """:func:`discover` and :func:`load_files`, every problem of both in one result; ``paths``
    relative to ``workdir`` unless absolute."""
    found = discover(paths, workdir)
    loaded = load_files(found.files, workdir)
    return LoadResult(loaded.documents, (*found.problems, *loaded.diagnostics))


def load_sources(sources: Iterable[tuple[str, bytes]]) -> LoadResult:
    """Parse policy files given as (display path, content) pairs, from disk or from git."""
    with gc_paused():
        return _load_sources(sources)


def _load_sources(sources: Iterable[tuple[str, bytes]]) -> LoadResult:
    texts: list[tuple[str, str]] = []
    diagnostics: list[Diagnostic] = []
    for display, raw in sources:
        if len(raw) > policy_files.MAX_FILE_BYTES:
            diagnostics.append(too_large(display, len(raw)))
            continue
        text, problem = _decode(raw, display)
        if problem:
            diagnostics.append(problem)
        else:
            texts.append((display, text))
    plain_values: dict[str, Any] = {}  # one cache for the files of this load (see _read_fast)
    fast = fork_map(functools.partial(_read_fast, plain_values=plain_values), [text for _, text in texts],
                    [len(text) for _, text in texts])
    documents: list[Document] = []
    for (display, text), data in zip(texts, fast, strict=True):
        docs, problems = _parse(text, display, data)
        documents.extend(docs)
        diagnostics.extend(problems)
    return LoadResult(tuple(documents), tuple(diagnostics))


def _decode(raw: bytes, display: str) -> tuple[str, Diagnostic | None]:
    try:
        return raw.decode("utf-8-sig"), None
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        line_start = raw.rfind(b"\n", 0, err.start) + 1
        column = len(raw[line_start:err.start].decode("utf-8-sig", "replace")) + 1
        return "", Diagnostic(
            display, line, column, "", f"not valid UTF-8 (byte 0x{raw[err.start]:02x})",
            hint="save the file as UTF-8",
        )


def parse(text: str, display: str) -> tuple[list[Document], list[Diagnostic]]:
    """Parse every document in ``text``; empty documents (a trailing ``---``) are skipped."""
    return _parse(text, display, _read_fast(text, {}))


class _Read(NamedTuple):
    """What :func:`_read_fast` made of a file: its documents, and :func:`scan` of each (None for
    a null document)."""

    stream: fastcompose.Stream
    scanned: list[Scanned | None]


def _read_fast(text: str, plain_values: dict[str, Any]) -> _Read | None:
    """Every document of ``text`` as data by :func:`fastcompose.load_all`, each scanned, or None
    where the node path must read it (something to report, or something only ruamel reads right).

    ``plain_values``: plain scalar -> its value (or ``fastcompose.DECLINE``), shared by the files
    of one load: the same names, numbers and quantities recur, and resolving one by ruamel's
    patterns is slow. It starts over when it holds more than :data:`_MAX_PLAIN_VALUES`."""
    yaml = YAML(typ="safe", pure=True)
    if len(plain_values) > _MAX_PLAIN_VALUES:
        plain_values.clear()
    scalars = _ScalarValues(yaml.constructor)

    def plain(value: str) -> Any:
        found = plain_values.get(value, plain_values)
        if found is plain_values:
            node = ScalarNode(yaml.resolver.resolve(ScalarNode, value, (True, False)), value, None, None)
            found = plain_values[value] = scalars(node)
        if found is fastcompose.DECLINE:
            raise ValueError(value)
        return found

    block = blockyaml.block_stream(text, plain, MAX_DEPTH, MAX_NODES)  # fleetc's own layout, read faster
    stream = fastcompose.Stream(*block) if block is not None else fastcompose.load_all(
        text, yaml.resolver, scalars, max_depth=MAX_DEPTH, max_values=MAX_NODES, cache=plain_values)
    if stream is None:
        return None
    return _Read(stream, [None if data is None else scan(data) for data in stream.documents])


def _parse(text: str, display: str, fast: _Read | None) -> tuple[list[Document], list[Diagnostic]]:
    """:func:`parse`, given what :func:`_read_fast` made of ``text``."""
    if fast is not None:
        positions = _Positions(text, fast.stream.lines)
        documents = [Document(display, index, data, positions.table(index, key=False),
                              positions.table(index, key=True), scanned)
                     for index, (data, scanned) in enumerate(zip(fast.stream.documents, fast.scanned, strict=True))
                     if data is not None]
        return documents, [] if documents else [_empty_file(display)]
    yaml = YAML(typ="safe", pure=True)
    try:
        nodes, written = _compose(text, yaml)
    except _OtherVersion as err:
        return [], [_version_diagnostic(err, text, display)]
    except MarkedYAMLError as err:
        return [], [_syntax_diagnostic(err, display)]
    except ReaderError as err:
        return [], [_character_diagnostic(err, text, display)]
    except YAMLError as err:
        return [], [Diagnostic(display, 0, 0, "", f"invalid YAML: {err}")]
    except RecursionError:
        return [], [Diagnostic(display, 0, 0, "", f"nesting is deeper than {MAX_DEPTH} levels")]
    documents, diagnostics = [], []
    for index, converter in _converted(nodes, written, display, yaml.constructor):
        if converter.diagnostics:
            diagnostics.extend(converter.diagnostics)
        else:
            documents.append(Document(display, index, converter.data, converter.values,
                                      converter.keys))
    if not documents and not diagnostics:
        diagnostics.append(_empty_file(display))
    return documents, diagnostics


#: :func:`_read_fast`'s cache of plain scalars starts over when it holds more than this many.
_MAX_PLAIN_VALUES = 100_000


#: ``id(node)`` -> the tag written on that node, as written (``!!str``, ``!custom``, ``!``).
WrittenTags = Mapping[int, str]


def _compose(text: str, yaml: YAML) -> tuple[list[Node], WrittenTags]:
    """The node graph of every document and the tags written in ``text``: libyaml's nodes (same
    nodes, ~6x faster; it declines every file with a tag), else ruamel's."""
    fast = fastcompose.compose_all(text, yaml.resolver)
    if fast is not None:
        return fast, {}
    yaml.Composer = _TagNotingComposer
    return list(yaml.compose_all(text)), yaml.composer.written


class _OtherVersion(MarkedYAMLError):
    """A ``%YAML`` directive for another version than 1.2."""


class Yaml12Composer(Composer):
    """ruamel's composer, refusing a ``%YAML`` directive for any version but 1.2: ruamel reads
    the document after ``%YAML 1.1`` by YAML 1.1's rules (``010`` is 8, ``yes`` is true,
    ``1:30`` is 90), which no reviewer of the file expects and the fast paths, which decline
    every directive, would never give."""

    def compose_document(self: Any) -> Any:
        event = self.parser.peek_event()
        version = getattr(event, "version", None)
        if version is not None and tuple(version) != (1, 2):
            raise _OtherVersion(problem=f"%YAML {'.'.join(map(str, version))}", problem_mark=event.start_mark)
        return super().compose_document()


class _TagNotingComposer(Yaml12Composer):
    """ruamel's composer, noting every node whose tag is written in the file.

    A node does not say whether its tag was written: ``!!str 5`` composes to the node ``'5'``
    does, and a lone ``!`` to the tag the value resolves to. Every written tag is refused (a tag
    would change what a value means, or be dropped without a word), so it is noted here, by
    the node's ``id``, valid while the nodes live.
    """

    def __init__(self, loader: Any = None):
        super().__init__(loader)
        self.written: dict[int, str] = {}

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.parser.peek_event()
        node = super().compose_node(parent, index)
        if not isinstance(event, AliasEvent) and event.ctag is not None:
            self.written[id(node)] = _as_written(event.ctag)
        return node


def _as_written(tag: Tag) -> str:
    """A tag as the file wrote it: ``!!str``, ``!custom``, ``!e!x``, ``!<tag:...>``, ``!``."""
    if tag.handle is not None:
        return f"{tag.handle}{tag.suffix}"
    return "!" if tag.suffix == "!" else f"!<{tag.suffix}>"


def _converted(nodes: list[Node], written: WrittenTags, display: str,
               scalars: SafeConstructor) -> Iterator[tuple[int, _Converter]]:
    """Each document that is not null, by its index in the file, converted."""
    for index, node in enumerate(nodes):
        if not _is_null(node) or id(node) in written:
            converter = _Converter(display, scalars, written)
            converter.data = converter.convert(node, ())
            yield index, converter


def _empty_file(display: str) -> Diagnostic:
    return Diagnostic(display, 0, 0, "", "empty file: expected at least one policy document")


class _Positions:
    """Where every value and key of one file's documents is, worked out on first use, one
    document at a time (a compile's warnings name a few documents of each file).

    The fast path read the file without positions and found nothing to report, so
    :func:`fastcompose.positions_all` reads them from libyaml's events of the document's own
    lines (from the line it starts on to the next one's: YAML reads each document of a stream
    alone, and a file with a directive never takes the fast path); where it declines, the whole
    file is read by the events, or composed again by the node path, which cannot fail and
    converts every document to the same data.
    """

    def __init__(self, text: str, lines: Sequence[int]):
        self.text = text
        self.lines = lines  # the line each document starts on (0-based)
        self.tables: dict[int, tuple[dict[FieldPath, Position], dict[FieldPath, Position]]] = {}
        self.split: list[str] | None = None  # the text's lines, once a document is read alone
        self.resolver: Any = None  # one YAML object's (making one globs for plugins)
        self.tags: dict[str, Any] = {}  # plain scalar -> its tag, for every document read alone

    def table(self, index: int, *, key: bool) -> Mapping[FieldPath, Position]:
        return _LazyTable(self, index, key)

    def of(self, index: int, *, key: bool) -> dict[FieldPath, Position]:
        if index not in self.tables:
            alone = self._document(index)
            if alone is not None:
                self.tables[index] = alone
            else:
                self.tables.update(self._file())
        return self.tables[index][key]

    def _document(self, index: int) -> tuple[dict[FieldPath, Position], dict[FieldPath, Position]] | None:
        """Document ``index`` read from its own lines, or None where that declines or the file
        is that one document. Lines are split at line feeds only where the file has no carriage
        return (YAML breaks lines at a lone one too)."""
        if len(self.lines) < 2 or "\r" in self.text or index >= len(self.lines):
            return None
        if self.split is None:
            self.split, self.resolver = self.text.split("\n"), YAML(typ="safe", pure=True).resolver
        lines = self.split
        end = self.lines[index + 1] if index + 1 < len(self.lines) else len(lines)
        own = "\n".join(lines[self.lines[index]:end]) + ("\n" if end < len(lines) else "")
        found = fastcompose.positions_all(own, self.resolver, self.lines[index], self.tags)
        return found[0] if found is not None and len(found) == 1 else None

    def _file(self) -> dict[int, tuple[dict[FieldPath, Position], dict[FieldPath, Position]]]:
        """Every document's positions, from the whole file."""
        yaml = YAML(typ="safe", pure=True)
        found = fastcompose.positions_all(self.text, yaml.resolver)
        if found is not None:  # straight from libyaml's events, ~8x faster
            return {index: tables for index, tables in enumerate(found) if tables is not None}
        nodes, written = _compose(self.text, yaml)
        return {index: (converter.values, converter.keys)
                for index, converter in _converted(nodes, written, "", yaml.constructor)}


class _LazyTable(Mapping[FieldPath, Position]):
    """One document's positions of values (or of keys), computed when first read."""

    def __init__(self, positions: _Positions, index: int, key: bool):
        self.positions, self.index, self.key = positions, index, key

    def _table(self) -> dict[FieldPath, Position]:
        return self.positions.of(self.index, key=self.key)

    def __getitem__(self, path: FieldPath) -> Position:
        return self._table()[path]

    def __iter__(self) -> Iterator[FieldPath]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


class _ScalarValues:
    """A plain scalar node -> its value as :class:`_Converter` makes it, or
    ``fastcompose.DECLINE`` where the converter reports it."""

    def __init__(self, scalars: SafeConstructor):
        self.scalars = scalars

    def __call__(self, node: ScalarNode) -> Any:
        try:
            return _scalar_value(node, self.scalars)
        except _Unreadable:
            return fastcompose.DECLINE


class _Unreadable(Exception):
    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.message, self.hint = message, hint


#: Strings, and dates kept as text: no policy field is a timestamp.
_TEXT_TAGS = ("tag:yaml.org,2002:str", "tag:yaml.org,2002:timestamp")
_INT_TAG = "tag:yaml.org,2002:int"


def _scalar_value(node: ScalarNode, scalars: SafeConstructor) -> Any:
    """The value of an untagged scalar node. Raises :class:`_Unreadable` for a plain value that
    YAML resolves to a type it then cannot construct (``0x_``, ``=``, ``<<`` outside a key) and
    for an integer of more than :data:`MAX_INT_DIGITS` digits."""
    tag = node.tag
    if tag in _TEXT_TAGS:
        return node.value
    if tag == _INT_TAG and len(node.value) > MAX_INT_DIGITS + 2:  # a sign, or 0x
        raise _too_many_digits()  # before Python converts it, in time quadratic in its length
    try:
        value = scalars.construct_object(node)
    except (ConstructorError, ValueError):
        shown = node.value if len(node.value) <= 40 else node.value[:37] + "..."
        raise _Unreadable(f"'{shown}' is not a valid YAML {str(tag).rsplit(':', 1)[-1]}",
                          "quote it to make it text") from None
    if type(value) is int and abs(value) >= _INT_LIMIT:
        raise _too_many_digits()
    return value


_INT_LIMIT = 10**MAX_INT_DIGITS


def _too_many_digits() -> _Unreadable:
    return _Unreadable(f"integer of more than {MAX_INT_DIGITS} digits",
                       "no policy field takes a number this large")


def _is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def _character_diagnostic(err: ReaderError, text: str, display: str) -> Diagnostic:
    """A character YAML forbids (NUL and other control characters), located by line and column."""
    at = min(max(err.position, 0), len(text))
    line = text.count("\n", 0, at) + 1
    column = at - (text.rfind("\n", 0, at) + 1) + 1
    code = err.character if isinstance(err.character, int) else ord(str(err.character)[:1] or "?")
    return Diagnostic(display, line, column, "",
                      f"invalid YAML: control character U+{code:04X} is not allowed",
                      hint="remove it; policy files are plain text")


def _version_diagnostic(err: _OtherVersion, text: str, display: str) -> Diagnostic:
    """The ``%YAML`` line before the document ``err`` refuses (its mark is the document's start)."""
    lines = text.split("\n")[:(err.problem_mark.line if err.problem_mark else 0) + 1]
    line = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].startswith("%YAML")), len(lines) - 1)
    return Diagnostic(display, line + 1, 1, "", f"{err.problem}: fleetc reads YAML 1.2 only (YAML 1.1 reads "
                                                "010 as 8 and yes as true)",
                      hint="remove the %YAML line (or write %YAML 1.2)")


def _syntax_diagnostic(err: MarkedYAMLError, display: str) -> Diagnostic:
    mark = err.problem_mark or err.context_mark
    line, column = (mark.line + 1, mark.column + 1) if mark else (0, 0)
    problem = err.problem or err.context or "invalid YAML"
    hint = ""
    if "\\t" in problem or "'\\t'" in str(err) or "\t" in problem:
        problem = "tab character: YAML indentation must use spaces"
        hint = "replace the tab with spaces"
    elif err.context and err.problem:
        problem = f"{err.problem} ({err.context})"
    return Diagnostic(display, line, column, "", f"invalid YAML: {problem}", hint)


class _Converter:
    """Turns a composed node graph into plain data, recording positions and problems."""

    def __init__(self, display: str, scalars: SafeConstructor, written: WrittenTags):
        self.display = display
        self.values: dict[FieldPath, Position] = {}
        self.keys: dict[FieldPath, Position] = {}
        self.diagnostics: list[Diagnostic] = []
        self.budget = MAX_NODES
        self.scalars = scalars
        self.written = written
        self.data: Any = None

    def convert(self, node: Node, path: FieldPath) -> Any:
        self.budget -= 1
        if self.budget < 0:
            if self.budget == -1:
                self._error(node, (), f"document expands to more than {MAX_NODES} values",
                            "YAML aliases are expanded; reduce their use")
            return None
        if len(path) > MAX_DEPTH:
            if not self.diagnostics:
                self._error(node, (), f"nesting is deeper than {MAX_DEPTH} levels")
            return None
        self.values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if self._tagged(node, path):
            return None
        if isinstance(node, MappingNode):
            return self._mapping(node, path)
        if isinstance(node, SequenceNode):
            return [self.convert(item, path + (i,)) for i, item in enumerate(node.value)]
        return self._scalar(cast(ScalarNode, node), path)  # ruamel's third and last kind of node

    def _tagged(self, node: Node, path: FieldPath) -> bool:
        """Report a tag written on ``node``: even a standard one (``!!str``, ``!!map``) changes
        what the value means or is read as if it were not there, and ``!!python/...`` or a
        ``!custom`` tag would be dropped without a word."""
        tag = self.written.get(id(node))
        if tag is not None:
            self._error(node, path, f"YAML tag '{tag}' is not allowed: policies are plain YAML",
                        "remove the tag; quote a value to make it text")
        return tag is not None

    def _mapping(self, node: MappingNode, path: FieldPath) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if self._tagged(key_node, path):
                continue
            if key_node.tag == "tag:yaml.org,2002:merge":
                self._error(key_node, path, "merge keys ('<<') are not supported",
                            "write the fields out in full")
                continue
            key = self._scalar(key_node, path) if isinstance(key_node, ScalarNode) else None
            if not isinstance(key, str):
                self._error(key_node, path, "mapping keys must be strings",
                            "quote the key")
                continue
            child = path + (key,)
            if key in result:
                first = self.keys[child]
                self._error(key_node, child, f"duplicate key '{key}' (first defined at line "
                            f"{first[0]})", "remove one of the two")
                continue
            self.keys[child] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            result[key] = self.convert(value_node, child)
        return result

    def _scalar(self, node: ScalarNode, path: FieldPath) -> Any:
        try:
            return _scalar_value(node, self.scalars)
        except _Unreadable as problem:
            self._error(node, path, problem.message, problem.hint)
            return None

    def _error(self, node: Node, path: FieldPath, message: str, hint: str = "") -> None:
        mark = node.start_mark
        self.diagnostics.append(
            Diagnostic(self.display, mark.line + 1, mark.column + 1, format_field(path),
                       message, hint)
        )
