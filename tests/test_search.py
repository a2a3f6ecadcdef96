"""Tool search (issue 44): `ToolRegistry.search`, deferred loading per provider, the search tool,
the providers' tool-search blocks read back, and agent loops over each SDK's own transport."""

from __future__ import annotations

import json
from typing import Any

import httpx
import msgspec
import pytest
from anthropic.types import ToolParam, ToolResultBlockParam, ToolSearchToolBm25_20251119Param
from openai.types.chat import ChatCompletionToolParam
from openai.types.responses import FunctionToolParam, NamespaceToolParam, ToolSearchToolParam
from openai.types.responses.response_tool_search_output_item_param_param import (
    ResponseToolSearchOutputItemParamParam,
)

from runtime import ToolCall, ToolRegistry, open_runtime, tool
from runtime.providers import anthropic as anthropic_adapter
from runtime.providers import openai as openai_adapter
from runtime.schema import Enum, String, ToolDescriptor, ToolParameter
from runtime.search import FoundTools, Namespace, ToolIndex, ToolSearch
from tests.test_dialects import validate_typed_dict


@tool
def get_current_weather(city: str, unit: str = "celsius") -> str:
    """The weather now in a city: temperature, wind and rain."""
    return f"sunny in {city}"


@tool
def create_github_issue(repository: str, title: str, body: str = "") -> str:
    """Open an issue in a GitHub repository."""
    return "issue 7"


@tool
def convertCurrency(amount: float, source: str, target: str) -> float:
    """Exchange an amount of money from one currency into another."""
    return amount * 2


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def book_flight(origin: str, destination: str) -> str:
    """Reserve a seat on a plane between two airports."""
    return "booked"


TOOLS = [get_current_weather, create_github_issue, convertCurrency, add, book_flight]


def names(found: list[ToolDescriptor]) -> list[str]:
    return [d.name for d in found]


# -- the search itself ----------------------------------------------------------------


def test_search_finds_a_tool_by_its_description_best_first() -> None:
    registry = ToolRegistry(TOOLS)
    assert names(registry.search("what's the weather like in Paris?", limit=2))[0] == "get_current_weather"
    assert names(registry.search("please open an issue on github"))[0] == "create_github_issue"


def test_search_splits_names_on_case_underscores_dots_and_dashes() -> None:
    index = ToolIndex([ToolDescriptor(name="ChaDri.change_drink"), ToolDescriptor(name="list-files")])
    index.add(ToolDescriptor(name="getHTTPResponse"))
    assert names(index.search("change my drink")) == ["ChaDri.change_drink"]
    assert names(index.search("files")) == ["list-files"]
    assert names(index.search("http response")) == ["getHTTPResponse"]
    assert names(ToolRegistry(TOOLS).search("convert currency"))[0] == "convertCurrency"


def test_search_reads_parameter_names_descriptions_and_enum_values() -> None:
    unit = ToolParameter(name="unit", type=Enum(values=("kelvin", "rankine")))
    depth = ToolParameter(name="depth", description="How deep the ocean trench is", type=String())
    index = ToolIndex(
        [
            ToolDescriptor(name="a", description="Does one thing.", parameters=(unit,)),
            ToolDescriptor(name="b", description="Does another thing.", parameters=(depth,)),
            ToolDescriptor(name="c", description="Something else."),
        ]
    )
    assert names(index.search("rankine")) == ["a"]
    assert names(index.search("ocean trench")) == ["b"]
    assert names(index.search("depth")) == ["b"]


def test_search_finds_words_of_unspaced_scripts_and_folds_accents() -> None:
    index = ToolIndex(
        [
            ToolDescriptor(name="weather", description="查询城市的天气状况"),
            ToolDescriptor(name="appliance", description="거실 에어컨을 켭니다"),
            ToolDescriptor(name="service", description="บริการรีดผ้า ironing service"),
            ToolDescriptor(name="play_artist", description="Play music by an artist such as Käärijä"),
            ToolDescriptor(name="other", description="Unrelated tool."),
        ]
    )
    assert names(index.search("我想知道上海目前的天气状况"))[0] == "weather"
    assert names(index.search("에어컨 실행"))[0] == "appliance"
    assert names(index.search("ช่วยหาบริการรีดผ้า"))[0] == "service"
    assert names(index.search("music by Kaarija"))[0] == "play_artist"


