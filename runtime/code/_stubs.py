"""Typed Python stubs of tools, for a program's author (the model) to read.

A program calls each tool as an `async` function with keyword arguments; the code tool's
description shows them the way a `.pyi` file would:

    class Flight(TypedDict):
        number: str
        seats: NotRequired[int]

    async def book(*, flight: Flight, when: str | None = None) -> dict[str, Any]:
        \"\"\"Book a flight.

        Args:
            flight: the flight to book.
        \"\"\"

| IR | stub |
|---|---|
| String / Integer / Number / Boolean / Null | `str` / `int` / `float` / `bool` / `None` |
| Array | `list[T]`, a tuple `tuple[A, B]` |
| Object with properties | a `TypedDict` (named after its type, or tool + parameter) |
| Object without properties | `dict[str, V]` |
| Union / Enum | `A | B` / `Literal[...]` |
| AnyValue, Ref | `Any`, the referred type's name |

A tool name that is no Python identifier (`get-weather`) is called by its identifier form
(`get_weather`); so is a parameter (`from` as `from_`, `to-addr` as `to_addr`): a program
writes what the stub shows, and its keywords are sent under the parameters' own names
(`Stubs.arguments`). A parameter whose name is an identifier keeps it, so a form never takes
the name of another parameter: the forms are made in the parameters' order, each taking a `_`
more while it is taken (`a-b` and `a_b`: `a_b` is `a_b`, `a-b` is `a_b_`). An object's keys
are data, not names: a TypedDict with a key that is no identifier is written in
TypedDict's functional form, with its keys as they are.
"""

from __future__ import annotations

import json
import keyword
import re
from collections.abc import Iterable

from ..schema import (
    AnyValue,
    Array,
    Boolean,
    Enum,
    Integer,
    Null,
    Number,
    Object,
    Ref,
    String,
    ToolDescriptor,
    TypeNode,
    Union,
)

__all__ = ["Stubs", "parameter_names", "python_name", "render_stubs"]

_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOC_WIDTH = 400  # characters of one parameter's description shown in a stub


def python_name(name: str) -> str:
    """The identifier a program calls the tool `name` by."""
    ident = _NOT_IDENTIFIER.sub("_", name)
    if not ident or ident[0].isdigit():
        ident = "_" + ident
    if keyword.iskeyword(ident) or keyword.issoftkeyword(ident):
        ident += "_"
    return ident


def _is_name(name: str) -> bool:
    """Whether `name` can be written as it is where Python wants a name (a soft keyword can)."""
    return _IDENTIFIER.fullmatch(name) is not None and not keyword.iskeyword(name)


def parameter_names(names: Iterable[str]) -> dict[str, str]:
    """The keyword a program passes for each of a tool's parameters: program name -> parameter
    name, for the parameters whose name is no Python name (`from`, `to-addr`) only.

    The others keep their names, which no form takes: the forms are made in order, each
    taking a `_` more while its name is taken.
    """
    names = list(names)
    taken = {n for n in names if _is_name(n)}
    renamed: dict[str, str] = {}
    for name in names:
        if name in taken:
            continue
        ident = _NOT_IDENTIFIER.sub("_", name)
        if not ident or ident[0].isdigit():
            ident = "_" + ident
        if keyword.iskeyword(ident):
            ident += "_"
        while ident in taken:
            ident += "_"
        taken.add(ident)
        renamed[ident] = name
    return renamed


class Stubs:
    """The stubs of a set of tools, and the program names they and their parameters go by."""

    __slots__ = ("arguments", "by_python_name", "text")

    def __init__(
        self, text: str, by_python_name: dict[str, str], arguments: dict[str, dict[str, str]] | None = None
    ) -> None:
        self.text = text
        self.by_python_name = by_python_name
        """Program name -> tool name."""
        self.arguments = arguments or {}
        """Tool name -> {program keyword -> parameter name}, for the tools with a parameter
        whose name is no Python name (`parameter_names`)."""


def render_stubs(descriptors: Iterable[ToolDescriptor]) -> Stubs:
    """Stubs of `descriptors`, in their order: the TypedDicts they use first, then each function."""
    writer = _Writer()
    functions: list[str] = []
    names: dict[str, str] = {}
    arguments: dict[str, dict[str, str]] = {}
    for d in descriptors:
        ident = python_name(d.name)
        while ident in names:  # two tool names with one identifier form (`a-b`, `a_b`)
            ident += "_"
        names[ident] = d.name
        renamed = parameter_names(p.name for p in d.parameters)
        if renamed:
            arguments[d.name] = renamed
        functions.append(writer.function(ident, d, {v: k for k, v in renamed.items()}))
    parts = [*writer.classes, *functions]
    return Stubs("\n\n".join(parts), names, arguments)


