"""Loose result annotations (issue 46): a value that is not of its declared return type reaches the
model as it was returned; the developer is told (a `ResultTypeWarning` once per tool and shape,
`ToolSuccess.type_mismatch`, a span attribute, `statistics()`); an MCP client promised an
`outputSchema` gets the value as text, never a wrong `structuredContent`; `strict_result=True`
(or a warnings filter of "error") fails such calls as before.

The Berkeley Function Calling Leaderboard's own multi-turn classes are the real-code check: every
ground-truth call answers through the runtime what calling the method directly returns.
"""

from __future__ import annotations

import collections
import contextlib
import json
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import trio
from mcp import Client
from mcp.client._memory import InMemoryTransport
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime import FailureKind, ToolCall, ToolRegistry, open_runtime, tool
from runtime import mcp as rmcp
from runtime.exceptions import ResultTypeWarning
from runtime.mcp._server import ServedRuntime
from runtime.tools import _results
from runtime.tracing import RESULT_TYPE_MISMATCH, Tracing
from tests import bfcl
from tests.loose_tools import notify, placed_rate, rate

ROOT = Path(__file__).parent.parent
LIMIT = 30
SENT = {"sent_status": True, "message_id": {"new_id": 7}, "message": "to u2: hi"}


def call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=f"c-{name}", name=name, arguments=json.dumps(arguments))


@contextlib.contextmanager
def told() -> Iterator[list[str]]:
    """The `ResultTypeWarning`s issued in the block (their text), each one as it was issued."""
    said: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield said
    said.extend(str(w.message) for w in caught if issubclass(w.category, ResultTypeWarning))


# -- the model reads the value as returned -----------------------------------------------------


async def test_a_value_looser_than_its_annotation_reaches_the_model_as_returned() -> None:
    with told() as warned:
        async with open_runtime(ToolRegistry([notify]), tracing=False) as rt:
            result = await rt.call(call("notify", receiver_id="u2", message="hi"))
            stats = rt.statistics().tools["notify"]
    assert result.ok, result.content
    assert result.value == SENT  # the value itself
    assert json.loads(result.content) == SENT  # the text the model reads: its JSON, as it is
    assert result.type_mismatch == (
        "tool 'notify' returned a value of type `dict`, which is not its declared result type "
        "`Dict[str, Union[str, bool]]` (Expected `bool | str`, got `object` - at `$[...]`)"
    )
    assert stats.type_mismatches == 1
    assert stats.succeeded == 1
    assert len(warned) == 1
    assert "the model read it as returned" in warned[0]


async def test_the_warning_comes_once_per_tool_and_shape_and_the_counter_counts_every_call() -> None:
    @tool(name="loose_list")
    def listing(kind: str) -> list[int]:
        """Numbers, or names when asked (a second shape of mismatch)."""
        return [1, "two", 3] if kind == "mixed" else [1, 2, {"three": 3}]  # type: ignore[list-item]

    with told() as warned:
        async with open_runtime(ToolRegistry([listing]), tracing=False) as rt:
            results = [await rt.call(call("loose_list", kind=k)) for k in ("mixed",) * 3 + ("nested",) * 2]
            stats = rt.statistics().tools["loose_list"]
    assert all(r.ok for r in results)
    assert [json.loads(r.content) for r in results[2:4]] == [[1, "two", 3], [1, 2, {"three": 3}]]
    assert stats.type_mismatches == 5
    assert sorted(w.split(" (", 1)[1].split(")", 1)[0] for w in warned) == [
        "Expected `int`, got `object` - at `$[2]`",
        "Expected `int`, got `str` - at `$[1]`",
    ]