def test_any_query_gets_a_list() -> None:
    registry = ToolRegistry(TOOLS)
    assert registry.search("") == []
    assert registry.search("   \n\t ") == []
    assert registry.search("!!! ??? ...") == []
    assert isinstance(registry.search("weather " * 200_000), list)  # 1.6 MB: read up to its bound
    assert registry.search("weather", limit=0) == []
    assert registry.search("the of and it") == [] or all(
        isinstance(d, ToolDescriptor) for d in registry.search("the")
    )
    # A query of stop words only is searched with them.
    index = ToolIndex([ToolDescriptor(name="x", description="what it is"), ToolDescriptor(name="y")])
    assert names(index.search("what is it")) == ["x"]


@pytest.mark.parametrize(
    "text",
    [
        "weather " * 130_000,  # ASCII
        "我想知道上海目前的天气状况" * 80_000,  # Chinese
        "날씨가 어때요 " * 150_000,  # Korean
        "ช่วยหาบริการรีดผ้า" * 60_000,  # Thai
        "weather 天气 날씨 สภาพอากาศ " * 45_000,  # all of them
        "a" * 1_000_000,  # one word
        "\n" * 1_000_000,  # no word at all
    ],
    ids=["ascii", "chinese", "korean", "thai", "mixed", "one-word", "newlines"],
)
def test_a_megabyte_query_in_any_script_is_read_only_to_its_bound(text: str) -> None:
    from runtime.search._index import QUERY_CHARS, QUERY_TERMS, Query

    assert len(text) >= 1_000_000
    index = ToolIndex(
        [
            *(t.descriptor for t in TOOLS),
            ToolDescriptor(name="weather_cn", description="查询城市的天气状况 날씨"),
        ]
    )
    found = index.search(text)
    assert isinstance(found, list)
    assert found == index.search(text[:QUERY_CHARS])  # what 8 KB of it costs and finds
    assert len(Query.parse(text).weights) <= 2 * QUERY_TERMS  # its terms and their phrases


@pytest.mark.parametrize(
    "text",
    [
        "\ud800weather",  # a lone surrogate
        "\x00weather\x00\x1b[31m",  # NUL and control characters
        "🌧️ weather ☔",  # emoji
        "מזג האוויר weather",  # right to left
        "\u0301\u0301\u0301",  # combining marks alone
        "天气 날씨 สภาพอากาศ",  # scripts the catalog does not use
        "!!! ??? ...",
    ],
    ids=["surrogate", "control", "emoji", "rtl", "marks", "other-scripts", "punctuation"],
)
def test_any_text_is_a_query_and_gets_a_list(text: str) -> None:
    found = ToolRegistry(TOOLS).search(text)
    assert isinstance(found, list)
    if "weather" in text:
        assert names(found)[0] == "get_current_weather"


@pytest.mark.parametrize("word", ["a" * 8000, "A" * 8000, "7" * 8000, "é" * 8000, "Ab" * 4000])
def test_no_term_is_longer_than_a_word_can_be_in_any_script(word: str) -> None:
    from runtime.search._text import WORD_CHARS, terms

    found = terms(word)
    assert found
    assert max(map(len, found)) <= WORD_CHARS


