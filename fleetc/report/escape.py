"""Text from file names, policies and scenarios made safe to show: in Markdown (a pull-request
comment, where a newline, a fence, ``<!--``, a backtick or an HTML tag in a name could hide or
forge what the reviewer reads), in HTML, and on a terminal (control characters).

Each value is shown, never dropped: what cannot be shown as it is is shown escaped
(``\\n``, ``\\x1b``)."""

from __future__ import annotations

import html
import re

from fleetc.errors import escape_controls

_BACKTICKS = re.compile(r"`+")


def plain(text: str) -> str:
    """``text`` on one line with every control character escaped (``\\n``, ``\\x1b``): for a
    terminal, and inside Markdown, where a newline would end a table row or a heading. The same
    escapes as every other line fleetc prints (:func:`fleetc.errors.escape_controls`)."""
    return escape_controls(text)


def code(text: str) -> str:
    """``text`` as one Markdown code span: on one line, delimited by a run of backticks longer
    than any in it (CommonMark), so nothing in it is Markdown or HTML (``<!--``, tags, links)."""
    text = plain(text)
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip(" ") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def cell(text: str) -> str:
    """:func:`code` for a table cell: a ``|`` would end the cell (GitHub's tables split cells on
    it even inside a code span), so it is escaped as the table syntax wants."""
    return code(text).replace("|", "\\|")


def words(text: str) -> str:
    """Plain prose from fleetc with names in it (a reason, a fix): escaped so that it is read as
    text, in a paragraph or a table cell."""
    text = html.escape(plain(text), quote=False)
    return re.sub(r"([\\`*_\[\]|#!~])", r"\\\1", text)


def attribute(text: str) -> str:
    """For inside an HTML element (a ``<summary>``)."""
    return html.escape(plain(text))


def fenced(text: str, language: str = "") -> str:
    """``text`` as a fenced code block that nothing in it can close: the fence is a run of
    backticks longer than any run at the start of one of its lines (CommonMark: a closing fence
    is at least as long as the opening one)."""
    longest = max((len(m.group(1)) for m in re.finditer(r"^ {0,3}(`{3,})", text, re.MULTILINE)), default=0)
    fence = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") or not text else text + "\n"
    return f"{fence}{language}\n{body}{fence}\n"
