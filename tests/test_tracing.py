"""The OpenTelemetry feature against the real SDK, with in-memory exporters."""

from __future__ import annotations

import pytest
import trio
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from runtime import Feature, RestartPolicy, ToolCall, ToolRejected, open_runtime, tool
from runtime.features import FeaturePipeline
from runtime.tracing import (
    CALL_DURATION_METRIC,
    CALLS_IN_FLIGHT_METRIC,
    ERROR_TYPE,
    GEN_AI_OPERATION_NAME,
    GEN_AI_TOOL_CALL_ARGUMENTS,
    GEN_AI_TOOL_CALL_ID,
    GEN_AI_TOOL_CALL_RESULT,
    GEN_AI_TOOL_DESCRIPTION,
    GEN_AI_TOOL_NAME,
    GEN_AI_TOOL_TYPE,
    OUTCOME,
    Tracing,
)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


class Otel:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.metrics = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.metrics])

    def tracing(self, **options: bool) -> Tracing:
        return Tracing(tracer_provider=self.tracer_provider, meter_provider=self.meter_provider, **options)

    def finished(self, prefix: str = "execute_tool") -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if s.name.startswith(prefix)]

    def points(self, name: str) -> list[tuple[dict[str, object], object]]:
        data = self.metrics.get_metrics_data()
        found = []
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found.extend((dict(p.attributes or {}), p) for p in metric.data.data_points)
        return found


@pytest.fixture
def otel() -> Otel:
    return Otel()


@tool
async def search(query: str, limit: int = 3) -> list[str]:
    """Search the documentation."""
    return [query] * limit


@tool
async def broken() -> None:
    """Always fails."""
    raise ValueError("disk on fire")


@tool
async def picky(n: int) -> int:
    """Refuses odd numbers."""
    if n % 2:
        raise ToolRejected("n must be even")
    return n


def call(name: str, arguments: str = "{}", id: str = "c1") -> ToolCall:
    return ToolCall(id=id, name=name, arguments=arguments)


async def test_a_call_makes_one_internal_execute_tool_span_with_genai_attributes(otel: Otel) -> None:
    async with open_runtime([search], tracing=otel.tracing()) as rt:
        result = await rt.call(call("search", '{"query": "trio"}', id="call-7"))
    assert result.ok
    (span,) = otel.finished()
    assert span.name == "execute_tool search"
    assert span.kind is SpanKind.INTERNAL
    assert span.attributes is not None
    assert dict(span.attributes) == {
        GEN_AI_OPERATION_NAME: "execute_tool",
        GEN_AI_TOOL_NAME: "search",
        GEN_AI_TOOL_CALL_ID: "call-7",
        GEN_AI_TOOL_DESCRIPTION: "Search the documentation.",
        GEN_AI_TOOL_TYPE: "function",
    }
    assert span.status.status_code is StatusCode.UNSET


async def test_an_error_sets_status_and_the_exception_type_and_records_the_exception(otel: Otel) -> None:
    async with open_runtime([broken], tracing=otel.tracing()) as rt:
        result = await rt.call(call("broken"))
    assert not result.ok
    (span,) = otel.finished()
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None
    assert span.attributes[ERROR_TYPE] == "ValueError"
    (event,) = span.events
    assert event.name == "exception"
    assert event.attributes is not None
    assert "Traceback" in str(event.attributes["exception.stacktrace"])


@pytest.mark.parametrize(
    ("name", "arguments", "kind"),
    [
        ("picky", '{"n": 3}', "rejected"),
        ("picky", '{"n": "x"}', "invalid_arguments"),
        ("nope", "{}", "unknown_tool"),
    ],
)
async def test_other_failures_use_the_failure_kind_as_error_type(
    otel: Otel, name: str, arguments: str, kind: str
) -> None:
    async with open_runtime([picky], tracing=otel.tracing()) as rt:
        await rt.call(call(name, arguments))
    (span,) = otel.finished()
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None
    assert span.attributes[ERROR_TYPE] == kind
    assert (GEN_AI_TOOL_TYPE in span.attributes) is (kind != "unknown_tool")