def test_the_stems_kept_are_bounded_whatever_the_queries() -> None:
    from runtime.search import _text

    registry = ToolRegistry(TOOLS)
    for i in range(3 * _text._STEMMED_WORDS // 64):  # 64 new words a query, each kept at most once
        registry.search(" ".join(f"w{i}x{j}ord" for j in range(64)))
        registry.search(f"{i}" + "x" * 5000)
    assert len(_text._STEMS) <= _text._STEMMED_WORDS
    assert max(map(len, _text._STEMS)) <= _text._STEMMED_CHARS


def test_a_query_that_is_not_text_gets_an_empty_list() -> None:
    index = ToolIndex(t.descriptor for t in TOOLS)
    assert index.search(None) == []  # type: ignore[arg-type]
    assert index.search(b"weather") == []  # type: ignore[arg-type]


def test_a_huge_parameter_description_or_enum_neither_dominates_nor_disappears() -> None:
    flood = "weather money flight issue " * 50_000
    huge_text = ToolDescriptor(
        name="describe_everything",
        description="Files a report.",
        parameters=(ToolParameter(name="topic", description=flood, type=String()),),
    )
    huge_enum = ToolDescriptor(
        name="pick_anything",
        description="Picks one.",
        parameters=(ToolParameter(name="what", type=Enum(values=tuple(flood.split()[:100_000]))),),
    )
    index = ToolIndex([*(t.descriptor for t in TOOLS), huge_text, huge_enum])
    assert names(index.search("weather in Rome", limit=1)) == ["get_current_weather"]
    assert names(index.search("book a flight", limit=1)) == ["book_flight"]
    assert names(index.search("file a report", limit=1)) == ["describe_everything"]
    assert names(index.search("pick one", limit=1)) == ["pick_anything"]


def test_a_huge_or_empty_description_neither_dominates_nor_disappears() -> None:
    huge = ToolDescriptor(name="everything", description="weather money flight issue " * 50_000)
    empty = ToolDescriptor(name="get_stock_price")
    index = ToolIndex([*(t.descriptor for t in TOOLS), huge, empty])
    assert names(index.search("weather in Rome", limit=1)) == ["get_current_weather"]
    assert names(index.search("book a flight", limit=1)) == ["book_flight"]
    assert "everything" in names(index.search("weather money flight issue", limit=2))
    assert names(index.search("stock price", limit=1)) == ["get_stock_price"]


def test_the_index_follows_tools_added_replaced_and_removed() -> None:
    index = ToolIndex(t.descriptor for t in TOOLS)
    index.add(ToolDescriptor(name="get_stock_price", description="The last price of a share."))
    assert names(index.search("share price", limit=1)) == ["get_stock_price"]
    index.add(ToolDescriptor(name="get_stock_price", description="Tomorrow's tide tables."))
    assert "get_stock_price" not in names(index.search("share"))
    assert names(index.search("tide", limit=1)) == ["get_stock_price"]
    assert index.remove("get_stock_price")
    assert index.search("tide") == []
    fresh = ToolIndex(t.descriptor for t in TOOLS).statistics()
    for _ in range(5):  # churn: removed entries are gone at once, the results stay right
        for t in TOOLS:
            index.remove(t.name)
            index.add(t.descriptor)
            index.add(t.descriptor)  # replaced in place
    assert names(index.search("weather", limit=1)) == ["get_current_weather"]
    assert index.statistics() == fresh  # nothing left behind by the churn


def test_a_derived_registry_takes_the_index_over_and_the_old_one_stays_right() -> None:
    first = ToolRegistry(TOOLS)
    first.search("weather")  # builds the index
    index = first._index
    second = first.without("get_current_weather").with_tools(add)
    assert second._index is index  # updated, not rebuilt
    assert "get_current_weather" not in names(second.search("weather"))
    assert names(first.search("weather", limit=1)) == ["get_current_weather"]  # its own, again
    engine_like = ToolRegistry._trusted(
        {t.name: t for t in [*TOOLS[1:], get_current_weather]},
        previous=second,
        changed=["get_current_weather"],
    )
    assert names(engine_like.search("weather", limit=1)) == ["get_current_weather"]


def test_a_subset_registry_searches_its_base_and_returns_only_what_it_holds() -> None:
    base = ToolRegistry(TOOLS)
    view = ToolRegistry._trusted({"add": add, "book_flight": book_flight}, within=base)
    assert names(view.search("weather")) == []
    assert names(view.search("flight", limit=5)) == ["book_flight"]
    assert view._index is None  # no index of its own


# -- deferred loading, per provider -----------------------------------------------------


def registry_with_search(search: ToolSearch) -> ToolRegistry:
    return ToolRegistry([*TOOLS, search.tool()])


WORDS = [f"{c}{c}word" for c in "abcdefghijklmnop"]
QUERY = " ".join(WORDS) + " target"


def _outranked(hidden: int) -> list[ToolDescriptor]:
    """`hidden` tools that match the sixteen rarest words of `QUERY`, and `shown`, which
    matches only its first word and its last, held by the hidden tools too."""
    tools = [ToolDescriptor(name=f"hidden_{i}", description=QUERY) for i in range(hidden)]
    return [*tools, ToolDescriptor(name="shown", description=f"{WORDS[0]} target")]


def _cut(per_word: int) -> list[ToolDescriptor]:
    """`per_word` tools for each word of `QUERY` (and its last), and `shown`, which holds one
    of them in a long description: it is among the candidates of the rarest terms, below
    every hidden one."""
    tools = [
        ToolDescriptor(name=f"hidden_{w}_{i}", description=f"{word} target")
        for w, word in enumerate(WORDS)
        for i in range(per_word)
    ]
    filler = " ".join(f"filler{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(60))
    return [*tools, ToolDescriptor(name="shown", description=f"{WORDS[0]} target {filler}")]


@pytest.mark.parametrize(
    "tools",
    [_outranked(10), _outranked(200), _outranked(2_000), _cut(10), _cut(50)],
    ids=[
        "only-its-common-words-10",
        "only-its-common-words-200",
        "only-its-common-words-2000",
        "cut-160",
        "cut-800",
    ],
)
def test_a_views_own_tool_is_found_however_many_hidden_tools_outrank_it(tools: list[ToolDescriptor]) -> None:
    index = ToolIndex(tools)
    assert "shown" not in names(index.search(QUERY, limit=5))  # outranked in the whole index
    assert names(index.search(QUERY, admit=lambda name, _: name == "shown")) == ["shown"]
    assert names(index.search("target", admit=lambda name, _: name == "shown")) == ["shown"]


def test_a_views_filter_is_asked_once_per_tool_and_query() -> None:
    tools, query = _outranked(500), QUERY
    asked: list[str] = []

    def admit(name: str, _: ToolDescriptor) -> bool:
        asked.append(name)
        return name == "shown"

    ToolIndex(tools).search(query, admit=admit)
    assert len(asked) == len(set(asked))


def test_anthropic_client_form_is_accepted_by_the_sdk_types() -> None:
    search = ToolSearch(always=["add"])
    tools = registry_with_search(search).schemas("anthropic", search=search)
    assert [t["name"] for t in tools][:2] == ["search_tools", "add"]
    assert [t.get("defer_loading", False) for t in tools] == [False, False, True, True, True, True]
    for t in tools:
        validate_typed_dict(ToolParam, t)


def test_anthropic_server_form_is_accepted_by_the_sdk_types() -> None:
    search = ToolSearch(always=["add"], execution="server")
    tools = registry_with_search(search).schemas("anthropic", search=search)
    validate_typed_dict(ToolSearchToolBm25_20251119Param, tools[0])
    assert tools[0]["name"] == "tool_search_tool_bm25"
    for t in tools[1:]:
        validate_typed_dict(ToolParam, t)
    assert all(t["defer_loading"] for t in tools[2:])


def test_openai_responses_forms_are_accepted_by_the_sdk_types() -> None:
    client = ToolSearch(always=["add"])
    tools = registry_with_search(client).schemas("openai-responses", search=client)
    validate_typed_dict(ToolSearchToolParam, tools[0])
    assert tools[0]["execution"] == "client"
    validate_typed_dict(FunctionToolParam, tools[1])
    assert len(tools) == 2  # the found tools arrive as tool_search_output items
    server = ToolSearch(
        always=["add"],
        execution="server",
        namespaces=[Namespace(name="money", description="Money and currencies.", tools=["convert*"])],
    )
    tools = registry_with_search(server).schemas("openai-responses", search=server)
    assert tools[0] == {"type": "tool_search"}
    validate_typed_dict(ToolSearchToolParam, tools[0])
    namespace = next(t for t in tools if t["type"] == "namespace")
    validate_typed_dict(NamespaceToolParam, namespace)
    assert [t["name"] for t in namespace["tools"]] == ["convertCurrency"]
    for t in tools[1:]:
        if t["type"] == "function":
            validate_typed_dict(FunctionToolParam, t)
    assert all(t["defer_loading"] for t in tools[2:] if t["type"] == "function")


def test_other_dialects_get_a_search_tool_and_the_loaded_tools_at_the_end() -> None:
    search = ToolSearch(always=["add"])
    registry = registry_with_search(search)
    first = registry.schemas("openai", search=search)
    assert [t["function"]["name"] for t in first] == ["search_tools", "add"]
    for t in first:
        validate_typed_dict(ChatCompletionToolParam, t)
    loaded = registry.schemas("openai", search=search, loaded=["book_flight", "nope", "add"])
    assert [t["function"]["name"] for t in loaded] == ["search_tools", "add", "book_flight"]
    gemini = registry.schemas("gemini", search=search, loaded=["book_flight"])
    assert [t["name"] for t in gemini] == ["search_tools", "add", "book_flight"]


def test_the_tool_list_is_byte_identical_while_nothing_new_is_loaded() -> None:
    search = ToolSearch(always=["add"])
    registry = registry_with_search(search)
    for provider in ("anthropic", "openai-responses", "openai", "gemini"):
        one = json.dumps(registry.schemas(provider, search=search, loaded=["book_flight"]))
        two = json.dumps(
            ToolRegistry([*TOOLS, search.tool()]).schemas(provider, search=search, loaded=["book_flight"])
        )
        assert one == two
        grown = registry.schemas(provider, search=search, loaded=["book_flight", "convertCurrency"])
        if provider in ("openai", "gemini"):  # loaded tools are appended: the prefix is kept
            assert json.dumps(grown).startswith(one[:-1])


def test_below_the_threshold_every_tool_is_sent_whole() -> None:
    search = ToolSearch(threshold=10)
    tools = registry_with_search(search).schemas("anthropic", search=search)
    assert "search_tools" not in [t["name"] for t in tools]
    assert not any(t.get("defer_loading") for t in tools)


# -- the search tool and reading back --------------------------------------------------


async def test_the_search_tool_runs_through_the_runtime_and_answers_per_provider() -> None:
    search = ToolSearch(always=["add"], limit=2)
    async with open_runtime(registry_with_search(search)) as rt:
        [result] = await rt.call_many(
            [ToolCall(id="s1", name="search_tools", arguments='{"query": "weather"}')]
        )
    assert result.ok
    assert isinstance(result.value, FoundTools)
    assert next(d.name for d in result.value.tools) == "get_current_weather"
    assert "add" not in [d.name for d in result.value.tools]
    assert "get_current_weather" in result.content
    assert search.loaded([result])[0] == "get_current_weather"
    [block] = anthropic_adapter.result_blocks([result])
    validate_typed_dict(ToolResultBlockParam, block)
    assert block["content"][0] == {"type": "tool_reference", "tool_name": "get_current_weather"}
    [item] = openai_adapter.result_items([result])
    validate_typed_dict(ResponseToolSearchOutputItemParamParam, item)
    assert item["call_id"] == "s1"
    assert item["tools"][0]["name"] == "get_current_weather"
    assert openai_adapter.tool_searches([item]).loaded[0] == "get_current_weather"


async def test_a_search_that_finds_nothing_says_so() -> None:
    search = ToolSearch()
    async with open_runtime(registry_with_search(search)) as rt:
        result = await rt.call(ToolCall(id="s1", name="search_tools", arguments='{"query": "zzzz qqqq"}'))
    assert result.ok
    assert "No tool matches" in result.content
    bad = await _call_once(search, '{"query": 5}')
    assert not bad.ok
    assert bad.kind == "invalid_arguments"


async def _call_once(search: ToolSearch, arguments: str) -> Any:
    async with open_runtime(registry_with_search(search)) as rt:
        return await rt.call(ToolCall(id="s2", name="search_tools", arguments=arguments))


def test_anthropic_search_blocks_are_read_back() -> None:
    assistant = {
        "role": "assistant",
        "content": [
            {
                "type": "server_tool_use",
                "id": "srv1",
                "name": "tool_search_tool_bm25",
                "input": {"query": "weather"},
            },
            {
                "type": "tool_search_tool_result",
                "tool_use_id": "srv1",
                "content": {
                    "type": "tool_search_tool_search_result",
                    "tool_references": [{"type": "tool_reference", "tool_name": "get_current_weather"}],
                },
            },
            {"type": "tool_use", "id": "tu1", "name": "search_tools", "input": {"query": "flight"}},
        ],
    }
    user = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "tu1",
                "content": [{"type": "tool_reference", "tool_name": "book_flight"}],
            }
        ],
    }
    activity = anthropic_adapter.tool_searches([assistant, user])
    assert [(r.query, r.execution) for r in activity.requests] == [
        ("weather", "server"),
        ("flight", "client"),
    ]
    assert activity.loaded == ("get_current_weather", "book_flight")


