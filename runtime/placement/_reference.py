"""A tool by reference: `module:qualname`, which another process imports to get the same tool.

A worker process (or a Ray replica) never receives the tool object: it imports the module
and walks the qualified name. So only tools that live at a module's top level (or in a
class there) can be placed out of process; a closure, a lambda, a method bound to one
instance, or a tool defined in an interactive session's `__main__` cannot, and is refused
when the runtime opens, with the reason.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from typing import Any, NoReturn

from ..exceptions import ToolDefinitionError
from ..tools import FunctionTool, ToolBase

__all__ = ["main_path", "reference", "resolve"]

_MAIN_ALIAS = "__mp_main__"  # a script's __main__, imported again by path in the worker


def reference(tool: ToolBase[Any, Any], where: str) -> str:
    """The `module:qualname` another process imports to get `tool`.

    Raises:
        ToolDefinitionError: `tool` cannot be imported by reference; says why and what to do.
    """
    target: Any = type(tool)
    if isinstance(tool, FunctionTool):
        if tool.is_unbound_method or (getattr(tool, "_bound", False) and tool._bind == "instance"):
            _refuse(tool, where, "it is a method bound to one instance, which another process cannot rebuild")
        target = tool.fn
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        _refuse(tool, where, f"{target!r} has no module and qualified name")
    if "<lambda>" in qualname:
        _refuse(tool, where, "it is a lambda; define it with `def` at a module's top level")
    if "<locals>" in qualname:
        _refuse(tool, where, f"it is defined inside a function ({qualname}); move it to a module's top level")
    if module == "__main__":
        main = sys.modules.get("__main__")
        if getattr(main, "__file__", None) is None:
            _refuse(
                tool,
                where,
                "it is defined in an interactive session's __main__, which another process cannot "
                "import; put it in a module",
            )
    try:
        found = _walk(_module(module), qualname)
    except Exception as exc:
        _refuse(tool, where, f"{module}:{qualname} does not import ({type(exc).__name__}: {exc})")
    if not _same(found, tool):
        _refuse(tool, where, f"{module}:{qualname} names {found!r}, not this tool")
    if not isinstance(tool, FunctionTool):
        try:
            inspect.signature(type(tool)).bind()
        except (TypeError, ValueError):
            _refuse(
                tool,
                where,
                f"each worker builds its own {type(tool).__qualname__}() with no arguments, and its "
                "constructor needs some; give them defaults, or acquire things in setup()",
            )
    return f"{module}:{qualname}"


def main_path() -> str | None:
    """The file of this process's `__main__` when it is a script (a worker imports it by path)."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    return path if isinstance(path, str) else None


def resolve(ref: str, name: str, main: str | None = None) -> ToolBase[Any, Any]:
    """Import the tool that `ref` names (in a worker); `name` is the tool's name in the runtime.

    Args:
        main: the parent's `__main__` script, for a tool defined there (imported as
            `__mp_main__`, so its `if __name__ == "__main__":` block does not run).
    """
    module, _, qualname = ref.partition(":")
    if module == "__main__" and main is not None:
        found = _walk(_script(main), qualname)
    else:
        found = _walk(_module(module), qualname)
    if isinstance(found, ToolBase):
        tool = found
    elif isinstance(found, type) and issubclass(found, ToolBase):
        tool = found()
    elif callable(found):
        tool = FunctionTool(found, name=name)
    else:
        raise ToolDefinitionError(f"tool {name!r}: {ref} is {found!r}, not a tool")
    if isinstance(tool, FunctionTool) and tool.is_unbound_method:
        raise ToolDefinitionError(f"tool {name!r}: {ref} is a method that needs an instance")
    return tool


def _module(name: str) -> Any:
    return importlib.import_module(name)


def _script(path: str) -> Any:
    loaded = sys.modules.get(_MAIN_ALIAS)
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location(_MAIN_ALIAS, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import the script {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MAIN_ALIAS] = module
    spec.loader.exec_module(module)
    return module


def _walk(obj: Any, qualname: str) -> Any:
    for part in qualname.split("."):
        obj = inspect.getattr_static(obj, part) if isinstance(obj, type) else getattr(obj, part)
        if isinstance(obj, staticmethod | classmethod):
            obj = obj.__func__
    return obj


def _same(found: Any, tool: ToolBase[Any, Any]) -> bool:
    if found is tool:
        return True
    if isinstance(tool, FunctionTool):
        fn = tool.fn
        fn = getattr(fn, "__func__", fn)  # a classmethod's bound function
        return found is fn or (isinstance(found, FunctionTool) and found.fn is fn)
    return found is type(tool)


def _refuse(tool: ToolBase[Any, Any], where: str, why: str) -> NoReturn:
    raise ToolDefinitionError(f"tool {tool.name!r} cannot run {where}: {why}")