async def test_the_parent_comes_from_a_traceparent_in_the_metadata(otel: Otel) -> None:
    metadata = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01", "tracestate": "vendor=1"}
    async with open_runtime([search], tracing=otel.tracing()) as rt:
        await rt.call(call("search", '{"query": "q"}'), metadata=metadata)
    (span,) = otel.finished()
    assert span.context is not None
    assert span.parent is not None
    assert f"{span.context.trace_id:032x}" == TRACE_ID
    assert f"{span.parent.span_id:016x}" == PARENT_ID
    assert span.context.trace_state.get("vendor") == "1"


async def test_without_traceparent_the_parent_is_the_callers_current_span(otel: Otel) -> None:
    tracer = otel.tracer_provider.get_tracer("agent")
    async with open_runtime([search], tracing=otel.tracing()) as rt:
        with tracer.start_as_current_span("agent turn") as turn:
            await rt.call(call("search", '{"query": "q"}'))
    (span,) = otel.finished()
    assert span.parent is not None
    assert span.parent.span_id == turn.get_span_context().span_id


async def test_call_many_spans_are_siblings_under_the_callers_span(
    otel: Otel, autojump_clock: object
) -> None:
    @tool
    async def nap(seconds: float) -> float:
        await trio.sleep(seconds)
        return seconds

    tracer = otel.tracer_provider.get_tracer("agent")
    calls = [call("nap", f'{{"seconds": {s}}}', id=f"c{i}") for i, s in enumerate([3, 1, 2])]
    async with open_runtime([nap], tracing=otel.tracing()) as rt:
        with tracer.start_as_current_span("agent turn") as turn:
            results = await rt.call_many(calls)
    assert [r.call_id for r in results] == ["c0", "c1", "c2"]
    spans = otel.finished()
    assert len(spans) == 3
    turn_id = turn.get_span_context().span_id
    assert all(s.parent is not None and s.parent.span_id == turn_id for s in spans)
    span_ids = {s.context.span_id for s in spans if s.context is not None}
    assert not any(s.parent is not None and s.parent.span_id in span_ids for s in spans)


async def test_spans_the_tool_makes_are_children_of_its_execute_tool_span(otel: Otel) -> None:
    tracer = otel.tracer_provider.get_tracer("inside")

    @tool
    async def fetch(url: str) -> str:
        with tracer.start_as_current_span("http get"):
            return url

    @tool
    def parse(text: str) -> int:  # a sync tool: runs in a worker thread
        with tracer.start_as_current_span("parse"):
            return len(text)

    async with open_runtime([fetch, parse], tracing=otel.tracing()) as rt:
        await rt.call_many([call("fetch", '{"url": "u"}', id="a"), call("parse", '{"text": "abc"}', id="b")])
    by_name = {s.name: s for s in otel.spans.get_finished_spans()}
    for outer, inner in (("execute_tool fetch", "http get"), ("execute_tool parse", "parse")):
        parent = by_name[inner].parent
        assert parent is not None
        assert by_name[outer].context is not None
        assert parent.span_id == by_name[outer].context.span_id


async def test_arguments_and_results_are_recorded_only_when_asked(otel: Otel) -> None:
    async with open_runtime([search], tracing=otel.tracing()) as rt:
        await rt.call(call("search", '{"query": "secret"}', id="plain"))
    async with open_runtime([search], tracing=otel.tracing(record_arguments=True, record_results=True)) as rt:
        await rt.call(call("search", '{"query": "secret", "limit": 1}', id="recorded"))
        await rt.call(ToolCall(id="as-dict", name="search", arguments={"query": "d", "limit": 1}))
    spans = {s.attributes[GEN_AI_TOOL_CALL_ID]: s.attributes for s in otel.finished() if s.attributes}
    assert GEN_AI_TOOL_CALL_ARGUMENTS not in spans["plain"]
    assert GEN_AI_TOOL_CALL_RESULT not in spans["plain"]
    assert spans["recorded"][GEN_AI_TOOL_CALL_ARGUMENTS] == '{"query": "secret", "limit": 1}'
    assert spans["recorded"][GEN_AI_TOOL_CALL_RESULT] == '["secret"]'
    assert spans["as-dict"][GEN_AI_TOOL_CALL_ARGUMENTS] == '{"query":"d","limit":1}'


