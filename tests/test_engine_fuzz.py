"""Fuzz test of call arguments (issue 10): bytes, text and JSON-like values, as a model could send them.

Random binary (as bytes, and as text read three ways, lone surrogates included), random text
(every code point, lone surrogates included; raw, and inside JSON written either way) and
random JSON-like values (as JSON text and as already-parsed dicts, under the tools' own field
names and others) go to tools of several argument types: ints, a string, a nested Struct,
`list[int]`, optional fields; async, thread and inline. Whatever arrives, `rt.call` returns a
result, never raises: a ToolSuccess, or a ToolFailure of kind INVALID_ARGUMENTS that answers
that call, with every text bounded by `max_result_chars` (plus the truncation marker).
Arguments valid by construction always succeed with the right value.

One runtime serves the whole module: a `RuntimeThread`, called from the test thread.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import leakcheck
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import FailureKind, ToolCall, ToolFailure, ToolResult, ToolSuccess, tool
from runtime.embed import RuntimeThread

# -- tools of several argument types --------------------------------------------------------------


class Point(msgspec.Struct, forbid_unknown_fields=True):
    x: int
    y: int = 0


class Shape(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    points: list[Point]
    scale: float | None = None


@tool
async def add(a: int, b: int = 0) -> int:
    """Adds two ints (async)."""
    return a + b


@tool
def echo_text(text: str) -> str:
    """Returns its text (in a worker thread)."""
    return text


@tool(inline=True)
def measure(shape: Shape) -> dict[str, Any]:
    """Reads a nested Struct (on the trio thread)."""
    return {"name": shape.name, "points": len(shape.points), "scaled": shape.scale is not None}


@tool
async def total(values: list[int]) -> int:
    """Sums a list of ints."""
    return sum(values)


@tool
def describe(n: int | None = None, label: str | None = None, flag: bool = False) -> str:
    """Only optional fields."""
    return f"{n}/{label}/{flag}"


TOOLS = [add, echo_text, measure, total, describe]
FIELDS = {
    "add": ["a", "b"],
    "echo_text": ["text"],
    "measure": ["shape"],
    "total": ["values"],
    "describe": ["n", "label", "flag"],
}
NAMES = list(FIELDS)
MAX_CHARS = 200  # max_result_chars of the fuzzed runtime: long results are cut
MAX_BYTES = 4096  # max_argument_bytes: larger arguments are refused before decoding
MAX_DEPTH = 64  # max_argument_depth (the default)
MARKER = len(f"\n[truncated: the result had {10**12} characters; showing the first {MAX_CHARS}]")
FUZZ = settings(max_examples=150, deadline=None)


@pytest.fixture(scope="module")
def rt() -> Iterator[RuntimeThread]:
    # The runtime outlives each test, and so do its sync tools' kept threads: checked when it closes.
    with (
        leakcheck.keeps_threads(*(f"tool {t.name} thread " for t in TOOLS)),
        RuntimeThread(
            TOOLS,
            tracing=False,
            max_result_chars=MAX_CHARS,
            max_argument_bytes=MAX_BYTES,
            max_argument_depth=MAX_DEPTH,
        ) as runtime,
    ):
        yield runtime
        # after everything the fuzzer sent, the runtime serves, every tool up, nothing running
        assert runtime.call(ToolCall(id="last", name="add", arguments='{"a": 2, "b": 3}')).value == 5
        stats = runtime.statistics()
        assert {t.state for t in stats.tools.values()} == {"up"}
        assert stats.in_flight == 0
        assert sum(t.restarts for t in stats.tools.values()) == 0


counter = itertools.count()


def send(rt: RuntimeThread, name: str, arguments: Any) -> tuple[ToolCall, ToolResult]:
    call = ToolCall(id=f"f{next(counter)}", name=name, arguments=arguments)
    return call, rt.call(call)


def check(call: ToolCall, result: ToolResult) -> ToolResult:
    """A result answering `call`: a success, or INVALID_ARGUMENTS; every text bounded."""
    assert isinstance(result, ToolSuccess | ToolFailure), result
    assert result.call_id == call.id
    assert result.tool == call.name
    if isinstance(result, ToolFailure):
        assert result.kind is FailureKind.INVALID_ARGUMENTS, result
        assert len(result.message) <= MAX_CHARS + MARKER, len(result.message)
        assert "Traceback" not in result.message
    else:
        assert len(result.content) <= MAX_CHARS + MARKER, len(result.content)
    return result


# -- strategies ----------------------------------------------------------------------------------

any_char = st.characters(codec=None, exclude_categories=())  # every code point, lone surrogates too
any_text = st.text(any_char, max_size=300)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(any_char, max_size=20),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(any_char, max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)
keys = st.sampled_from(sorted({f for fields in FIELDS.values() for f in fields})) | st.text(
    any_char, max_size=10
)


def has_surrogate(text: str) -> bool:
    return any("\ud800" <= c <= "\udfff" for c in text)


def paired(text: str) -> str:
    """`text` with each high surrogate followed by a low one joined into one character."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def as_text(value: Any, ascii_only: bool) -> str:
    return json.dumps(value, ensure_ascii=ascii_only)  # NaN and Infinity as json writes them: not JSON


