"""`ToolSet`: a class whose `@tool` methods become tools of one instance; `tools_of`: any object's methods.

Neither writes anything into the instance: it stays as it was (copyable, picklable), and its
tools are bound to it.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any, Unpack

from ..exceptions import ToolDefinitionError
from ._base import ToolBase
from ._function import FunctionTool
from ._options import ToolOptionsKw

__all__ = ["ToolSet", "tools_of"]


class ToolSet:
    """Group tools that share state: subclass, decorate methods with `@tool`, call `.tools()`.

    A `@tool` declared on a base class or a Protocol method is inherited: an override that
    is not decorated itself is still a tool, with the declaration's name and options, and
    the declaration's docstring and annotations where the override has none.
    """

    def tools(self) -> list[ToolBase[object, object]]:
        """This instance's tools, in the order their declarations are found (subclass first)."""
        cls = type(self)
        declared: dict[str, FunctionTool[..., Any]] = {}
        for klass in cls.__mro__:
            for attr, value in vars(klass).items():
                if isinstance(value, staticmethod | classmethod) and isinstance(value.__func__, FunctionTool):
                    raise ToolDefinitionError(
                        f"{klass.__qualname__}.{attr}: put @tool above @{type(value).__name__}, not below it"
                    )
                if isinstance(value, FunctionTool) and attr not in declared:
                    declared[attr] = value
        found: list[ToolBase[object, object]] = []
        for attr, declaration in declared.items():
            impl = inspect.getattr_static(cls, attr)
            if isinstance(impl, FunctionTool):
                found.append(impl.__get__(self, cls))
            elif isinstance(impl, staticmethod | classmethod) or inspect.isfunction(impl):
                found.append(declaration.declared_override(impl).__get__(self, cls))
        return found


def tools_of(
    obj: object,
    *,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
    **options: Unpack[ToolOptionsKw],
) -> list[ToolBase[Any, Any]]:
    """The public methods of an existing object as tools bound to it; the object is left untouched.

    ```python
    fs = FileSystem(root="/srv")            # any class: nothing to inherit, nothing to decorate
    registry = ToolRegistry(tools_of(fs, exclude=["close"]))
    ```

    Every method whose name does not start with `_` becomes a tool named after it (plain, static
    and class methods, in the order the class defines them, subclass first); a method already
    decorated with `@tool` keeps its own name and options. `options` (the keywords of `@tool`)
    apply to the others. The object gains no attribute: it can still be copied and pickled.

    Args:
        include: only these method names (in this order).
        exclude: method names to leave out.

    Raises:
        ToolDefinitionError: a method cannot be a tool (a parameter without a type annotation,
            `*args`); the message names it, so it can be fixed or excluded.
    """
    cls = type(obj)
    found: dict[str, Any] = {}
    for klass in cls.__mro__:
        if klass is object or klass is ToolSet:
            continue
        for attr, value in vars(klass).items():
            if attr.startswith("_") or attr in found:
                continue
            if isinstance(value, FunctionTool | staticmethod | classmethod) or inspect.isfunction(value):
                found[attr] = value
    names = list(found) if include is None else list(include)
    skip = set(exclude)
    made: list[ToolBase[Any, Any]] = []
    for attr in names:
        if attr in skip:
            continue
        if attr not in found:
            raise ToolDefinitionError(f"{cls.__qualname__} has no public method {attr!r} to make a tool of")
        value = inspect.getattr_static(obj, attr)
        try:
            if isinstance(value, FunctionTool):
                made.append(value.__get__(obj, cls))
            elif isinstance(value, staticmethod):
                made.append(FunctionTool(value, **options))
            else:
                made.append(FunctionTool(getattr(obj, attr), **options))  # bound to obj (or its class)
        except ToolDefinitionError as exc:
            raise ToolDefinitionError(
                f"{cls.__qualname__}.{attr} cannot be a tool: {exc} (or leave it out: exclude=[{attr!r}])"
            ) from exc
    return made
