"""OpenAI strict mode's "not sent", read back at every depth: nulls that stand for an omitted key.

Strict mode makes every property of every object required, so a property the model may leave
out is rendered required and nullable (`runtime.schema._openai`), and the model sends `null`
for it. Where the property's own type has no null, that null can only mean "not sent": it is
dropped from the decoded JSON, and the property's default applies (or a key without one stays
absent). Where the type admits null, a null is a value and stays.

`OmittedNulls` walks decoded JSON beside the IR of the arguments: objects by their properties,
arrays by their items (or positions), references through the descriptor's definitions, and a
union by the one option the value fits (its JSON kind, its keys, a tag's value). It is made once
per tool, and only for tools that have such a property below the top level (the top level is
the decoder's own work: a loosened field).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._ir import (
    AnyValue,
    Array,
    Enum,
    Object,
    Ref,
    ToolDescriptor,
    ToolParameter,
    TypeNode,
    Union,
    is_nullable,
)

__all__ = ["OmittedNulls", "omitted_nulls"]

_MAX_DEPTH = 64  # the arguments' own depth limit; a recursive type is followed no further


class OmittedNulls:
    """Drops the nulls that stand for an omitted key from decoded arguments (see the module).

    Call it with the decoded arguments (a dict); it returns them without those nulls, copying
    only the containers it changes (a caller's mapping is never modified).
    """

    __slots__ = ("_definitions", "_root")

    def __init__(self, descriptor: ToolDescriptor) -> None:
        self._root = Object(properties=descriptor.parameters, additional=descriptor.additional)
        self._definitions = descriptor.definitions

    def __call__(self, value: Any) -> Any:
        return self._walk(self._root, value, 0)

    def _resolve(self, node: TypeNode) -> TypeNode:
        for _ in range(16):  # a chain of references, never a cycle
            if not isinstance(node, Ref):
                return node
            target = self._definitions.get(node.name)
            if target is None:
                return AnyValue()
            node = target
        return AnyValue()

    def _walk(self, node: TypeNode, value: Any, depth: int) -> Any:
        if depth > _MAX_DEPTH or value is None:
            return value
        node = self._resolve(node)
        kind = type(value)
        if isinstance(node, Union):
            option = self._option(node, value)
            if option is None:
                return value
            node = option
        if kind is dict and isinstance(node, Object):
            return self._object(node, value, depth)
        if kind is list and isinstance(node, Array):
            return self._array(node, value, depth)
        return value

    def _object(self, node: Object, value: dict[str, Any], depth: int) -> dict[str, Any]:
        properties = {p.name: p for p in node.properties}
        extra = node.additional if not isinstance(node.additional, bool) else None
        out: dict[str, Any] | None = None
        for key, item in value.items():
            param = properties.get(key)
            if item is None:
                if param is not None and omittable(param):
                    if out is None:
                        out = {k: v for k, v in value.items() if k != key}
                    else:
                        del out[key]
                continue
            kind = type(item)
            if kind is not dict and kind is not list:
                continue
            sub = param.type if param is not None else extra
            if sub is None:
                continue
            walked = self._walk(sub, item, depth + 1)
            if walked is not item:
                if out is None:
                    out = dict(value)
                out[key] = walked
        return value if out is None else out

    def _array(self, node: Array, value: list[Any], depth: int) -> list[Any]:
        positions = node.prefix_items
        out: list[Any] | None = None
        for i, item in enumerate(value):
            kind = type(item)
            if kind is not dict and kind is not list:
                continue
            sub = positions[i] if positions is not None and i < len(positions) else node.items
            walked = self._walk(sub, item, depth + 1)
            if walked is not item:
                if out is None:
                    out = list(value)
                out[i] = walked
        return value if out is None else out

    def _option(self, node: Union, value: Any) -> TypeNode | None:
        """The one option of a union that `value` (a dict or a list) can be, or None."""
        options = [self._resolve(o) for o in node.options]
        if type(value) is list:
            arrays = [o for o in options if isinstance(o, Array)]
            return arrays[0] if len(arrays) == 1 else None
        if type(value) is not dict:
            return None
        objects = [o for o in options if isinstance(o, Object)]
        if len(objects) <= 1:
            return objects[0] if objects else None
        fitting = [o for o in objects if _fits(o, value)]
        return fitting[0] if len(fitting) == 1 else None


def omittable(param: ToolParameter) -> bool:
    """A property whose null means "not sent": the model may omit it, and null is not its value."""
    return not param.required and not is_nullable(param.type)


def _fits(node: Object, value: dict[str, Any]) -> bool:
    """Whether `value` can be an instance of `node`: its keys are known (for a closed object), its
    required keys are there, and a tag (a property of one value) has that value."""
    names = {p.name: p for p in node.properties}
    if node.additional is False and any(key not in names for key in value):
        return False
    for name, param in names.items():
        if name not in value:
            if param.required:
                return False
            continue
        kind = param.type
        if isinstance(kind, Enum) and len(kind.values) == 1 and value[name] != kind.values[0]:
            return False
    return True


def omitted_nulls(descriptor: ToolDescriptor) -> OmittedNulls | None:
    """The walker for `descriptor`'s arguments, or None when no property below the top level
    may be omitted (nothing to drop there)."""
    seen: set[str] = set()

    def deep(node: TypeNode, depth: int) -> bool:
        if depth > _MAX_DEPTH:
            return False
        if isinstance(node, Ref):
            if node.name in seen:
                return False
            seen.add(node.name)
            target = descriptor.definitions.get(node.name)
            return target is not None and deep(target, depth + 1)
        if isinstance(node, Object):
            if any(omittable(p) for p in node.properties):
                return True
            extra = node.additional
            return any(deep(p.type, depth + 1) for p in node.properties) or (
                not isinstance(extra, bool) and deep(extra, depth + 1)
            )
        if isinstance(node, Array):
            return deep(node.items, depth + 1) or any(deep(p, depth + 1) for p in node.prefix_items or ())
        if isinstance(node, Union):
            return any(deep(o, depth + 1) for o in node.options)
        return False

    extra = descriptor.additional
    if any(deep(p.type, 0) for p in descriptor.parameters) or (
        not isinstance(extra, bool) and deep(extra, 0)
    ):
        return OmittedNulls(descriptor)
    return None


def has_null(value: Any) -> bool:
    """A null anywhere inside decoded JSON (its containers looked through)."""
    items = value.values() if isinstance(value, Mapping) else value if isinstance(value, list) else ()
    for item in items:
        if item is None or ((type(item) is dict or type(item) is list) and has_null(item)):
            return True
    return False