# -- binary ---------------------------------------------------------------------------------------


@FUZZ
@given(
    data=st.binary(max_size=600) | st.binary(min_size=MAX_BYTES - 16, max_size=MAX_BYTES + 64),
    name=st.sampled_from(NAMES),
    form=st.sampled_from(["bytes", "latin-1", "surrogateescape", "inside a string"]),
)
def test_binary_arguments_are_a_result_never_an_exception(
    rt: RuntimeThread, data: bytes, name: str, form: str
) -> None:
    if form == "bytes":
        arguments: Any = data  # raw bytes, as a transport might hand them over
    elif form == "latin-1":
        arguments = data.decode("latin-1")
    elif form == "surrogateescape":
        arguments = data.decode("utf-8", "surrogateescape")  # invalid UTF-8 becomes lone surrogates
    else:
        arguments = '{"' + FIELDS[name][0] + '": "' + data.decode("utf-8", "surrogateescape") + '"}'
    call, result = send(rt, name, arguments)
    check(call, result)
    if isinstance(arguments, str) and has_surrogate(arguments):
        assert not result.ok  # text that is not Unicode never reaches a tool
        assert "not valid Unicode" in result.message
    if len(data) > MAX_BYTES and form in ("bytes", "latin-1"):
        assert not result.ok
        assert "over the limit" in result.message or "not valid Unicode" in result.message


# -- text ------------------------------------------------------------------------------------------


@FUZZ
@given(
    text=any_text,
    name=st.sampled_from(NAMES),
    form=st.sampled_from(["raw", "json escaped", "json unescaped", "parsed"]),
)
def test_text_arguments_are_a_result_never_an_exception(
    rt: RuntimeThread, text: str, name: str, form: str
) -> None:
    field = FIELDS[name][0]
    if form == "raw":
        arguments: Any = text
    elif form == "json escaped":
        arguments = json.dumps({field: text})  # a lone surrogate as a \\ud800 escape
    elif form == "json unescaped":
        arguments = json.dumps({field: text}, ensure_ascii=False)  # a lone surrogate as itself
    else:
        arguments = {field: text}
    call, result = send(rt, name, arguments)
    check(call, result)
    # Escaped in JSON, a high surrogate followed by a low one is a valid pair (one character).
    lone = has_surrogate(paired(text) if form == "json escaped" else text)
    if lone:
        assert not result.ok  # a lone surrogate is never passed on to a tool
        if form != "json escaped":  # (escaped, msgspec refuses it as not JSON)
            assert "not valid Unicode" in result.message
    if name == "echo_text" and form != "raw" and not lone:
        assert result.ok
        assert result.value == text  # what was sent, unchanged
        assert result.content == text or result.content.startswith(text[:MAX_CHARS] + "\n[truncated: ")


# -- JSON-like values ------------------------------------------------------------------------------