async def test_metrics_record_duration_by_outcome_and_in_flight_returns_to_zero(otel: Otel) -> None:
    async with open_runtime([search, broken], tracing=otel.tracing()) as rt:
        await rt.call_many(
            [call("search", '{"query": "q"}', id="a"), call("broken", id="b"), call("nope", id="c")]
        )
    durations = {(a[GEN_AI_TOOL_NAME], a[OUTCOME]): p for a, p in otel.points(CALL_DURATION_METRIC)}
    assert set(durations) == {("search", "success"), ("broken", "error"), ("nope", "unknown_tool")}
    assert all(p.count == 1 for p in durations.values())  # type: ignore[attr-defined]
    in_flight = {a[GEN_AI_TOOL_NAME]: p.value for a, p in otel.points(CALLS_IN_FLIGHT_METRIC)}  # type: ignore[attr-defined]
    assert in_flight == {"search": 0, "broken": 0, "nope": 0}


async def test_a_failing_feature_never_breaks_a_call_or_the_span(otel: Otel) -> None:
    class Broken(Feature):
        def collect_metadata(self, call: ToolCall, tool: object) -> dict[str, object]:
            raise RuntimeError("collect")

        async def on_call_starting(self, call: ToolCall, ctx: object) -> None:
            raise RuntimeError("starting")

        async def on_call_completed(self, call: ToolCall, result: object, ctx: object) -> None:
            raise RuntimeError("completed")

    async with open_runtime([search], tracing=otel.tracing(), features=[Broken()]) as rt:
        result = await rt.call(call("search", '{"query": "q"}'))
    assert result.ok
    (span,) = otel.finished()
    assert span.status.status_code is StatusCode.UNSET


async def test_restarts_and_down_are_reported_as_supervisor_spans(otel: Otel, autojump_clock: object) -> None:
    class Flaky(Exception):
        pass

    @tool(restart_on=(Flaky,))
    async def flaky() -> None:
        raise Flaky("again")

    policy = RestartPolicy(max_restarts=1, within=60.0, backoff=0.5)
    async with open_runtime([flaky], tracing=otel.tracing(), restart=policy) as rt:
        await rt.call(call("flaky", id="1"))
        await trio.sleep(1)
        await rt.call(call("flaky", id="2"))
        await trio.sleep(1)
        assert rt.statistics().tools["flaky"].state == "down"
    events = [s.events[0].name for s in otel.finished("supervise flaky")]
    assert events == ["restart", "down"]
    (down,) = [s for s in otel.finished("supervise flaky") if s.events[0].name == "down"]
    assert down.status.status_code is StatusCode.ERROR


def test_tracing_turns_itself_off_without_an_sdk() -> None:
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)  # no global SDK in tests
    assert FeaturePipeline([Tracing()]).features == ()
    assert not FeaturePipeline([Tracing()]).active
    configured = Tracing(tracer_provider=TracerProvider())
    assert FeaturePipeline([configured]).features == (configured,)


LATE_PROVIDER_SCRIPT = """
import json, trio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from runtime import ToolCall, open_runtime, tool

@tool
async def add(a: int, b: int) -> int:
    return a + b

async def main():
    exporter = InMemorySpanExporter()
    async with open_runtime([add]) as rt:  # tracing=True: the global providers, none set yet
        await rt.call(ToolCall(id="before", name="add", arguments='{"a": 1, "b": 2}'))
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)  # after the runtime opened, as a late app setup does
        await rt.call(ToolCall(id="after", name="add", arguments='{"a": 1, "b": 2}'))
        await rt.call_many([ToolCall(id="many", name="add", arguments='{"a": 1, "b": 2}')])
    print(json.dumps([[s.name, s.attributes["gen_ai.tool.call.id"]] for s in exporter.get_finished_spans()]))

trio.run(main)
"""


def test_a_tracer_provider_set_after_the_runtime_opened_gets_the_spans_of_later_calls() -> None:
    # A subprocess: the global provider can be set once per process.
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", LATE_PROVIDER_SCRIPT], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == [["execute_tool add", "after"], ["execute_tool add", "many"]]