def test_openai_search_items_are_read_back() -> None:
    output = [
        {
            "type": "tool_search_call",
            "id": "ts0",
            "execution": "server",
            "status": "completed",
            "arguments": {"paths": ["money"]},
        },
        {
            "type": "tool_search_output",
            "id": "to0",
            "execution": "server",
            "status": "completed",
            "tools": [
                {
                    "type": "namespace",
                    "name": "money",
                    "description": "",
                    "tools": [{"type": "function", "name": "convertCurrency"}],
                }
            ],
        },
        {
            "type": "tool_search_call",
            "id": "ts1",
            "call_id": "c1",
            "execution": "client",
            "status": "completed",
            "arguments": {"query": "weather"},
        },
    ]
    activity = openai_adapter.tool_searches({"output": output})
    assert [(r.query, r.execution) for r in activity.requests] == [("money", "server"), ("weather", "client")]
    assert activity.loaded == ("convertCurrency",)
    [call] = openai_adapter.calls_from_response({"output": output})
    assert call == ToolCall(id="c1", name="search_tools", arguments={"query": "weather"})


# -- agent loops over each SDK's own transport -------------------------------------------


def scripted(replies: list[dict[str, Any]], seen: list[dict[str, Any]], http: Any = httpx) -> Any:
    """The SDK's own offline transport (httpx's MockTransport; `http` is the httpx the SDK uses)."""

    def handle(request: Any) -> Any:
        seen.append(json.loads(request.content))
        return http.Response(200, json=replies[len(seen) - 1])

    return http.MockTransport(handle)