class _Writer:
    def __init__(self) -> None:
        self.classes: list[str] = []
        self._class_names: dict[str, TypeNode] = {}

    def function(self, ident: str, d: ToolDescriptor, renamed: dict[str, str]) -> str:
        """`async def ident(*, ...)`; `renamed`: parameter name -> the keyword a program passes."""
        context = _camel(ident)
        params: list[str] = []
        docs: list[str] = []
        required = [p for p in d.parameters if p.required and not p.has_default]
        optional = [p for p in d.parameters if not (p.required and not p.has_default)]
        for i, p in enumerate([*required, *optional]):
            annotation = self.annotation(p.type, d.definitions, context + _camel(p.name))
            name = renamed.get(p.name, p.name)
            if i >= len(required):
                default = repr(p.default) if p.has_default and _is_literal(p.default) else "..."
                params.append(f"{name}: {annotation} = {default}")
            else:
                params.append(f"{name}: {annotation}")
            text = p.description or getattr(p.type, "description", None)
            shown = _one_line(text) if text else ""
            if name != p.name:  # the model may meet the parameter's own name (in an error's text)
                shown = f"{shown} (the parameter {p.name!r})".lstrip()
            if shown:
                docs.append(f"    {name}: {shown}")
        out = "Any" if d.output is None else self.annotation(d.output, d.definitions, context + "Result")
        signature = (
            f"async def {ident}(*, {', '.join(params)}) -> {out}:"
            if params
            else (f"async def {ident}() -> {out}:")
        )
        body = [signature]
        doc = (d.description or "").strip().splitlines()
        if docs:
            doc += ["", "Args:", *docs] if doc else ["Args:", *docs]
        if d.notes:
            doc += ["", *(_one_line(n) for n in d.notes)]
        # nothing in it may end the docstring: a description's, a parameter's own name (`"""`)
        doc = [line.replace('"""', "'''") for line in doc]
        if len(doc) == 1:
            body.append(f'    """{doc[0]}"""')
        elif doc:
            body.append(f'    """{doc[0]}')
            body += [f"    {line}" if line.strip() else "" for line in doc[1:]]
            body.append('    """')
        else:
            body.append("    ...")
        return "\n".join(body)

    def annotation(self, node: TypeNode, definitions: dict[str, TypeNode], context: str) -> str:
        if isinstance(node, String):
            return "str"
        if isinstance(node, Integer):
            return "int"
        if isinstance(node, Number):
            return "float"
        if isinstance(node, Boolean):
            return "bool"
        if isinstance(node, Null):
            return "None"
        if isinstance(node, AnyValue):
            return "Any"
        if isinstance(node, Enum):
            return f"Literal[{', '.join(repr(v) for v in node.values)}]" if node.values else "Any"
        if isinstance(node, Array):
            if node.prefix_items is not None:
                inner = ", ".join(self.annotation(t, definitions, context) for t in node.prefix_items)
                return f"tuple[{inner}]" if inner else "tuple[()]"
            return f"list[{self.annotation(node.items, definitions, context + 'Item')}]"
        if isinstance(node, Union):
            options: list[str] = []
            for o in node.options:
                shown = self.annotation(o, definitions, context)
                if shown not in options:
                    options.append(shown)
            return " | ".join(options) if options else "Any"
        if isinstance(node, Ref):
            target = definitions.get(node.name)
            if isinstance(target, Object) and target.properties:
                return self._typed_dict(target, definitions, python_name(node.name))
            return "Any" if target is None else self.annotation(target, definitions, python_name(node.name))
        if isinstance(node, Object):
            if node.properties:
                name = python_name(node.name) if node.name else context
                return self._typed_dict(node, definitions, name)
            if isinstance(node.additional, bool):
                return "dict[str, Any]"
            return f"dict[str, {self.annotation(node.additional, definitions, context + 'Value')}]"
        return "Any"

    def _typed_dict(self, node: Object, definitions: dict[str, TypeNode], name: str) -> str:
        known = self._class_names.get(name)
        if known is not None:
            if known == node:
                return name
            n = 2
            while f"{name}{n}" in self._class_names and self._class_names[f"{name}{n}"] != node:
                n += 1
            name = f"{name}{n}"
            if name in self._class_names:
                return name
        self._class_names[name] = node  # before the fields: a recursive type refers to itself
        # Keys that are names: a class. Others (`from`, `to-addr`): the functional form, which
        # keeps them as they are (they are the dict's keys the tool reads, not names to rename).
        functional = not all(_is_name(p.name) for p in node.properties)
        lines = [f"{name} = TypedDict({_quoted(name)}, {{" if functional else f"class {name}(TypedDict):"]
        if node.description:
            about = _one_line(node.description)
            if functional:
                lines.insert(0, f"# {about}")
            else:
                lines.append(f'    """{about}"""')
        for p in node.properties:
            annotation = self.annotation(p.type, definitions, name + _camel(p.name))
            if not p.required:
                annotation = f"NotRequired[{annotation}]"
            comment = p.description or getattr(p.type, "description", None)
            suffix = f"  # {_one_line(comment)}" if comment else ""
            if functional:
                lines.append(f"    {_quoted(p.name)}: {annotation},{suffix}")
            else:
                lines.append(f"    {p.name}: {annotation}{suffix}")
        if functional:
            lines.append("})")
        self.classes.append("\n".join(lines))
        return name


def _quoted(key: str) -> str:
    """A dict key as a string literal in double quotes (as JSON writes it)."""
    return json.dumps(key, ensure_ascii=False)


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", name) if part)


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _DOC_WIDTH else flat[: _DOC_WIDTH - 3] + "..."


def _is_literal(value: object) -> bool:
    """A default shown as it is: a short JSON scalar."""
    if value is None or isinstance(value, bool | int | float):
        return True
    return isinstance(value, str) and len(value) <= 40
