"""Wire types: every message round-trips through msgspec JSON and MessagePack; metadata is read-only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
import pytest

from runtime import (
    FailureKind,
    ImagePart,
    TextPart,
    ToolCall,
    ToolCallMetadata,
    ToolFailure,
    ToolPending,
    ToolResult,
    ToolSuccess,
)
from runtime.messages import decode_result, encode_result

CALLS = [
    ToolCall(id="call_1", name="search", arguments='{"query": "trio", "limit": 3}'),
    ToolCall(id="call_2", name="search", arguments={"query": "trio", "nested": {"a": [1, 2.5, None, True]}}),
    ToolCall(id="call_3", name="ping"),
]

SUCCESSES = [
    ToolSuccess(call_id="c1", tool="add", content="3", value=3),
    ToolSuccess(call_id="c2", tool="find", content='["a","b"]', value={"hits": ["a", "b"], "more": None}),
    ToolSuccess(call_id="c3", tool="say", content="plain text"),
    ToolSuccess(
        call_id="c4",
        tool="draw",
        content="a red square",
        parts=(TextPart(text="a red square"), ImagePart(data=b"\x89PNG\r\n\x00\xff", mime_type="image/png")),
    ),
]

FAILURES = [
    ToolFailure(call_id=f"f-{kind.value}", tool="t", kind=kind, message=f"went wrong: {kind.value}")
    for kind in FailureKind
] + [
    ToolFailure(
        call_id="f-x", tool="t", kind=FailureKind.ERROR, message="boom", error_type="builtins.KeyError"
    )
]

PENDING = [  # a call that ended its turn waiting (issue 43)
    ToolPending(
        call_id="p1", tool="pay", detached_id="dc_1", reason="approval", message="waits", expires_at=1.5
    ),
    ToolPending(
        call_id="p2", tool="open_page", detached_id="dc_2", reason="outside", message="in the browser"
    ),
]

RESULTS: list[ToolResult] = [*SUCCESSES, *FAILURES, *PENDING]


def _ids(messages: list[Any]) -> list[str]:
    return [getattr(m, "id", None) or m.call_id for m in messages]


# -- round trips -------------------------------------------------------------------------


@pytest.mark.parametrize("call", CALLS, ids=_ids(CALLS))
@pytest.mark.parametrize("codec", [msgspec.json, msgspec.msgpack], ids=["json", "msgpack"])
def test_tool_call_round_trips(call: ToolCall, codec: Any) -> None:
    decoded = codec.decode(codec.encode(call), type=ToolCall)
    assert decoded == call
    assert type(decoded.arguments) is type(call.arguments)


@pytest.mark.parametrize("result", RESULTS, ids=_ids(RESULTS))
@pytest.mark.parametrize("codec", [msgspec.json, msgspec.msgpack], ids=["json", "msgpack"])
def test_result_round_trips_as_its_own_type(result: ToolResult, codec: Any) -> None:
    assert codec.decode(codec.encode(result), type=type(result)) == result


@pytest.mark.parametrize("result", RESULTS, ids=_ids(RESULTS))
@pytest.mark.parametrize("codec", [msgspec.json, msgspec.msgpack], ids=["json", "msgpack"])
def test_result_round_trips_through_the_tagged_union(result: ToolResult, codec: Any) -> None:
    decoded = codec.decode(codec.encode(result), type=ToolResult)
    assert type(decoded) is type(result)
    assert decoded == result


@pytest.mark.parametrize("result", RESULTS, ids=_ids(RESULTS))
@pytest.mark.parametrize("fmt", ["json", "msgpack"])
def test_encode_result_and_decode_result_round_trip(result: ToolResult, fmt: Any) -> None:
    data = encode_result(result, format=fmt)
    assert isinstance(data, bytes)
    decoded = decode_result(data, format=fmt)
    assert type(decoded) is type(result)
    assert decoded == result


def test_encode_result_defaults_to_json_with_a_type_tag() -> None:
    data = encode_result(SUCCESSES[0])
    assert msgspec.json.decode(data) == {
        "type": "success",
        "call_id": "c1",
        "tool": "add",
        "content": "3",
        "value": 3,
        "parts": [],
        "type_mismatch": None,
    }
    assert msgspec.json.decode(encode_result(FAILURES[0]))["type"] == "failure"


def test_failure_kind_travels_as_its_lower_case_value() -> None:
    failure = ToolFailure(call_id="c", tool="t", kind=FailureKind.TIMEOUT, message="too slow")
    assert msgspec.json.decode(encode_result(failure))["kind"] == "timeout"
    decoded = decode_result(encode_result(failure, format="msgpack"), format="msgpack")
    assert isinstance(decoded, ToolFailure)
    assert decoded.kind is FailureKind.TIMEOUT


def test_image_part_bytes_travel_as_base64_in_json() -> None:
    part = ImagePart(data=b"\x00\x01\xfe")
    assert msgspec.json.decode(msgspec.json.encode(part)) == {
        "type": "image",
        "data": "AAH+",
        "mime_type": "image/png",
    }


def test_decode_result_rejects_an_unknown_tag() -> None:
    with pytest.raises(msgspec.ValidationError, match="Invalid value 'call'"):
        decode_result(msgspec.json.encode(CALLS[0]))


def test_messages_are_frozen() -> None:
    with pytest.raises(AttributeError):
        CALLS[0].name = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        FAILURES[0].message = "other"  # type: ignore[misc]


# -- ok / content ------------------------------------------------------------------------


def test_tool_call_arguments_default_to_an_empty_json_object() -> None:
    assert ToolCall(id="1", name="ping").arguments == "{}"


def test_success_is_ok_and_its_content_is_the_text_given() -> None:
    success = ToolSuccess(call_id="c", tool="t", content="42", value=42)
    assert success.ok is True
    assert success.content == "42"


@pytest.mark.parametrize("kind", list(FailureKind))
def test_failure_is_not_ok_and_its_content_starts_with_error(kind: FailureKind) -> None:
    failure = ToolFailure(call_id="c", tool="t", kind=kind, message="the file does not exist")
    assert failure.ok is False
    assert failure.content == "Error: the file does not exist"


def test_failure_kind_values_are_lower_case_strings() -> None:
    assert {k.name: k.value for k in FailureKind} == {
        "UNKNOWN_TOOL": "unknown_tool",
        "INVALID_ARGUMENTS": "invalid_arguments",
        "REJECTED": "rejected",
        "ERROR": "error",
        "TIMEOUT": "timeout",
        "CANCELLED": "cancelled",
        "UNAVAILABLE": "unavailable",
        "OVERLOADED": "overloaded",
    }
    assert FailureKind.TIMEOUT == "timeout"


# -- ToolCallMetadata --------------------------------------------------------------------


def test_metadata_is_a_read_only_mapping() -> None:
    meta = ToolCallMetadata({"tenant": "acme"}, request_id="r1")
    assert isinstance(meta, Mapping)
    assert meta["tenant"] == "acme"
    assert meta.get("request_id") == "r1"
    assert meta.get("missing") is None
    assert "tenant" in meta
    assert "missing" not in meta
    assert len(meta) == 2
    assert list(meta) == ["tenant", "request_id"]
    assert dict(meta) == {"tenant": "acme", "request_id": "r1"}


def test_metadata_cannot_be_mutated() -> None:
    meta = ToolCallMetadata({"tenant": "acme"})
    with pytest.raises(TypeError):
        meta["tenant"] = "evil"  # type: ignore[index]
    with pytest.raises(TypeError):
        del meta["tenant"]  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        meta.update({"tenant": "evil"})  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        meta.extra = 1  # type: ignore[attr-defined]
    assert meta == {"tenant": "acme"}


def test_metadata_does_not_share_the_dict_it_was_built_from() -> None:
    source = {"tenant": "acme"}
    meta = ToolCallMetadata(source)
    source["tenant"] = "changed"
    assert meta["tenant"] == "acme"
    copy = meta.to_dict()
    copy["tenant"] = "changed"
    assert meta["tenant"] == "acme"


def test_metadata_empty_is_a_shared_empty_instance() -> None:
    assert isinstance(ToolCallMetadata.EMPTY, ToolCallMetadata)
    assert len(ToolCallMetadata.EMPTY) == 0
    assert ToolCallMetadata.of(None) is ToolCallMetadata.EMPTY
    meta = ToolCallMetadata(a=1)
    assert ToolCallMetadata.of(meta) is meta
    assert ToolCallMetadata.of({"a": 1}) == meta


def test_metadata_or_merges_and_the_right_side_wins() -> None:
    left = ToolCallMetadata(tenant="acme", request_id="r1")
    right = ToolCallMetadata(request_id="r2", user="u")
    merged = left | right
    assert isinstance(merged, ToolCallMetadata)
    assert dict(merged) == {"tenant": "acme", "request_id": "r2", "user": "u"}
    assert dict(left) == {"tenant": "acme", "request_id": "r1"}
    assert dict(right) == {"request_id": "r2", "user": "u"}


def test_metadata_or_a_plain_dict_returns_metadata() -> None:
    merged = ToolCallMetadata(tenant="acme", request_id="r1") | {"request_id": "r2"}
    assert isinstance(merged, ToolCallMetadata)
    assert dict(merged) == {"tenant": "acme", "request_id": "r2"}


def test_dict_or_metadata_returns_metadata_with_the_right_side_winning() -> None:
    merged = {"tenant": "acme", "request_id": "r1"} | ToolCallMetadata(request_id="r2")
    assert isinstance(merged, ToolCallMetadata)
    assert dict(merged) == {"tenant": "acme", "request_id": "r2"}


def test_metadata_or_with_empty_sides() -> None:
    meta = ToolCallMetadata(a=1)
    assert meta | ToolCallMetadata.EMPTY is meta
    assert meta | {} is meta
    assert ToolCallMetadata.EMPTY | meta is meta
    assert dict(ToolCallMetadata.EMPTY | {"a": 2}) == {"a": 2}


def test_metadata_equals_mappings_with_the_same_items_and_is_unhashable() -> None:
    assert ToolCallMetadata(a=1) == ToolCallMetadata({"a": 1})
    assert ToolCallMetadata(a=1) == {"a": 1}
    assert ToolCallMetadata(a=1) != {"a": 2}
    assert ToolCallMetadata(a=1) != [("a", 1)]
    with pytest.raises(TypeError, match="unhashable"):
        hash(ToolCallMetadata(a=1))


def test_metadata_later_keywords_win_over_the_mapping() -> None:
    assert dict(ToolCallMetadata({"a": 1, "b": 2}, b=3)) == {"a": 1, "b": 3}