async def test_a_value_msgspec_cannot_encode_reaches_the_model_through_its_str() -> None:
    class Odd:
        def __str__(self) -> str:
            return "odd!"

    @tool(name="loose_odd")
    def odd() -> int:
        """Annotated int; returns an object only `str()` can show."""
        return Odd()  # type: ignore[return-value]

    with told() as warned:
        async with open_runtime(ToolRegistry([odd]), tracing=False) as rt:
            result = await rt.call(call("loose_odd"))
    assert "msgspec cannot encode it" in warned[0]
    assert result.ok
    assert (result.content, result.value) == ('"odd!"', "odd!")


async def test_a_value_made_in_a_worker_process_is_given_as_returned_and_counted_here() -> None:
    with told() as warned, trio.fail_after(LIMIT):
        async with open_runtime(ToolRegistry([placed_rate]), tracing=False) as rt:
            result = await rt.call(call("placed_rate", base="EUR", target="USD"))
            stats = rt.statistics().tools["placed_rate"]
    assert [w.split(" returned", 1)[0] for w in warned] == ["tool 'placed_rate'"]
    assert result.ok, result.content
    assert result.value == {"rate": 1.1, "pair": "EUR/USD"}
    assert result.type_mismatch is not None
    assert "declared result type `float`" in result.type_mismatch
    assert stats.type_mismatches == 1


async def test_the_span_says_the_result_is_not_of_its_declared_type() -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    traced = tool(rate.fn, name="traced_rate")
    with told():
        async with open_runtime(ToolRegistry([traced]), tracing=Tracing(tracer_provider=provider)) as rt:
            result = await rt.call(call("traced_rate", base="EUR", target="USD"))
    (span,) = [s for s in spans.get_finished_spans() if s.name == "execute_tool traced_rate"]
    assert span.attributes is not None
    assert span.attributes[RESULT_TYPE_MISMATCH] == result.type_mismatch
    assert span.status.is_ok


# -- strict checking stays available -------------------------------------------------------------


async def test_strict_result_fails_the_call_naming_both_types() -> None:
    strict = tool(rate.fn, name="strict_rate", strict_result=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: the call fails instead
        async with open_runtime(ToolRegistry([strict]), tracing=False) as rt:
            result = await rt.call(call("strict_rate", base="EUR", target="USD"))
            stats = rt.statistics().tools["strict_rate"]
    assert result.kind is FailureKind.ERROR
    assert result.message == (
        "tool 'strict_rate' returned a value of type `dict`, which is not its declared result type "
        "`float` (Expected `float`, got `object`)"
    )
    assert result.error_type == "runtime.exceptions.ResultTypeError"
    assert stats.type_mismatches == 1


async def test_a_warnings_filter_of_error_fails_the_call_as_strict_result_does() -> None:
    loud = tool(rate.fn, name="loud_rate")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResultTypeWarning)
        async with open_runtime(ToolRegistry([loud]), tracing=False) as rt:
            first = await rt.call(call("loud_rate", base="EUR", target="USD"))
            again = await rt.call(call("loud_rate", base="EUR", target="USD"))
    for result in (first, again):  # every time, not once: an error is not a warning told already
        assert result.kind is FailureKind.ERROR
        assert result.error_type == "runtime.exceptions.ResultTypeWarning"
        assert "not its declared result type `float`" in result.message


# -- MCP: the structured part is left out rather than sent wrong --------------------------------


async def test_over_mcp_a_mismatched_value_is_text_without_structured_content() -> None:
    with told(), trio.fail_after(LIMIT):
        async with open_runtime(ToolRegistry([notify, rate]), tracing=False) as rt:
            served = ServedRuntime(rt)
            async with Client(InMemoryTransport(served.server), mode="legacy") as client:
                listed = {t.name: t for t in (await client.list_tools()).tools}
                assert listed["rate"].output_schema is not None  # a schema was promised
                sent = await client.session.send_request(
                    types.CallToolRequest(
                        params=types.CallToolRequestParams(
                            name="rate", arguments={"base": "EUR", "target": "USD"}
                        )
                    ),
                    types.CallToolResult,
                )
    assert sent.is_error is False
    assert sent.structured_content is None
    assert "structured_content" not in sent.model_fields_set  # left out, not sent as null
    (block,) = sent.content
    assert isinstance(block, types.TextContent)
    assert json.loads(block.text) == {"rate": 1.1, "pair": "EUR/USD"}


