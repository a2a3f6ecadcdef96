"""Tool search as every adapter offers it: which tools an agent is offered first, and what a search finds.

With `search=ToolSearch(...)`, an adapter that would offer more than `search.threshold` tools
(besides the always-loaded ones, `search.always`) offers the always-loaded tools and a search
tool instead; what the agent's searches find is loaded for its next turn, each framework its
own way (pydantic-ai: `defer_loading` and its `ToolSearch` capability with our search as the
strategy; openai-agents: the found tools' `is_enabled`; LangChain: the found tools of the
conversation's messages). The search is the runtime's own (`ToolRegistry.search` over the live
registry, the adapter's `only` / `exclude` respected), and its answer is the runtime's
`search_tools` answer: a `ToolSuccess` whose value is a `FoundTools` and whose text lists them.
"""

from __future__ import annotations

from collections.abc import Collection

import msgspec

from ..messages import FailureKind, ToolCall, ToolFailure, ToolResult, ToolSuccess, echo
from ..registry import ToolRegistry
from ..search import FoundTools, SearchArgs, ToolSearch, found_text
from ._caller import Caller, Selection

__all__ = ["Finder"]


class Finder:
    """A runtime's tool search for one adapter: its `ToolSearch`, its caller and its selection."""

    __slots__ = ("_findable", "caller", "search", "selection")

    def __init__(self, caller: Caller, search: ToolSearch, selection: Selection) -> None:
        self.caller = caller
        self.search = search
        self.selection = selection
        self._findable: tuple[ToolRegistry, ToolRegistry] | None = None  # (registry, what it finds there)

    def deferred(self, registry: ToolRegistry) -> list[str] | None:
        """The visible tools found only by searching, or None when there are no more of them
        than the threshold (then every tool is offered and there is no search tool)."""
        search = self.search
        names = [
            n
            for n in registry.names()
            if self.selection.shows(n) and n != search.name and not search.is_always(n)
        ]
        return names if len(names) > search.threshold else None

    def find(self, query: str, among: Collection[str] | None = None) -> FoundTools:
        """The best `search.limit` tools for `query` the agent may see (and are `among` these)."""
        findable = self._findable_in(self.caller.registry)
        if among is not None:
            findable = ToolRegistry._trusted(
                {t.name: t for t in findable if t.name in among}, within=findable
            )
        return FoundTools(query=query, tools=tuple(findable.search(query, limit=self.search.limit)))

    def _findable_in(self, registry: ToolRegistry) -> ToolRegistry:
        """The tools of `registry` a search may find (shown, neither always loaded nor the search
        tool), searched through `registry`'s own index: the index keeps them before it cuts its
        candidates, however many hidden tools outrank them, and ranks them as the caller (a
        scoped view) describes them (worked out once per registry)."""
        cached = self._findable
        if cached is not None and cached[0] is registry:
            return cached[1]
        search, selection = self.search, self.selection
        kept = {
            t.name: t
            for t in registry
            if selection.shows(t.name) and t.name != search.name and not search.is_always(t.name)
        }
        described = getattr(self.caller, "descriptors", None)  # a view's: what its model is told
        shown = None
        if described is not None:
            shown = {d.name: d for d in described() if d.name in kept and d is not kept[d.name].descriptor}
        findable = ToolRegistry._trusted(kept, within=registry, shown=shown)
        self._findable = (registry, findable)
        return findable

    def answer(self, call: ToolCall) -> ToolResult:
        """A call of the search tool, answered here: the tools found, or INVALID_ARGUMENTS."""
        arguments = call.arguments
        try:
            if isinstance(arguments, str):
                args = msgspec.json.decode(arguments or "{}", type=SearchArgs)
            else:
                args = msgspec.convert(arguments, SearchArgs)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            return ToolFailure(
                call_id=call.id,
                tool=echo(call.name),
                kind=FailureKind.INVALID_ARGUMENTS,
                message=f"{self.search.name} takes one argument, 'query' (a few words saying what the "
                f"tool you need does): {exc}",
            )
        found = self.find(args.query)
        return ToolSuccess(call_id=call.id, tool=call.name, content=found_text(found), value=found)
