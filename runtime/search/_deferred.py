"""Deferred loading: the model is sent a few tools and a way to find the rest, per provider.

`registry.schemas(provider, search=ToolSearch(...))` renders the tools this way:

| provider | `execution="client"` (the default: our search answers) | `execution="server"` (the provider's search) |
|---|---|---|
| `anthropic` | `search_tools` as a tool, the rest `defer_loading: true`; its results go back as `tool_reference` blocks (`providers.anthropic.result_blocks`) | Anthropic's `tool_search_tool_bm25` (or `_regex`), the rest `defer_loading: true` |
| `openai-responses` | `{"type": "tool_search", "execution": "client"}`; the model's `tool_search_call` is a call of `search_tools` (`providers.openai.calls_from_response`), its result a `tool_search_output` item holding the found tools (`result_items`) | `{"type": "tool_search"}`, the rest `defer_loading: true`, grouped in `namespaces` where given |
| every other | a `search_tools` function; the tools its results loaded (`loaded=`) follow the always-loaded ones in the next request's list | (the same) |

The always-loaded tools (`always`, names or globs) are the caller's choice. What is sent is
the same list, byte for byte, from turn to turn while nothing new is loaded, so the
provider's prompt cache holds: Anthropic and OpenAI load found tools into the conversation,
not into `tools`; the local form appends them at the end, in the order they were loaded.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import msgspec

from ..messages import ToolResult, ToolSuccess
from ..schema import String, ToolDescriptor, ToolParameter, render_tool
from ..tools import CallContext, ToolBase, fail

__all__ = [
    "SEARCH_TOOL",
    "FoundTools",
    "Namespace",
    "SearchActivity",
    "SearchArgs",
    "SearchRequest",
    "SearchTools",
    "ToolSearch",
    "deferred_schemas",
    "found_text",
    "found_tools",
    "tool_search_output",
]

SEARCH_TOOL = "search_tools"
"""The default name of the search tool the model calls."""

_DESCRIPTION = (
    "Find tools by what they do. Only a few tools are loaded at first; when none of them fits the "
    "task, search with a few words saying what you need to do (for example 'weather forecast', "
    "'create github issue'). The tools found are loaded, and you can call them next."
)
_QUERY = "Words saying what the tool you need does."


class Namespace(msgspec.Struct, frozen=True, kw_only=True):
    """A group of deferred tools shown to OpenAI as one `namespace` (name and description only,
    until its tools are loaded). OpenAI advises fewer than ten tools a namespace.

    Attributes:
        name: the namespace's name (`crm`).
        description: what its tools are for, for the model.
        tools: names or globs (`crm_*`) of its tools.
    """

    name: str
    description: str
    tools: tuple[str, ...]

    def __post_init__(self) -> None:
        tools = (self.tools,) if isinstance(self.tools, str) else tuple(self.tools)
        msgspec.structs.force_setattr(self, "tools", tools)


class ToolSearch(msgspec.Struct, frozen=True, kw_only=True):
    """How the tools of a request are deferred and found (`registry.schemas(..., search=...)`).

    Attributes:
        always: names or globs of the tools sent whole on every request.
        execution: "client": our search answers (on every provider alike); "server": the
            provider's own search where it has one (Anthropic, OpenAI Responses).
        server_search: which Anthropic server-side search, "bm25" or "regex".
        namespaces: groups of deferred tools for OpenAI Responses (server execution).
        threshold: defer only when more than this many tools would be deferred; below it
            every tool is sent whole and there is no search tool.
        limit: the most tools one search loads.
        name: the search tool's name (also what `search_tools` calls are recognised by).
        description: what the model is told the search tool does.
    """

    always: tuple[str, ...] = ()
    execution: Literal["client", "server"] = "client"
    server_search: Literal["bm25", "regex"] = "bm25"
    namespaces: tuple[Namespace, ...] = ()
    threshold: int = 0
    limit: int = 5
    name: str = SEARCH_TOOL
    description: str = _DESCRIPTION

    def __post_init__(self) -> None:
        # Tuples whatever was given (the value is a cache key); always="get_time" is one name.
        always = (self.always,) if isinstance(self.always, str) else tuple(self.always)
        msgspec.structs.force_setattr(self, "always", always)
        msgspec.structs.force_setattr(self, "namespaces", tuple(self.namespaces))
        if self.execution not in ("client", "server"):
            raise ValueError(f"execution is 'client' or 'server', not {self.execution!r}")
        if self.limit < 1:
            raise ValueError(f"limit must be at least 1, not {self.limit}")

    def is_always(self, name: str) -> bool:
        """True for a tool sent whole on every request."""
        return any(name == p or fnmatch.fnmatchcase(name, p) for p in self.always)

    def tool(self) -> SearchTools:
        """The search tool to register beside the others: the model's `search_tools` calls run
        through the runtime like any call, and search what the caller's view holds."""
        return SearchTools(self)

    def descriptor(self) -> ToolDescriptor:
        """What the model is told of the search tool."""
        query = ToolParameter(name="query", description=_QUERY, type=String(), required=True)
        return ToolDescriptor(name=self.name, description=self.description, parameters=(query,))

    def loaded(self, results: Iterable[ToolResult]) -> list[str]:
        """The names of the tools the search results among `results` loaded, in order.

        Add them to what `schemas(..., loaded=)` is given on the next turn (the local form;
        Anthropic and OpenAI need no list: they load found tools into the conversation).
        """
        names: list[str] = []
        for result in results:
            names.extend(d.name for d in found_tools(result))
        return names


class SearchArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The search tool's arguments."""

    query: str


class FoundTools(msgspec.Struct, frozen=True, kw_only=True):
    """What one search found: `ToolSuccess.value` of a `search_tools` call.

    The provider adapters send it back in the provider's own form (Anthropic `tool_reference`
    blocks, an OpenAI `tool_search_output` item); elsewhere the model reads the text.
    """

    query: str
    tools: tuple[ToolDescriptor, ...] = ()


class SearchTools(ToolBase[SearchArgs, FoundTools]):
    """The tool the model calls to find deferred tools (`ToolSearch.tool()`).

    It searches the runtime its call came through, as the caller sees it (a scoped view:
    only the tools that view holds), and leaves out the always-loaded tools and itself.
    """

    name = SEARCH_TOOL
    description = _DESCRIPTION

    def __init__(self, search: ToolSearch | None = None) -> None:
        self.search = search = search if search is not None else ToolSearch()
        self.name = search.name
        self.description = search.description
        self.descriptor = search.descriptor()

    async def execute(self, args: SearchArgs, ctx: CallContext) -> FoundTools:
        runtime = ctx.runtime
        if runtime is None:
            fail("tool search needs a runtime to search: call it through one")
        search = self.search
        registry = runtime.registry
        skip = sum(1 for name in registry.names() if search.is_always(name)) + 1
        finder = getattr(runtime, "search", None)  # the view's own search, where the runtime has one
        if finder is None:
            finder = registry.search
        found = [
            d
            for d in finder(args.query, limit=search.limit + skip)
            if d.name != search.name and not search.is_always(d.name)
        ]
        return FoundTools(query=args.query, tools=tuple(found[: search.limit]))

    def result_to_text(self, result: FoundTools) -> str:
        return found_text(result)


def found_text(found: FoundTools) -> str:
    """What the model reads of a search: the tools found, a line each (name and the first line
    of its description), or that none matched."""
    if not found.tools:
        return f"No tool matches {found.query[:200]!r}; search again with other words."
    count = f"{len(found.tools)} tools" if len(found.tools) > 1 else "1 tool"
    lines = [f"Found {count}; they are loaded, call them by name:"]
    for d in found.tools:
        first = d.description.strip().split("\n", 1)[0][:200]
        lines.append(f"- {d.name}: {first}" if first else f"- {d.name}")
    return "\n".join(lines)


class SearchRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A search the model asked for, read back from a provider's reply.

    Attributes:
        id: the block's or item's id (the call id for a client-executed search).
        query: what the model searched for (a regex for Anthropic's regex search).
        execution: "server" (the provider ran it) or "client" (ours to answer).
    """

    id: str
    query: str
    execution: Literal["client", "server"]


class SearchActivity(msgspec.Struct, frozen=True, kw_only=True):
    """The tool searches of a turn or a conversation, in any provider's form
    (`providers.anthropic.tool_searches`, `providers.openai.tool_searches`).

    Attributes:
        requests: the searches asked for, in order.
        loaded: the names of the tools they loaded, in order, each once.
    """

    requests: tuple[SearchRequest, ...] = ()
    loaded: tuple[str, ...] = ()


def found_tools(result: ToolResult) -> tuple[ToolDescriptor, ...]:
    """The tools a search result found; () for any other result."""
    if isinstance(result, ToolSuccess) and isinstance(result.value, FoundTools):
        return result.value.tools
    return ()


def deferred_schemas(
    descriptors: Sequence[ToolDescriptor],
    provider: str,
    search: ToolSearch,
    *,
    strict: bool = False,
    loaded: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """The tool list for `provider` with every tool but the always-loaded ones deferred.

    Raises:
        ValueError: an unknown provider.
    """
    always: list[ToolDescriptor] = []
    deferred: list[ToolDescriptor] = []
    for d in descriptors:
        if d.name == search.name:
            continue  # rendered once, as the search tool
        (always if search.is_always(d.name) else deferred).append(d)
    if len(deferred) <= search.threshold:
        return [render_tool(d, provider, strict=strict) for d in (*always, *deferred)]
    head = [render_tool(d, provider, strict=strict) for d in always]
    if provider == "anthropic":
        if search.execution == "server":
            kind = search.server_search
            tool: dict[str, Any] = {
                "type": f"tool_search_tool_{kind}_20251119",
                "name": f"tool_search_tool_{kind}",
            }
        else:
            tool = render_tool(search.descriptor(), provider, strict=strict)
        rest = [{**render_tool(d, provider, strict=strict), "defer_loading": True} for d in deferred]
        return [tool, *head, *rest]
    if provider == "openai-responses":
        if search.execution == "client":
            params = render_tool(search.descriptor(), provider, strict=strict)["parameters"]
            client = {"type": "tool_search", "execution": "client", "description": search.description}
            return [{**client, "parameters": params}, *head]
        return [{"type": "tool_search"}, *head, *_namespaced(deferred, search.namespaces, strict)]
    by_name = {d.name: d for d in deferred}
    shown = [by_name[n] for n in dict.fromkeys(loaded) if n in by_name]
    tool = render_tool(search.descriptor(), provider, strict=strict)
    return [tool, *head, *(render_tool(d, provider, strict=strict) for d in shown)]


def _namespaced(
    deferred: Sequence[ToolDescriptor], namespaces: Sequence[Namespace], strict: bool
) -> list[dict[str, Any]]:
    groups: dict[str, list[dict[str, Any]]] = {ns.name: [] for ns in namespaces}
    out: list[dict[str, Any]] = []
    for d in deferred:
        rendered = {**render_tool(d, "openai-responses", strict=strict), "defer_loading": True}
        home = next(
            (ns.name for ns in namespaces if any(fnmatch.fnmatchcase(d.name, p) for p in ns.tools)), None
        )
        if home is None:
            out.append(rendered)
        else:
            groups[home].append(rendered)
    spaces = [
        {"type": "namespace", "name": ns.name, "description": ns.description, "tools": groups[ns.name]}
        for ns in namespaces
        if groups[ns.name]
    ]
    return [*spaces, *out]


def tool_search_output(
    call_id: str, tools: Iterable[ToolDescriptor], *, strict: bool = False
) -> dict[str, Any]:
    """An OpenAI Responses `tool_search_output` input item loading `tools` (client execution)."""
    loaded = [{**render_tool(d, "openai-responses", strict=strict), "defer_loading": True} for d in tools]
    return {
        "type": "tool_search_output",
        "call_id": call_id,
        "execution": "client",
        "status": "completed",
        "tools": loaded,
    }