async def test_a_runtime_reads_another_runtimes_mismatched_value_as_its_model_would() -> None:
    spec = rmcp.stdio(
        sys.executable,
        ["-m", "runtime", "serve", "tests.loose_tools:registry"],
        cwd=str(ROOT),
        mode="legacy",
        name="loose",
        connect_timeout=LIMIT,
    )
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[spec], tracing=False) as rt:
            result = await rt.call(call("notify", receiver_id="u2", message="hi"))
    assert result.ok, result.content  # the SDK would refuse a result without structuredContent
    assert json.loads(result.content) == SENT


# -- the Berkeley Function Calling Leaderboard's multi-turn classes ------------------------------

needs_bfcl = pytest.mark.skipif(
    not bfcl.available(), reason="the bfcl-eval wheel is not unpacked: `make bfcl`"
)


@needs_bfcl
async def test_bfcl_ground_truth_calls_answer_what_calling_the_classes_directly_returns() -> None:
    runs = []
    _results._WARNED.clear()  # what other tests told: this run is told of its own, once each
    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("always")
        for category in bfcl.CATEGORIES:
            runs.append(await bfcl.run(category))
    calls = [c for r in runs for c in r.calls]
    assert len(calls) == 4625
    differ = []
    refused = []
    for c in calls:
        r = c.result
        if not c.fits:  # an argument not of its declared type: the schema tells the model so
            refused.append(c)
            assert r.kind is FailureKind.INVALID_ARGUMENTS, (c.name, c.arguments, r)
            continue
        if c.raised is not None:
            if r.ok:
                differ.append((c, "raised directly, returned through the runtime"))
            continue
        if not r.ok or (r.content if isinstance(c.direct, str) else json.loads(r.content)) != c.readable:
            differ.append((c, r.content))
        elif c.value != c.direct and c.value != c.readable:
            differ.append((c, f"value {c.value!r}"))
    assert differ == []
    assert [(c.name, c.arguments) for c in refused] == [("close_ticket", {"ticket_id": "ticket_001"})] * 4
    # The classes end in the same state both ways (BFCL's own state check), but where a refused call
    # changed it directly (`close_ticket("ticket_001")` closes a ticket whose id is a string).
    assert {e for r in runs for e in r.states_differ} <= {c.entry for c in refused}
    mismatched = [c for c in calls if c.result.ok and c.result.type_mismatch is not None]
    assert len(mismatched) == sum(r.type_mismatches for r in runs) == 337
    # told once per tool and shape: every mismatched tool was named, none twice for one shape
    mismatch_shape = _results.mismatch_shape
    shapes = collections.Counter(
        mismatch_shape(str(w.message)) for w in told if issubclass(w.category, ResultTypeWarning)
    )
    assert shapes
    assert max(shapes.values()) == 1
    assert {c.name for c in mismatched} == {s.split("'")[1] for s in shapes}
    assert len(shapes) == len({mismatch_shape(c.result.type_mismatch or "") for c in mismatched})


@needs_bfcl
async def test_bfcl_calls_whose_values_miss_their_annotations_fail_under_strict_result() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResultTypeWarning)
        loose = await bfcl.run("base")
    strict = await bfcl.run("base", strict_result=True)
    loose_mismatched = [(c.entry, c.name) for c in loose.calls if c.result.ok and c.result.type_mismatch]
    strict_errors = [
        (c.entry, c.name)
        for c in strict.calls
        if not c.result.ok and "not its declared result type" in c.result.content
    ]
    assert loose_mismatched
    assert strict_errors == loose_mismatched
    assert strict.type_mismatches == loose.type_mismatches == len(loose_mismatched)
