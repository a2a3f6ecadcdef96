"""Per-request views: who a request's calls run for, and which tools it may see and call.

    with rt.scoped(principal="user-42", only=None, exclude=(), tags=None, prepare=None) as view:
        view.schemas("openai")             # only what this request may see
        await view.call_many(calls)        # a hidden tool is UNKNOWN_TOOL (suggestions: visible ones)

A view is a `Scope` (the rules) over a runtime's live registry; its visible tools are worked out
again whenever the registry changes. `prepare(view, descriptor) -> descriptor | None` hides a
tool (None) or re-describes it for this request; the tool still decodes its calls as it is.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable
from typing import Any

from ..registry import ToolRegistry
from ..schema import ToolDescriptor

__all__ = ["Prepare", "Scope"]

Prepare = Callable[[Any, ToolDescriptor], ToolDescriptor | None]
"""`prepare(view, descriptor) -> descriptor | None`: re-describe a tool for a request, or hide it."""


class Scope:
    """The rules of one view: its principal and what it may see.

    Args:
        principal: who its calls run for.
        only: tool names (or globs) it may see; None: all.
        exclude: tool names (or globs) it may not see.
        tags: it sees only tools with one of these tags (the `tags` tool option); None: any.
        prepare: re-describes or hides a tool per request (see the module docstring).
        parent: the scope of the view this one narrows (`view.scoped(...)`): this one sees only
            what its parent sees, as its parent describes it, and runs for its parent's
            principal unless it names its own.
        batch: its calls count as one batch, however each is made (`Budget(per_batch=N)`
            bounds them together, as one `call_many`'s: code mode's program, one model turn).
    """

    __slots__ = (
        "_descriptors",
        "_registry",
        "_version",
        "batch",
        "exclude",
        "gate",
        "only",
        "parent",
        "plain",
        "prepare",
        "principal",
        "tags",
        "view",
    )

    def __init__(
        self,
        principal: str | None = None,
        *,
        only: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
        tags: Iterable[str] | None = None,
        prepare: Prepare | None = None,
        parent: Scope | None = None,
        batch: bool = False,
    ) -> None:
        if principal is not None and not isinstance(principal, str):
            raise TypeError(f"a principal is a string id, not {type(principal).__name__}")
        if principal is None and parent is not None:
            principal = parent.principal
        self.parent = parent
        self.principal: str | None = principal
        self.only = None if only is None else tuple(only)
        self.exclude = tuple(exclude)
        self.tags = None if tags is None else frozenset(tags)
        self.prepare = prepare
        self.plain = only is None and not self.exclude and tags is None and prepare is None
        """It narrows nothing (a principal alone): it sees what its parent (or the runtime) sees."""
        self.view: Any = None  # what `prepare` is given
        self.batch = batch
        self.gate: Any = None
        """Its batch's place in `Budget(per_batch=N)` (a `Gate`, made by the entry on its first call)."""
        self._version = -1
        self._registry = ToolRegistry()
        self._descriptors: dict[str, ToolDescriptor] = {}

    def _admits(self, name: str, tool: Any) -> bool:
        if self.only is not None and not any(fnmatch.fnmatchcase(name, p) for p in self.only):
            return False
        if any(fnmatch.fnmatchcase(name, p) for p in self.exclude):
            return False
        return not (self.tags is not None and not (self.tags & tool.options.tags))

    def visible(self, registry: ToolRegistry, version: int) -> ToolRegistry:
        """The tools this scope sees in `registry` (worked out once per registry version)."""
        if self.plain:
            return self.parent.visible(registry, version) if self.parent is not None else registry
        if version != self._version:
            kept: dict[str, Any] = {}
            descriptors: dict[str, ToolDescriptor] = {}
            parent = self.parent
            seen = parent.visible(registry, version) if parent is not None else registry
            for tool in seen:
                if not self._admits(tool.name, tool):
                    continue
                descriptor = tool.descriptor if parent is None else parent._described(tool)
                if self.prepare is not None:
                    shown = self.prepare(self.view, descriptor)
                    if shown is None:
                        continue
                    descriptor = shown
                kept[tool.name] = tool
                descriptors[tool.name] = descriptor
            self._registry = ToolRegistry._trusted(kept, within=registry)  # searches its index
            self._descriptors = descriptors
            self._version = version
        return self._registry

    def _described(self, tool: Any) -> ToolDescriptor:
        """A tool this scope sees, as it describes it (its `visible` is worked out already)."""
        if self.plain:
            return tool.descriptor if self.parent is None else self.parent._described(tool)
        return self._descriptors[tool.name]

    def descriptors(self, registry: ToolRegistry, version: int) -> list[ToolDescriptor]:
        if self.plain:
            if self.parent is not None:
                return self.parent.descriptors(registry, version)
            return registry.descriptors()
        self.visible(registry, version)
        return list(self._descriptors.values())
