"""The kubelet's ``$(VAR)`` expansion of a container's ``command``, ``args`` and ``env`` values.

Ported from kubernetes/kubernetes ``third_party/forked/golang/expansion/expand.go`` (as of
commit fde22c3f9aac, which reads a rune after ``$``; a Python ``str`` is code points, so
``text[0]`` is that rune): ``Expand``, ``tryReadVariableName``, ``syntaxWrap`` and
``MappingFuncFor``. What the kubelet feeds it
(kubernetes v1.31.0):

* ``pkg/kubelet/kubelet_pods.go`` ``makeEnvironmentVariables``: each ``env`` entry in order; a
  non-empty ``value`` is expanded with the variables defined *before* it (and the service
  variables), a ``valueFrom`` value is taken as it is, never expanded;
* ``pkg/kubelet/container/helpers.go`` ``ExpandContainerCommandAndArgs``: every ``command`` and
  ``args`` item is expanded with the container's final environment.

Three consequences the suite relies on: a reference ends at the first ``)``, so one nested in
another (``$(rclone cat x-$(APP_ID))``) is never filled in; ``$$`` is one literal ``$``, so
``$$(X)`` stays ``$(X)``; a reference to an unknown variable is left as written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

OPERATOR = "$"
OPENER = "("
CLOSER = ")"


def syntax_wrap(name: str) -> str:
    """``$(name)``: what an unknown reference expands to."""
    return OPERATOR + OPENER + name + CLOSER


def mapping_func_for(*contexts: Mapping[str, str]) -> Callable[[str], str]:
    """The first context that defines ``name`` gives its value, else the reference as written."""
    def mapping(name: str) -> str:
        for context in contexts:
            if name in context:
                return context[name]
        return syntax_wrap(name)
    return mapping


def expand(text: str, mapping: Callable[[str], str]) -> str:
    """``Expand``: every ``$(name)`` of ``text`` replaced by ``mapping(name)``, ``$$`` by ``$``."""
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    while cursor < len(text):
        if text[cursor] == OPERATOR and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            read, is_var, advance = _try_read_variable_name(text[cursor + 1:])
            out.append(mapping(read) if is_var else read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]


def _try_read_variable_name(text: str) -> tuple[str, bool, int]:
    """``tryReadVariableName``: (what was read, whether it names a variable, bytes consumed)
    of ``text``, which follows a ``$``."""
    if text[0] == OPERATOR:  # $$: an escaped operator, one '$'
        return text[0], False, 1
    if text[0] == OPENER:
        for i in range(1, len(text)):
            if text[i] == CLOSER:  # the first ')' ends the name, whatever it holds
                return text[1:i], True, i + 1
        return OPERATOR + OPENER, False, 1  # an incomplete reference: '$(' kept
    return OPERATOR + text[0], False, 1  # '$' not followed by '(' or '$': both kept


def references(text: str) -> list[str]:
    """The names ``text`` refers to, as the kubelet reads them."""
    found: list[str] = []

    def record(name: str) -> str:
        found.append(name)
        return ""
    expand(text, record)
    return found


def environment(entries: list[Mapping[str, object]], resolve: Callable[[Mapping[str, object]], str | None],
                services: Mapping[str, str] | None = None) -> dict[str, str]:
    """A container's environment as ``makeEnvironmentVariables`` builds it from its ``env``
    entries in order: ``value`` expanded with what is defined so far, ``valueFrom`` as
    ``resolve`` gives it (None: the kubelet could not resolve it, left out)."""
    env: dict[str, str] = {}
    for entry in entries:
        name = str(entry["name"])
        if "valueFrom" in entry:
            value = resolve(entry)
            if value is None:
                continue
        else:
            value = str(entry.get("value", ""))
            if value:
                value = expand(value, mapping_func_for(env, services or {}))
        env[name] = value
    return env


def command_line(container: Mapping[str, object], env: Mapping[str, str]) -> list[str]:
    """The container's ``command`` + ``args`` as the runtime receives them."""
    mapping = mapping_func_for(env)
    words = [*container.get("command", []), *container.get("args", [])]  # type: ignore[misc]
    return [expand(str(word), mapping) for word in words]
