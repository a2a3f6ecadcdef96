"""Message adapters: an SDK-shaped model turn with parallel tool calls goes through
`calls_from_...`, `Runtime.call_many` and back out as messages the SDK's types accept,
in order, with failures flagged the way each provider expects."""

import functools
from typing import Any

import msgspec
import pydantic
import pytest
import trio
from anthropic.types import Message, MessageParam, ToolResultBlockParam
from google.genai import types as genai_types
from hypothesis import given
from hypothesis import strategies as st
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionMessage,
    ChatCompletionMessageParam,
    ChatCompletionToolMessageParam,
    ChatCompletionUserMessageParam,
)
from openai.types.responses import Response, ResponseFunctionToolCall, ResponseInputItemParam

from runtime import ContentPart, ImagePart, TextPart, Tool, ToolCall, ToolRegistry, open_runtime, tool
from runtime.messages import FailureKind, ToolFailure, ToolSuccess
from runtime.providers import anthropic as anthropic_adapter
from runtime.providers import gemini as gemini_adapter
from runtime.providers import openai as openai_adapter

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def mean(values: list[float]) -> float:
    """The mean of some numbers."""
    return sum(values) / len(values)


@tool
async def pause(seconds: float) -> str:
    """Wait, then say how long."""
    await trio.sleep(seconds)
    return f"waited {seconds}"


class ShotArgs(msgspec.Struct):
    url: str


class Screenshot(Tool[ShotArgs, bytes]):
    """Take a screenshot (a multimodal result)."""

    async def execute(self, args: ShotArgs) -> bytes:
        return PNG

    def result_to_parts(self, result: bytes) -> list[ContentPart]:
        return [TextPart(text="the page"), ImagePart(data=result, mime_type="image/png")]


REGISTRY = ToolRegistry([add, mean, pause, Screenshot()])


async def run(calls: list[ToolCall]) -> list[Any]:
    async with open_runtime(REGISTRY, tracing=False) as rt:
        return await rt.call_many(calls)


def materialize(value: Any) -> Any:
    """Consume the lazy iterators pydantic returns for `Iterable` fields (so they validate)."""
    if isinstance(value, dict):
        return {k: materialize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [materialize(v) for v in value]
    if isinstance(value, str | bytes | int | float | bool) or value is None:
        return value
    if hasattr(value, "__iter__") and not hasattr(value, "model_dump"):
        return [materialize(v) for v in value]
    return value


@functools.cache
def adapter(param_type: Any) -> pydantic.TypeAdapter[Any]:
    return pydantic.TypeAdapter(param_type)


def validate(param_type: Any, value: Any) -> None:
    """Validate with an SDK TypedDict (strictly) and check that no key was ignored."""
    assert materialize(adapter(param_type).validate_python(value, strict=True)) == value


# -- openai: chat completions --------------------------------------------------------------

CHAT_MESSAGE = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}},
        {"id": "call_2", "type": "function", "function": {"name": "nope", "arguments": "{}"}},
        {
            "id": "call_3",
            "type": "function",
            "function": {"name": "add", "arguments": '{"a": "two", "b": 1}'},
        },
    ],
}


async def test_openai_chat_round_trip_in_order_with_failures_flagged() -> None:
    message = ChatCompletionMessage.model_validate(CHAT_MESSAGE)
    calls = openai_adapter.calls_from_message(message)
    assert calls == [
        ToolCall(id="call_1", name="add", arguments='{"a": 2, "b": 3}'),
        ToolCall(id="call_2", name="nope", arguments="{}"),
        ToolCall(id="call_3", name="add", arguments='{"a": "two", "b": 1}'),
    ]
    messages = openai_adapter.result_messages(await run(calls))
    for m in messages:
        validate(ChatCompletionToolMessageParam, m)
    assert [m["tool_call_id"] for m in messages] == ["call_1", "call_2", "call_3"]
    assert messages[0]["content"] == "5"
    assert messages[1]["content"].startswith("Error: ")
    assert "nope" in messages[1]["content"]
    assert messages[2]["content"].startswith("Error: ")
    assert "$.a" in messages[2]["content"]
    conversation = [
        {"role": "user", "content": "add 2 and 3"},
        message.model_dump(exclude_none=True),
        *messages,
    ]
    validate(list[ChatCompletionMessageParam], conversation)


def test_openai_calls_from_a_completion_a_dict_and_a_message_agree() -> None:
    completion = ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-x",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": CHAT_MESSAGE}],
        }
    )
    from_message = openai_adapter.calls_from_message(ChatCompletionMessage.model_validate(CHAT_MESSAGE))
    assert openai_adapter.calls_from_message(completion) == from_message
    assert openai_adapter.calls_from_message(CHAT_MESSAGE) == from_message
    assert openai_adapter.calls_from_message({"role": "assistant", "content": "hi"}) == []


