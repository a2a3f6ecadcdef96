"""`ToolRegistry`: the immutable set of tools an agent may call, by name."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from .exceptions import ToolDefinitionError
from .messages import ECHO_LIMIT, echo
from .schema import ToolDescriptor, render_tool
from .search import ToolIndex, ToolSearch, deferred_schemas
from .tools import FunctionTool, ToolBase, ToolSet, tool
from .tools.lowlevel import check_tool_name

__all__ = ["ToolLike", "ToolRegistry", "duplicate_message"]

AnyTool = ToolBase[Any, Any]
ToolLike = ToolBase[Any, Any] | ToolSet | Callable[..., Any]
T = TypeVar("T", bound=AnyTool)


class ToolRegistry:
    """An immutable, ordered set of tools with unique names.

    Accepts tools, `ToolSet` instances (their `.tools()`) and plain functions (made tools
    with `@tool` defaults). Operations that change the set return a new registry.

    Raises:
        ValueError: two tools share a name ("Tool 'x' is already defined"), or a name
            does not fit every provider.
    """

    __slots__ = ("_by_name", "_index", "_index_version", "_schemas", "_shown", "_within")

    def __init__(self, tools: Iterable[ToolLike] = ()) -> None:
        by_name: dict[str, AnyTool] = {}
        for t in _expand(tools):
            if t.name in by_name:
                raise ValueError(duplicate_message(t.name, same=by_name[t.name] is t))
            by_name[t.name] = t
        self._by_name = by_name
        self._schemas: dict[Any, list[dict[str, Any]]] = {}
        self._index: ToolIndex | None = None
        self._index_version = -1
        self._within: ToolRegistry | None = None
        self._shown: Mapping[str, ToolDescriptor] | None = None

    @classmethod
    def _trusted(
        cls,
        by_name: dict[str, AnyTool],
        *,
        previous: ToolRegistry | None = None,
        changed: Iterable[str] = (),
        within: ToolRegistry | None = None,
        shown: Mapping[str, ToolDescriptor] | None = None,
    ) -> ToolRegistry:
        """A registry of `by_name` as it is (names already checked): the internal port of the
        engine, which publishes one after every change.

        Args:
            previous: the registry this one follows; its search index, if it has one, is
                updated for the `changed` names and handed on (the previous registry builds
                another if it is searched again), so a live registry's index is never rebuilt.
            changed: the names added, replaced or removed since `previous`.
            within: a registry this one is a subset of (a view's tools): its search is
                `within`'s index, keeping the tools this one holds.
            shown: with `within`, what a view shows of some of them (its `prepare`): its search
                ranks them by these descriptors, not their own, and returns these.
        """
        registry = cls.__new__(cls)
        registry._by_name = by_name
        registry._schemas = {}
        registry._index = None
        registry._index_version = -1
        if within is not None and within._within is not None:  # a subset of a subset: of the base
            if within._shown:
                shown = {**within._shown, **(shown or {})}
            within = within._within
        registry._within = within
        registry._shown = shown if within is not None and shown else None
        if previous is not None:
            index = previous._live_index()
            if index is not None:
                names = list(dict.fromkeys(changed))
                index.update(
                    added=[by_name[n].descriptor for n in names if n in by_name],
                    removed=[n for n in names if n not in by_name],
                )
                registry._index = index
                registry._index_version = index.version
        return registry

    # -- lookup ----------------------------------------------------------------------

    def get(self, name: str) -> AnyTool:
        """The tool called `name`.

        Raises:
            KeyError: no such tool; the message names the closest matches.
        """
        found = self._by_name.get(name)
        if found is None:
            raise KeyError(self.missing_message(name))
        return found

    def get_or_none(self, name: str) -> AnyTool | None:
        """The tool called `name`, or None."""
        return self._by_name.get(name)

    def get_by_type(self, cls: type[T]) -> T:
        """The first tool that is an instance of `cls`.

        Raises:
            KeyError: no tool is.
        """
        for t in self._by_name.values():
            if isinstance(t, cls):
                return t
        raise KeyError(f"no tool of type {cls.__qualname__}")

    def closest(self, name: str, n: int = 3) -> list[str]:
        """Names of up to `n` tools whose names are close to `name`."""
        return difflib.get_close_matches(name, list(self._by_name), n=n, cutoff=0.6)

    def missing_message(self, name: str) -> str:
        """What to tell a model that asked for a tool this registry does not have."""
        # No tool name is over 64 characters: a longer one has no close match worth the search.
        close = self.closest(name) if len(name) <= 64 else []
        shown_name = repr(name) if len(name) <= 2 * ECHO_LIMIT else repr(echo(name))
        if close:
            return f"no tool named {shown_name}; did you mean {' or '.join(repr(c) for c in close)}?"
        names = list(self._by_name)
        if not names:
            return f"no tool named {shown_name}; no tools are available"
        shown = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
        return f"no tool named {shown_name}; available tools: {shown}"

    def __contains__(self, item: object) -> bool:
        if isinstance(item, str):
            return item in self._by_name
        if isinstance(item, ToolBase):
            return self._by_name.get(item.name) is item
        return False

    def __len__(self) -> int:
        return len(self._by_name)

    def __iter__(self) -> Iterator[AnyTool]:
        return iter(self._by_name.values())

    def names(self) -> list[str]:
        """The tools' names, in insertion order."""
        return list(self._by_name)

    def __repr__(self) -> str:
        return f"ToolRegistry([{', '.join(self._by_name)}])"

    # -- combining -------------------------------------------------------------------

    def __or__(self, other: ToolRegistry) -> ToolRegistry:
        """Merge; on a name clash the left registry's tool wins, silently (Koog's `plus`)."""
        if not isinstance(other, ToolRegistry):
            return NotImplemented
        merged = dict(self._by_name)
        added = [name for name in other._by_name if name not in merged]
        for name in added:
            merged[name] = other._by_name[name]
        return ToolRegistry._trusted(merged, previous=self, changed=added)

    def with_tools(self, *tools: ToolLike) -> ToolRegistry:
        """A new registry with `tools` added; names already present are skipped."""
        merged = dict(self._by_name)
        added: list[str] = []
        for t in _expand(tools):
            if t.name not in merged:
                merged[t.name] = t
                added.append(t.name)
        return ToolRegistry._trusted(merged, previous=self, changed=added)

    def without(self, *names: str) -> ToolRegistry:
        """A new registry without the tools called `names` (absent names are ignored)."""
        drop = set(names)
        kept = {n: t for n, t in self._by_name.items() if n not in drop}
        return ToolRegistry._trusted(kept, previous=self, changed=[n for n in names if n in self._by_name])

    # -- describing ------------------------------------------------------------------

    def descriptors(self) -> list[ToolDescriptor]:
        """Every tool's descriptor, in order."""
        return [t.descriptor for t in self._by_name.values()]

    def schemas(
        self,
        provider: str = "jsonschema",
        *,
        strict: bool = False,
        search: ToolSearch | None = None,
        loaded: Iterable[str] = (),
    ) -> list[dict[str, Any]]:
        """The tool definitions to send to `provider`, in order (cached; do not mutate).

        Providers: "openai", "openai-responses", "anthropic", "gemini", "mcp", "jsonschema".

        Args:
            search: defer loading: the tools `search.always` names are sent whole; the others
                are found by searching, in the provider's own form (see `ToolSearch`).
            loaded: with `search`, for the providers searched through a local `search_tools`
                tool: the tools its results loaded so far, in the order they were loaded
                (`ToolSearch.loaded(results)`); they follow the always-loaded ones.

        The list is the same object, byte for byte the same JSON, for the same arguments,
        so a provider's prompt cache holds from turn to turn while nothing new is loaded.

        Raises:
            ValueError: an unknown provider.
        """
        if search is not None:
            names = tuple(dict.fromkeys(loaded))
            key: Any = (provider, strict, search, names)
            cached = self._schemas.get(key)
            if cached is None:
                descriptors = [t.descriptor for t in self._by_name.values()]
                cached = deferred_schemas(descriptors, provider, search, strict=strict, loaded=names)
                if len(self._schemas) > 256:  # one entry per (provider, loaded) seen: bounded
                    self._schemas.clear()
                self._schemas[key] = cached
            return cached
        key = (provider, strict)
        cached = self._schemas.get(key)
        if cached is None:
            cached = [render_tool(t.descriptor, provider, strict=strict) for t in self._by_name.values()]
            self._schemas[key] = cached
        return cached

    # -- searching -------------------------------------------------------------------

    def search(self, query: str, *, limit: int = 5) -> list[ToolDescriptor]:
        """The tools that best match `query`, best first, at most `limit`.

        Matches words of each tool's name (split on `_`, `.`, `-` and case), description,
        parameter names and descriptions, and enum values; any text is a query (empty, huge,
        any script: an empty list at worst, in milliseconds). The index is built on the first
        search and, in a running runtime, kept up to date as tools come and go.
        """
        if self._within is not None:
            base, mine = self._within, self._by_name
            return base._search(
                query,
                limit,
                lambda name, _: name in mine and mine[name] is base._by_name.get(name),
                self._shown,
            )
        return self._search(query, limit, None)

    def _search(
        self, query: str, limit: int, admit: Any, shown: Mapping[str, ToolDescriptor] | None = None
    ) -> list[ToolDescriptor]:
        index = self._live_index()
        if index is None:
            index = ToolIndex(t.descriptor for t in self._by_name.values())
            self._index, self._index_version = index, index.version
        return index.search(query, limit=limit, admit=admit, shown=shown)

    def _live_index(self) -> ToolIndex | None:
        """This registry's index, if it has one that no later registry has moved on."""
        index = self._index
        if index is not None and index.version == self._index_version:
            return index
        return None


def duplicate_message(name: str, *, same: bool = False, running: bool = False) -> str:
    """What to say when a second tool is called `name`; it starts "Tool 'x' is already defined".

    Args:
        same: the very same tool was given twice.
        running: the name is taken in a running runtime (`rt.register`), where `replace=True`
            swaps the old tool for the new one.
    """
    head = f"Tool {name!r} is already defined"
    if same:
        return f"{head}: the same tool is listed twice"
    rename = "give the new one another name (@tool(name=...), or a tool class's `name` attribute)"
    if running:
        return f"{head}; pass replace=True to rt.register to replace it, or {rename}"
    return f"{head}; {rename}"


def _expand(items: Iterable[ToolLike]) -> Iterator[AnyTool]:
    for item in items:
        if isinstance(item, ToolBase):
            if isinstance(item, FunctionTool) and item.is_unbound_method:
                raise ToolDefinitionError(
                    f"tool {item.name!r} is a method reached through its class; register an "
                    "instance's tools instead: MyToolSet().tools()"
                )
            check_tool_name(item.name)
            yield item
        elif isinstance(item, ToolSet):
            yield from item.tools()
        elif isinstance(item, type) and issubclass(item, ToolBase):
            raise ToolDefinitionError(
                f"{item.__qualname__} is a tool class; register an instance: {item.__qualname__}()"
            )
        elif callable(item):
            yield tool(item)
        else:
            raise ToolDefinitionError(f"not a tool: {item!r}")