@FUZZ
@given(
    value=json_values,
    extra=st.dictionaries(keys, json_values, max_size=3),
    name=st.sampled_from(NAMES),
    form=st.sampled_from(["text", "ascii text", "parsed", "whole value as text", "whole value parsed"]),
)
def test_json_like_values_are_a_result_never_an_exception(
    rt: RuntimeThread, value: Any, extra: dict[str, Any], name: str, form: str
) -> None:
    obj = {FIELDS[name][0]: value, **extra}
    if form == "text":
        arguments: Any = as_text(obj, ascii_only=False)
    elif form == "ascii text":
        arguments = as_text(obj, ascii_only=True)
    elif form == "parsed":
        arguments = obj
    elif form == "whole value as text":
        arguments = as_text(value, ascii_only=False)
    else:
        arguments = value  # an already-parsed value that may not be an object at all
    call, result = send(rt, name, arguments)
    check(call, result)


def nested(depth: int, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


@FUZZ
@given(depth=st.integers(0, 150), name=st.sampled_from(NAMES), parsed=st.booleans())
def test_nesting_beyond_the_depth_limit_is_refused_with_its_path(
    rt: RuntimeThread, depth: int, name: str, parsed: bool
) -> None:
    obj = {FIELDS[name][0]: nested(depth, 1)}
    call, result = send(rt, name, obj if parsed else json.dumps(obj))
    check(call, result)
    if depth + 1 > MAX_DEPTH:  # the object itself is one level
        assert not result.ok
        # the path of the first value too deep, then why (unless the path alone fills MAX_CHARS)
        assert result.message.startswith(f"invalid arguments for tool {name!r}: `$.{FIELDS[name][0]}[0]")
        assert f"nested deeper than the limit of {MAX_DEPTH} levels" in result.message or (
            "\n[truncated: " in result.message
        )


# -- valid arguments, as text and parsed -----------------------------------------------------------

small_text = st.text(st.characters(codec="utf-8"), max_size=400)  # every valid code point
int64 = st.integers(-(2**63), 2**63 - 1)
points = st.lists(st.builds(lambda x, y: {"x": x, "y": y}, int64, int64), max_size=10)
valid = st.one_of(
    st.builds(lambda a, b: ("add", {"a": a, "b": b}, a + b), st.integers(), st.integers()),
    st.builds(lambda a: ("add", {"a": a}, a), int64),
    st.builds(lambda t: ("echo_text", {"text": t}, t), small_text),
    st.builds(
        lambda n, p, s: (
            "measure",
            {"shape": {"name": n, "points": p, "scale": s}},
            {"name": n, "points": len(p), "scaled": s is not None},
        ),
        small_text,
        points,
        st.none() | st.floats(allow_nan=False, allow_infinity=False),
    ),
    st.builds(lambda v: ("total", {"values": v}, sum(v)), st.lists(int64, max_size=50)),
    st.builds(
        lambda n, label, f: ("describe", {"n": n, "label": label, "flag": f}, f"{n}/{label}/{f}"),
        st.none() | int64,
        st.none() | small_text,
        st.booleans(),
    ),
    st.just(("describe", {}, "None/None/False")),
)


@FUZZ
@given(case=valid, parsed=st.booleans())
def test_valid_arguments_succeed_with_the_right_value(
    rt: RuntimeThread, case: tuple[str, Any, Any], parsed: bool
) -> None:
    name, obj, expected = case
    text = json.dumps(obj, ensure_ascii=False)
    call, result = send(rt, name, obj if parsed else text)
    check(call, result)
    if len(text.encode()) > MAX_BYTES:
        assert not result.ok
        assert "over the limit" in result.message
    else:
        assert result.ok, result
        assert result.value == expected


@settings(max_examples=40, deadline=None)
@given(
    batch=st.lists(
        st.tuples(st.sampled_from(NAMES), st.one_of(any_text, json_values, st.binary(max_size=100))),
        max_size=20,
    )
)
def test_a_batch_of_fuzzed_arguments_is_answered_in_order(
    rt: RuntimeThread, batch: list[tuple[str, Any]]
) -> None:
    calls = [
        ToolCall(id=f"b{i}", name=name, arguments=arguments) for i, (name, arguments) in enumerate(batch)
    ]
    results = rt.call_many(calls)
    assert len(results) == len(calls)
    for call, result in zip(calls, results, strict=True):
        check(call, result)
