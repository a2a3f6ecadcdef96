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

_OVERFETCH = 200  # the most results asked of the index to make up for the tools a selection hides


class Finder:
    """A runtime's tool search for one adapter: its `ToolSearch`, its caller and its selection."""

    __slots__ = ("caller", "search", "selection")

    def __init__(self, caller: Caller, search: ToolSearch, selection: Selection) -> None:
        self.caller = caller
        self.search = search
        self.selection = selection

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
        search = self.search
        registry = self.caller.registry
        hidden = 0 if self.selection.unrestricted else len(registry) - len(self.selection.visible(registry))
        skip = sum(1 for n in registry.names() if search.is_always(n)) + 1
        found = []
        for d in registry.search(query, limit=min(search.limit + skip + hidden, _OVERFETCH)):
            if d.name == search.name or search.is_always(d.name) or not self.selection.shows(d.name):
                continue
            if among is None or d.name in among:
                found.append(d)
        return FoundTools(query=query, tools=tuple(found[: search.limit]))

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