def test_openai_custom_tool_calls_are_read_too() -> None:
    message = {
        "role": "assistant",
        "tool_calls": [
            {"id": "c9", "type": "custom", "custom": {"name": "add", "input": '{"a": 1, "b": 1}'}}
        ],
    }
    assert openai_adapter.calls_from_message(ChatCompletionMessage.model_validate(message)) == [
        ToolCall(id="c9", name="add", arguments='{"a": 1, "b": 1}')
    ]


async def test_parallel_calls_come_back_in_the_order_asked_not_the_order_finished(
    autojump_clock: trio.abc.Clock,
) -> None:
    message = {
        "role": "assistant",
        "tool_calls": [
            {
                "id": f"c{i}",
                "type": "function",
                "function": {"name": "pause", "arguments": f'{{"seconds": {s}}}'},
            }
            for i, s in enumerate([3, 1, 2])
        ],
    }
    start = trio.current_time()
    results = await run(openai_adapter.calls_from_message(message))
    assert trio.current_time() - start == pytest.approx(3)  # in parallel, not 6
    messages = openai_adapter.result_messages(results)
    assert [(m["tool_call_id"], m["content"]) for m in messages] == [
        ("c0", "waited 3.0"),
        ("c1", "waited 1.0"),
        ("c2", "waited 2.0"),
    ]


# -- openai: responses ---------------------------------------------------------------------


def response_with(output: list[Any]) -> Response:
    return Response.model_validate(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 0,
            "model": "gpt-x",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        }
    )


RESPONSE_OUTPUT = [
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [],
    },
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_a",
        "name": "add",
        "arguments": '{"a": 1, "b": 2}',
    },
    {
        "type": "function_call",
        "id": "fc_2",
        "call_id": "call_b",
        "name": "mean",
        "arguments": '{"values": []}',
    },
]


async def test_openai_responses_round_trip() -> None:
    response = response_with(RESPONSE_OUTPUT)
    calls = openai_adapter.calls_from_response(response)
    assert calls == [
        ToolCall(id="call_a", name="add", arguments='{"a": 1, "b": 2}'),
        ToolCall(id="call_b", name="mean", arguments='{"values": []}'),
    ]
    assert openai_adapter.calls_from_response(RESPONSE_OUTPUT) == calls
    assert openai_adapter.calls_from_response({"output": RESPONSE_OUTPUT}) == calls
    items = openai_adapter.calls_from_response([ResponseFunctionToolCall.model_validate(RESPONSE_OUTPUT[1])])
    assert items == calls[:1]
    outputs = openai_adapter.result_items(await run(calls))
    for item in outputs:
        validate(ResponseInputItemParam, item)
    assert outputs[0] == {"type": "function_call_output", "call_id": "call_a", "output": "3"}
    assert outputs[1]["call_id"] == "call_b"
    assert outputs[1]["output"].startswith("Error: ")  # the mean of nothing: ZeroDivisionError


# -- anthropic -----------------------------------------------------------------------------

ANTHROPIC_MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-x",
    "content": [
        {"type": "text", "text": "Adding."},
        {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 2, "b": 3}},
        {"type": "tool_use", "id": "toolu_2", "name": "nope", "input": {}},
        {"type": "tool_use", "id": "toolu_3", "name": "add", "input": {"a": "two", "b": 1}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 10, "output_tokens": 20},
}


async def test_anthropic_round_trip_in_order_with_is_error() -> None:
    message = Message.model_validate(ANTHROPIC_MESSAGE)
    calls = anthropic_adapter.calls_from_content(message.content)
    assert calls == [
        ToolCall(id="toolu_1", name="add", arguments={"a": 2, "b": 3}),
        ToolCall(id="toolu_2", name="nope", arguments={}),
        ToolCall(id="toolu_3", name="add", arguments={"a": "two", "b": 1}),
    ]
    assert anthropic_adapter.calls_from_content(message) == calls
    assert anthropic_adapter.calls_from_content(ANTHROPIC_MESSAGE) == calls
    assert anthropic_adapter.calls_from_content(ANTHROPIC_MESSAGE["content"]) == calls
    blocks = anthropic_adapter.result_blocks(await run(calls))
    for block in blocks:
        validate(ToolResultBlockParam, block)
    assert [b["tool_use_id"] for b in blocks] == ["toolu_1", "toolu_2", "toolu_3"]
    assert blocks[0] == {"type": "tool_result", "tool_use_id": "toolu_1", "content": "5"}
    assert blocks[1]["is_error"] is True
    assert blocks[1]["content"].startswith("Error: ")
    assert blocks[2]["is_error"] is True
    reply = anthropic_adapter.result_message(await run(calls))
    validate(MessageParam, reply)
    conversation = [{"role": "user", "content": "add 2 and 3"}, message.to_param(), reply]
    pydantic.TypeAdapter(list[MessageParam]).validate_python(conversation)


