"""ToolRegistry: every operation of docs/ARCHITECTURE.md section 3.3."""

from typing import Any

import msgspec
import pytest

from runtime import (
    TERMINATE_TOOL,
    Tool,
    ToolBase,
    ToolDefinitionError,
    ToolDescriptor,
    ToolRegistry,
    ToolSet,
    tool,
)


@tool
def search(query: str) -> str:
    """Search."""
    return query


@tool
def fetch(url: str) -> str:
    """Fetch."""
    return url


@tool
def summarize(text: str) -> str:
    """Summarize."""
    return text


class EchoArgs(msgspec.Struct):
    text: str


class Echo(Tool[EchoArgs, str]):
    """Echo the text."""

    async def execute(self, args: EchoArgs) -> str:
        return args.text


class Shout(Tool[EchoArgs, str]):
    async def execute(self, args: EchoArgs) -> str:
        return args.text.upper()


class Named(ToolBase[Any, Any], dynamic=True):
    """A tool whose name is set per instance (as MCP tools are); bypasses class-time checks."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.descriptor = ToolDescriptor(name=name)


def test_tools_keep_insertion_order() -> None:
    registry = ToolRegistry([summarize, search, fetch])
    assert [t.name for t in registry] == ["summarize", "search", "fetch"]
    assert registry.names() == ["summarize", "search", "fetch"]
    assert list(registry) == [summarize, search, fetch]


def test_len() -> None:
    assert len(ToolRegistry()) == 0
    assert len(ToolRegistry([search, fetch])) == 2


def test_duplicate_name_is_a_value_error() -> None:
    @tool(name="search")
    def other(q: str) -> str:
        return q

    with pytest.raises(ValueError, match=r"^Tool 'search' is already defined; give the new one another name"):
        ToolRegistry([search, other])


def test_the_same_tool_twice_is_also_a_duplicate() -> None:
    with pytest.raises(ValueError, match="Tool 'fetch' is already defined"):
        ToolRegistry([fetch, fetch])


def test_get_returns_the_tool() -> None:
    registry = ToolRegistry([search, fetch])
    assert registry.get("fetch") is fetch


def test_get_unknown_name_is_a_key_error_naming_close_matches() -> None:
    registry = ToolRegistry([search, fetch, summarize])
    with pytest.raises(KeyError, match=r"no tool named 'serach'; did you mean 'search'( or '\w+')*\?"):
        registry.get("serach")
    with pytest.raises(KeyError, match=r"no tool named 'fetsh'; did you mean 'fetch'\?"):
        registry.get("fetsh")


def test_get_unknown_name_without_close_matches_lists_the_tools() -> None:
    registry = ToolRegistry([search, fetch])
    with pytest.raises(KeyError, match=r"no tool named 'xyz'; available tools: search, fetch"):
        registry.get("xyz")
    with pytest.raises(KeyError, match=r"no tool named 'xyz'; no tools are available"):
        ToolRegistry().get("xyz")


def test_get_or_none() -> None:
    registry = ToolRegistry([search])
    assert registry.get_or_none("search") is search
    assert registry.get_or_none("nope") is None


def test_get_by_type_returns_the_first_instance() -> None:
    echo, shout = Echo(), Shout()
    registry = ToolRegistry([search, echo, shout])
    assert registry.get_by_type(Echo) is echo
    assert registry.get_by_type(Shout) is shout
    assert registry.get_by_type(Tool) is echo


def test_get_by_type_without_a_match_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="no tool of type Shout"):
        ToolRegistry([search, Echo()]).get_by_type(Shout)


def test_contains_by_name_and_by_tool() -> None:
    echo = Echo()
    registry = ToolRegistry([search, echo])
    assert "search" in registry
    assert "echo" in registry
    assert "fetch" not in registry
    assert search in registry
    assert echo in registry
    assert fetch not in registry
    assert Echo() not in registry  # same name, another tool
    assert 3 not in registry


def test_or_merges_and_the_left_wins_silently() -> None:
    @tool(name="search")
    def other_search(q: str) -> str:
        return q

    left = ToolRegistry([search, fetch])
    right = ToolRegistry([other_search, summarize])
    merged = left | right
    assert merged.names() == ["search", "fetch", "summarize"]
    assert merged.get("search") is search
    assert left.names() == ["search", "fetch"]
    assert right.names() == ["search", "summarize"]


def test_or_with_something_else_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        ToolRegistry([search]) | [fetch]  # type: ignore[operator]


def test_with_tools_adds_and_skips_existing_names() -> None:
    @tool(name="search")
    def other_search(q: str) -> str:
        return q

    registry = ToolRegistry([search])
    extended = registry.with_tools(fetch, other_search, summarize)
    assert extended.names() == ["search", "fetch", "summarize"]
    assert extended.get("search") is search
    assert registry.names() == ["search"]


def test_with_tools_checks_what_it_adds() -> None:
    with pytest.raises(ToolDefinitionError, match="not a tool: 3"):
        ToolRegistry().with_tools(3)  # type: ignore[arg-type]


def test_without_drops_names() -> None:
    registry = ToolRegistry([search, fetch, summarize])
    assert registry.without("fetch", "absent").names() == ["search", "summarize"]
    assert registry.names() == ["search", "fetch", "summarize"]


def test_descriptors_in_order() -> None:
    descriptors = ToolRegistry([fetch, search]).descriptors()
    assert descriptors == [fetch.descriptor, search.descriptor]
    assert [d.name for d in descriptors] == ["fetch", "search"]


def test_schemas_default_to_plain_json_schema() -> None:
    schemas = ToolRegistry([search, Echo()]).schemas()
    assert schemas == [
        {
            "name": "search",
            "description": "Search.",
            "parameters": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
                "additionalProperties": False,
            },
        },
        {
            "name": "echo",
            "description": "Echo the text.",
            "parameters": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
                "additionalProperties": False,
            },
        },
    ]
    assert ToolRegistry([search]).schemas("jsonschema") == schemas[:1]


def test_schemas_are_cached() -> None:
    registry = ToolRegistry([search, fetch])
    first = registry.schemas("jsonschema")
    assert registry.schemas("jsonschema") is first
    assert registry.schemas("jsonschema", strict=True) is registry.schemas("jsonschema", strict=True)


def test_derived_registries_do_not_share_the_cache() -> None:
    registry = ToolRegistry([search])
    first = registry.schemas()
    extended = registry.with_tools(fetch)
    assert [s["name"] for s in extended.schemas()] == ["search", "fetch"]
    assert registry.schemas() is first
    assert [s["name"] for s in (registry | ToolRegistry([summarize])).schemas()] == ["search", "summarize"]


def test_unknown_provider_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"unknown provider 'no-such-provider'; known: .*jsonschema"):
        ToolRegistry([search]).schemas("no-such-provider")


@pytest.mark.parametrize("name", ["a", "A-b_9", "x" * 64, "get_weather", "tool-2"])
def test_names_that_fit_every_provider_are_accepted(name: str) -> None:
    assert ToolRegistry([Named(name)]).names() == [name]


@pytest.mark.parametrize(
    "name",
    ["", "x" * 65, "has space", "dotted.name", "slash/name", "ünïcode", "name\n", "colon:name"],
)
def test_names_that_do_not_fit_every_provider_are_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="is not accepted by every provider: use 1-64 characters"):
        ToolRegistry([Named(name)])


def test_terminate_name_is_reserved() -> None:
    assert TERMINATE_TOOL == "__terminate__"
    with pytest.raises(ValueError, match="'__terminate__' is reserved"):
        ToolRegistry([Named(TERMINATE_TOOL)])
    with pytest.raises(ValueError, match="'__terminate__' is reserved"):

        @tool(name=TERMINATE_TOOL)
        def finish(answer: str) -> str:
            return answer


def test_too_long_name_is_rejected_at_decoration() -> None:
    with pytest.raises(ValueError, match="is not accepted by every provider"):

        @tool(name="x" * 65)
        def t(a: int) -> int:
            return a


def test_plain_functions_are_made_tools() -> None:
    def multiply(a: int, b: int) -> int:
        """Multiply two numbers."""
        return a * b

    registry = ToolRegistry([multiply])
    made = registry.get("multiply")
    assert made.descriptor.description == "Multiply two numbers."
    assert made.dispatch(made.decode_args('{"a": 6, "b": 7}'), None) == 42


def test_toolset_instances_are_expanded() -> None:
    class Math(ToolSet):
        @tool
        def double(self, n: int) -> int:
            return 2 * n

        @tool
        def halve(self, n: int) -> float:
            return n / 2

    registry = ToolRegistry([search, Math()])
    assert registry.names() == ["search", "double", "halve"]
    assert registry.with_tools(Math()).names() == ["search", "double", "halve"]


def test_tool_class_instead_of_instance_is_rejected() -> None:
    with pytest.raises(ToolDefinitionError, match=r"Echo is a tool class; register an instance: Echo\(\)"):
        ToolRegistry([Echo])


def test_non_callable_is_rejected() -> None:
    with pytest.raises(ToolDefinitionError, match="not a tool: 'search'"):
        ToolRegistry(["search"])  # type: ignore[list-item]


def test_registry_is_immutable() -> None:
    registry = ToolRegistry([search])
    with pytest.raises(AttributeError):
        registry.extra = 1  # type: ignore[attr-defined]
    assert not hasattr(registry, "add")
    assert not hasattr(registry, "append")


def test_repr_lists_the_names() -> None:
    assert repr(ToolRegistry([search, fetch])) == "ToolRegistry([search, fetch])"