async def test_openai_responses_agent_loop_loads_found_tools_through_tool_search_output() -> None:
    import openai

    def response(output: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": "resp", "object": "response", "created_at": 0, "model": "gpt-5.4", "status": "completed",
            "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
        }  # fmt: skip

    replies = [
        response([{"type": "tool_search_call", "id": "ts1", "call_id": "c1", "execution": "client", "status": "completed", "arguments": {"query": "weather"}}]),
        response([{"type": "function_call", "id": "fc1", "call_id": "c2", "name": "get_current_weather", "arguments": '{"city": "Paris"}', "status": "completed"}]),
        response([{"type": "message", "id": "m1", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": "Sunny.", "annotations": []}]}]),
    ]  # fmt: skip
    seen: list[dict[str, Any]] = []
    search = ToolSearch(always=["add"])
    client = openai.AsyncOpenAI(api_key="k", http_client=httpx.AsyncClient(transport=scripted(replies, seen)))
    async with open_runtime(registry_with_search(search)) as rt:
        items: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
        for _ in range(5):
            tools = rt.registry.schemas("openai-responses", search=search)
            reply = await client.responses.create(model="gpt-5.4", input=items, tools=tools)  # type: ignore[arg-type]
            calls = openai_adapter.calls_from_response(reply)
            if not calls:
                break
            results = await rt.call_many(calls)
            items += [
                *(o.model_dump(exclude_none=True) for o in reply.output),
                *openai_adapter.result_items(results),
            ]
    await client.close()
    assert len(seen) == 3
    assert seen[0]["tools"] == seen[1]["tools"] == seen[2]["tools"]  # byte-identical: the cache holds
    output = next(i for i in seen[1]["input"] if i.get("type") == "tool_search_output")
    assert output["call_id"] == "c1"
    assert output["tools"][0]["name"] == "get_current_weather"
    answer = next(i for i in seen[2]["input"] if i.get("type") == "function_call_output")
    assert answer == {"type": "function_call_output", "call_id": "c2", "output": "sunny in Paris"}


async def test_anthropic_agent_loop_answers_its_search_with_tool_references() -> None:
    import anthropic

    def message(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
        return {
            "id": "msg", "type": "message", "role": "assistant", "model": "claude", "content": content,
            "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1},
        }  # fmt: skip

    replies = [
        message(
            [{"type": "tool_use", "id": "tu1", "name": "search_tools", "input": {"query": "weather"}}],
            "tool_use",
        ),
        message(
            [{"type": "tool_use", "id": "tu2", "name": "get_current_weather", "input": {"city": "Rome"}}],
            "tool_use",
        ),
        message([{"type": "text", "text": "Sunny."}], "end_turn"),
    ]
    seen: list[dict[str, Any]] = []
    search = ToolSearch(always=["add"])
    import httpx2  # the httpx the anthropic SDK is built on (anthropic >= 2.17)

    transport = scripted(replies, seen, httpx2)
    client = anthropic.AsyncAnthropic(api_key="k", http_client=httpx2.AsyncClient(transport=transport))
    async with open_runtime(registry_with_search(search)) as rt:
        messages: list[Any] = [{"role": "user", "content": "Weather in Rome?"}]
        for _ in range(5):
            tools = rt.registry.schemas("anthropic", search=search)
            reply = await client.messages.create(
                model="claude", max_tokens=100, messages=messages, tools=tools
            )  # type: ignore[arg-type]
            calls = anthropic_adapter.calls_from_content(reply)
            if not calls:
                break
            results = await rt.call_many(calls)
            messages += [
                {"role": "assistant", "content": reply.content},
                anthropic_adapter.result_message(results),
            ]
    await client.close()
    assert len(seen) == 3
    assert seen[0]["tools"] == seen[1]["tools"] == seen[2]["tools"]
    refs = seen[1]["messages"][-1]["content"][0]["content"]
    assert refs[0] == {"type": "tool_reference", "tool_name": "get_current_weather"}
    assert anthropic_adapter.tool_searches(seen[2]["messages"]).loaded[0] == "get_current_weather"
    assert seen[2]["messages"][-1]["content"][0]["content"] == "sunny in Rome"


async def test_chat_completions_agent_loop_appends_the_loaded_tools() -> None:
    import openai

    def completion(message: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": "c", "object": "chat.completion", "created": 0, "model": "gpt",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", **message}}],
        }  # fmt: skip

    def call(id_: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"id": id_, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}

    replies = [
        completion({"content": None, "tool_calls": [call("a", "search_tools", {"query": "flight"})]}),
        completion(
            {
                "content": None,
                "tool_calls": [call("b", "book_flight", {"origin": "SFO", "destination": "JFK"})],
            }
        ),
        completion({"content": "Booked."}),
    ]
    seen: list[dict[str, Any]] = []
    search = ToolSearch(always=["add"], limit=1)
    client = openai.AsyncOpenAI(api_key="k", http_client=httpx.AsyncClient(transport=scripted(replies, seen)))
    loaded: list[str] = []
    async with open_runtime(registry_with_search(search)) as rt:
        messages: list[Any] = [{"role": "user", "content": "Book SFO to JFK"}]
        for _ in range(5):
            tools = rt.registry.schemas("openai", search=search, loaded=loaded)
            reply = await client.chat.completions.create(model="gpt", messages=messages, tools=tools)  # type: ignore[arg-type]
            calls = openai_adapter.calls_from_message(reply)
            if not calls:
                break
            results = await rt.call_many(calls)
            loaded += search.loaded(results)
            messages += [
                reply.choices[0].message.model_dump(exclude_none=True),
                *openai_adapter.result_messages(results),
            ]
    await client.close()
    assert [t["function"]["name"] for t in seen[0]["tools"]] == ["search_tools", "add"]
    assert [t["function"]["name"] for t in seen[1]["tools"]] == ["search_tools", "add", "book_flight"]
    assert seen[1]["tools"] == seen[2]["tools"]
    assert seen[2]["messages"][-1] == {"role": "tool", "tool_call_id": "b", "content": "booked"}


def test_found_tools_round_trip_as_msgspec() -> None:
    value = FoundTools(query="q", tools=(get_current_weather.descriptor,))
    assert msgspec.json.decode(msgspec.json.encode(value), type=FoundTools) == value


def test_a_bad_search_option_is_refused() -> None:
    with pytest.raises(ValueError, match="execution"):
        ToolSearch(execution="both")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limit"):
        ToolSearch(limit=0)


async def test_a_runtime_and_its_views_search_the_live_registry_as_tools_come_and_go() -> None:
    from runtime import open_runtime, tool

    @tool
    async def convert_currency(amount: float, to: str) -> str:
        """Convert an amount of money into another currency."""
        return f"{amount} {to}"

    @tool
    async def book_flight(origin: str, destination: str) -> str:
        """Book a flight between two airports."""
        return "booked"

    @tool
    async def weather_forecast(city: str) -> str:
        """Tell the weather forecast for a city."""
        return "sunny"

    async with open_runtime([convert_currency, book_flight], tracing=False) as rt:
        assert [d.name for d in rt.search("exchange money into euros", limit=1)] == ["convert_currency"]
        await rt.register(weather_forecast)  # the live index is updated, not rebuilt
        assert [d.name for d in rt.search("the weather forecast for Paris", limit=1)] == ["weather_forecast"]
        with rt.scoped(exclude=["weather_forecast"]) as view:
            assert "weather_forecast" not in [d.name for d in view.search("weather forecast rain", limit=5)]
            assert [d.name for d in view.search("flight to Rome", limit=1)] == ["book_flight"]
        await rt.unregister("convert_currency")
        assert "convert_currency" not in [d.name for d in rt.search("convert currency", limit=5)]


# -- a view searches what it shows ----------------------------------------------------


def _weather_as_forecast(view: Any, descriptor: ToolDescriptor) -> ToolDescriptor | None:
    """A `prepare`: `get_current_weather` told as a forecast (its own words taken out)."""
    if descriptor.name == "get_current_weather":
        return msgspec.structs.replace(descriptor, description="Tomorrow's forecast for a place.")
    return descriptor


def test_an_index_ranks_what_a_view_shows_and_keeps_its_own_words() -> None:
    index = ToolIndex(t.descriptor for t in TOOLS)
    shown = {"get_current_weather": _weather_as_forecast(None, get_current_weather.descriptor)}
    assert shown["get_current_weather"] is not None
    assert "get_current_weather" not in names(index.search("temperature wind rain", shown=shown))
    assert names(index.search("tomorrow's forecast", shown=shown)) == ["get_current_weather"]
    assert index.search("forecast", shown=shown)[0] is shown["get_current_weather"]  # as it shows it
    # The index itself is untouched: the tool's own words find it, the view's do not.
    assert names(index.search("temperature wind rain"))[0] == "get_current_weather"
    assert "get_current_weather" not in names(index.search("tomorrow's forecast"))
    # The view follows the index as it changes.
    index.add(ToolDescriptor(name="forecast_tomorrow", description="Tomorrow's forecast for a place."))
    assert set(names(index.search("tomorrow's forecast", shown=shown))) == {
        "get_current_weather",
        "forecast_tomorrow",
    }
    index.remove("get_current_weather")
    assert names(index.search("tomorrow's forecast", shown=shown)) == ["forecast_tomorrow"]
    assert names(index.search("temperature wind rain", shown=shown)) == []


def test_a_tool_a_view_shows_under_another_name_is_still_that_tool_to_the_index() -> None:
    index = ToolIndex(t.descriptor for t in TOOLS)
    shown = {"add": ToolDescriptor(name="sum_numbers", description="Sum two numbers.")}
    found = index.search("sum numbers", shown=shown, admit=lambda name, _: name == "add")
    assert found == [shown["add"]]
    assert len(index) == len(TOOLS)
    assert "sum_numbers" not in index
    assert names(index.search("add two integers", limit=1)) == ["add"]


async def test_a_views_search_ranks_the_tools_as_its_prepare_describes_them() -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        with rt.scoped(principal="guest", prepare=_weather_as_forecast) as view:
            assert "get_current_weather" not in names(view.search("temperature wind rain"))
            (found,) = view.search("tomorrow's forecast", limit=1)
            assert found.description == "Tomorrow's forecast for a place."
            with view.scoped(exclude=["add"]) as narrower:  # a view of the view shows it the same
                assert "get_current_weather" not in names(narrower.search("temperature wind rain"))
                assert names(narrower.search("tomorrow's forecast", limit=1)) == ["get_current_weather"]
            await rt.register(tool(name="open_ticket")(_ticket))
            assert names(view.search("tomorrow's forecast", limit=1)) == ["get_current_weather"]
            assert names(view.search("open a ticket", limit=1)) == ["open_ticket"]
        assert names(rt.search("temperature wind rain", limit=1)) == ["get_current_weather"]


def _ticket(title: str) -> str:
    """Open a support ticket."""
    return title


def test_the_integrations_search_ranks_the_tools_as_a_view_describes_them() -> None:
    from runtime.embed import RuntimeThread
    from runtime.integrations.langchain import tools as langchain_tools

    with RuntimeThread(TOOLS, tracing=False) as rt, rt.scoped(prepare=_weather_as_forecast) as view:
        offered = langchain_tools(view, search=ToolSearch(threshold=0))
        (search_tool,) = [t for t in offered if t.name == "search_tools"]
        assert "get_current_weather" not in str(search_tool.invoke({"query": "temperature wind rain"}))
        assert "get_current_weather" in str(search_tool.invoke({"query": "tomorrow's forecast"}))