# -- gemini --------------------------------------------------------------------------------

GEMINI_RESPONSE = {
    "candidates": [
        {
            "content": {
                "role": "model",
                "parts": [
                    {"text": "Adding."},
                    {"function_call": {"name": "add", "args": {"a": 2.0, "b": 3.0}}},
                    {"function_call": {"name": "nope", "args": {}}},
                    {"function_call": {"id": "fc_3", "name": "add", "args": {"a": "two", "b": 1.0}}},
                    {"function_call": {"name": "mean", "args": {"values": [1.0, 2.5]}}},
                ],
            }
        }
    ]
}


async def test_gemini_round_trip_in_order_with_the_error_key() -> None:
    response = genai_types.GenerateContentResponse.model_validate(GEMINI_RESPONSE)
    calls = gemini_adapter.calls_from_parts(response)
    assert calls == [
        ToolCall(id="add-0", name="add", arguments={"a": 2, "b": 3}),
        ToolCall(id="nope-1", name="nope", arguments={}),
        ToolCall(id="fc_3", name="add", arguments={"a": "two", "b": 1}),
        ToolCall(id="mean-3", name="mean", arguments={"values": [1, 2.5]}),
    ]
    assert type(calls[0].arguments["a"]) is int  # type: ignore[index]
    content = response.candidates[0].content  # type: ignore[index]
    assert gemini_adapter.calls_from_parts(content) == calls
    assert gemini_adapter.calls_from_parts(content.parts) == calls  # type: ignore[union-attr]
    assert gemini_adapter.calls_from_parts(GEMINI_RESPONSE) == calls
    results = await run(calls)
    parts = [genai_types.Part.model_validate(p) for p in gemini_adapter.result_parts(results)]
    responses = [p.function_response for p in parts]
    assert all(r is not None for r in responses)
    assert [r.name for r in responses] == ["add", "nope", "add", "mean"]  # type: ignore[union-attr]
    assert [r.id for r in responses] == [None, None, "fc_3", None]  # type: ignore[union-attr]
    assert responses[0].response == {"output": "5"}  # type: ignore[union-attr]
    assert responses[1].response["error"].startswith("Error: ")  # type: ignore[union-attr,index]
    assert responses[2].response["error"].startswith("Error: ")  # type: ignore[union-attr,index]
    assert responses[3].response == {"output": "1.75"}  # type: ignore[union-attr]
    reply = genai_types.Content.model_validate(gemini_adapter.result_content(results))
    assert reply.role == "user"
    assert len(reply.parts or []) == 4


def test_gemini_reads_the_rest_apis_camel_case() -> None:
    rest = {
        "candidates": [
            {"content": {"parts": [{"functionCall": {"id": "x1", "name": "add", "args": {"a": 1.0}}}]}}
        ]
    }
    assert gemini_adapter.calls_from_parts(rest) == [ToolCall(id="x1", name="add", arguments={"a": 1})]


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=3),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
        max_leaves=10,
    )
)
def test_integral_floats_become_ints_and_nothing_else_changes(value: Any) -> None:
    converted = gemini_adapter.integral_floats_to_int(value)
    assert converted == value  # equal as numbers (5 == 5.0), structure untouched

    def no_integral_floats(v: Any) -> bool:
        if isinstance(v, float):
            return not v.is_integer()
        if isinstance(v, dict):
            return all(no_integral_floats(x) for x in v.values())
        if isinstance(v, list):
            return all(no_integral_floats(x) for x in v)
        return True

    assert no_integral_floats(converted)


# -- multimodal ----------------------------------------------------------------------------


async def test_images_reach_every_provider_in_the_form_it_accepts() -> None:
    calls = [ToolCall(id="s1", name="screenshot", arguments='{"url": "https://example.com"}')]
    results = await run(calls)
    assert isinstance(results[0], ToolSuccess)
    assert results[0].parts[1] == ImagePart(data=PNG, mime_type="image/png")

    # Chat Completions: tool messages take text; the image follows in a user message.
    tool_message, user_message = openai_adapter.result_messages(results)
    validate(ChatCompletionToolMessageParam, tool_message)
    validate(ChatCompletionUserMessageParam, user_message)
    assert tool_message["content"][0] == {"type": "text", "text": "the page"}
    image_url = user_message["content"][1]["image_url"]["url"]
    assert image_url.startswith("data:image/png;base64,")

    # Responses API: the image goes in the function_call_output itself.
    (item,) = openai_adapter.result_items(results)
    validate(ResponseInputItemParam, item)
    assert item["output"] == [
        {"type": "input_text", "text": "the page"},
        {"type": "input_image", "image_url": image_url},
    ]

    # Anthropic: an image block inside the tool_result.
    (block,) = anthropic_adapter.result_blocks(results)
    validate(ToolResultBlockParam, block)
    assert block["content"][1]["type"] == "image"
    assert block["content"][1]["source"]["media_type"] == "image/png"

    # Gemini: inline_data parts of the function_response, raw bytes.
    (part,) = gemini_adapter.result_parts(results)
    parsed = genai_types.Part.model_validate(part)
    assert parsed.function_response is not None
    assert parsed.function_response.response == {"output": "the page"}
    media = parsed.function_response.parts or []
    assert media[0].inline_data is not None
    assert media[0].inline_data.data == PNG


