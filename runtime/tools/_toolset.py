"""`ToolSet`: a class whose `@tool` methods become tools of one instance."""

from __future__ import annotations

import inspect

from ..exceptions import ToolDefinitionError
from ._base import ToolBase
from ._function import FunctionTool

__all__ = ["ToolSet"]


class ToolSet:
    """Group tools that share state: subclass, decorate methods with `@tool`, call `.tools()`.

    A `@tool` declared on a base class or a Protocol method is inherited: an override that
    is not decorated itself is still a tool, with the declaration's name and options, and
    the declaration's docstring and annotations where the override has none.
    """

    def tools(self) -> list[ToolBase[object, object]]:
        """This instance's tools, in the order their declarations are found (subclass first)."""
        cls = type(self)
        declared: dict[str, FunctionTool] = {}
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