def test_anthropic_leaves_out_image_types_it_does_not_take() -> None:
    result = ToolSuccess(
        call_id="c1", tool="t", content="", parts=(ImagePart(data=b"BM", mime_type="image/bmp"),)
    )
    (block,) = anthropic_adapter.result_blocks([result])
    validate(ToolResultBlockParam, block)
    assert block["content"][0]["type"] == "text"
    assert "image/bmp" in block["content"][0]["text"]


def test_a_failure_reads_the_same_everywhere() -> None:
    failure = ToolFailure(call_id="c1", tool="add", kind=FailureKind.TIMEOUT, message="took longer than 1s")
    assert openai_adapter.result_messages([failure])[0]["content"] == "Error: took longer than 1s"
    assert openai_adapter.result_items([failure])[0]["output"] == "Error: took longer than 1s"
    assert anthropic_adapter.result_blocks([failure])[0] == {
        "type": "tool_result",
        "tool_use_id": "c1",
        "content": "Error: took longer than 1s",
        "is_error": True,
    }
    assert gemini_adapter.result_parts([failure])[0] == {
        "function_response": {"name": "add", "id": "c1", "response": {"error": "Error: took longer than 1s"}}
    }


# -- artifacts (results kept whole, issue 24) ----------------------------------------------------

BIG_PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 400  # over the inline limit below


class Photo(Tool[ShotArgs, bytes]):
    """A screenshot too large to send: kept whole as an artifact."""

    async def execute(self, args: ShotArgs) -> bytes:
        return BIG_PNG

    def result_to_parts(self, result: bytes) -> list[ContentPart]:
        return [TextPart(text="the page"), ImagePart(data=result, mime_type="image/png")]


@tool
def long_report(lines: int) -> str:
    """A report of `lines` lines."""
    return "".join(f"line {i}\n" for i in range(lines))


def _text_of(message: Any) -> str:
    """Every text a provider's message holds, in order (what its model reads)."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            for key, item in value.items():
                if key not in ("type", "role", "tool_call_id", "tool_use_id", "call_id", "name", "id"):
                    walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    walk(message)
    return "\n".join(found)


async def test_every_provider_renders_a_kept_result_as_text_with_its_handle_and_preview() -> None:
    from runtime import Artifacts

    calls = [
        ToolCall(id="r1", name="long_report", arguments='{"lines": 2000}'),
        ToolCall(id="p1", name="photo", arguments='{"url": "https://example.com"}'),
    ]
    options = Artifacts(max_inline_bytes=1000)
    async with open_runtime(
        [long_report, Photo()], tracing=False, max_result_chars=800, artifacts=options
    ) as rt:
        report, photo = await rt.call_many(calls, principal="p")
    assert isinstance(report, ToolSuccess)
    assert isinstance(photo, ToolSuccess)
    report_handle = report.parts[-1].name  # type: ignore[union-attr]
    photo_handle = photo.parts[-1].name  # type: ignore[union-attr]

    chat = openai_adapter.result_messages([report, photo])
    for message in chat:
        validate(ChatCompletionToolMessageParam, message)
    responses = openai_adapter.result_items([report, photo])
    for item in responses:
        validate(ResponseInputItemParam, item)
    blocks = anthropic_adapter.result_blocks([report, photo])
    for block in blocks:
        validate(ToolResultBlockParam, block)
    gemini = gemini_adapter.result_parts([report, photo])
    for part in gemini:
        genai_types.Part.model_validate(part)

    for rendered in (chat, responses, blocks, gemini):
        first, second = _text_of(rendered[0]), _text_of(rendered[1])
        # the report: its handle, its size, its start and end, how to read more, under the limit
        assert f"artifact {report_handle}" in first
        assert "18,890 characters" in first
        assert first.count(report_handle) >= 2  # named, and in the read_artifact(...) sentence
        assert "line 0\n" in first
        assert "line 1999\n" in first
        assert f'read_artifact(handle="{report_handle}"' in first
        assert len(first) <= 800
        # the photo: its text, then the image's note (no image bytes went to the model)
        assert "the page" in second
        assert f"artifact {photo_handle}: an image (image/png) of 102,408 bytes" in second
        assert "iVBOR" not in repr(rendered[1])  # no base64 of the PNG anywhere
