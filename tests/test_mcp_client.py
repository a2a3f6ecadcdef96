"""The runtime as an MCP client, against real server processes written with the official SDK.

Servers (tests/mcp_servers/): `demo.py` (MCPServer: typed, structured, failing, slow, crashing
and changing tools), `paged.py` (low-level Server, tools/list in pages of 3) and `odd.py`
(low-level Server with awkward schemas and names). They run over stdio (started by the
runtime through `mcp.stdio`) and over streamable HTTP (started here, on a free port). Both
protocol eras: `mode="legacy"` (2025-11-25, `initialize`) and `mode="2026-07-28"`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import msgspec
import psutil
import pytest
import trio
import trio.testing
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime import (
    AudioPart,
    CallContext,
    FailureKind,
    ImagePart,
    ResourceLinkPart,
    ResourcePart,
    TextPart,
    ToolCall,
    ToolFailure,
    ToolRejected,
    ToolSuccess,
    mcp,
    open_runtime,
    reporting,
    tool,
)
from runtime.mcp._client_tool import local_name, read_result
from runtime.schema import render_tool
from runtime.tracing import GEN_AI_TOOL_TYPE, Tracing

# The SDK's HTTP transports leave httpx2's response iterators to the garbage collector when a
# stream is cancelled; trio closes them properly and warns that it had to.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator 'httpx2:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Async generator 'httpcore2:ResourceWarning"),
]

SERVERS = Path(__file__).parent / "mcp_servers"
DEMO = str(SERVERS / "demo.py")
ERAS = ["legacy", "2026-07-28"]
LIMIT = 20  # seconds any one test may take (a server process starts in about 1.5 s)


def demo_stdio(**options: Any) -> mcp.StdioServer:
    return mcp.stdio(sys.executable, [DEMO], backoff=0.05, **options)


def call(name: str, arguments: Any = None, id: str = "c1") -> ToolCall:
    return ToolCall(id=id, name=name, arguments=arguments if arguments is not None else {})


def ok(result: Any) -> ToolSuccess:
    assert isinstance(result, ToolSuccess), result
    return result


def failed(result: Any, kind: FailureKind) -> ToolFailure:
    assert isinstance(result, ToolFailure), result
    assert result.kind is kind, result
    return result


async def stats(rt: Any, prefix: str = "") -> dict[str, int]:
    value: dict[str, int] = ok(await rt.call(call(f"{prefix}stats"))).value
    return value


async def until_ok(rt: Any, request: ToolCall) -> ToolSuccess:
    """Call until the call succeeds (the connection is back); bounded by the test's deadline."""
    while True:
        result = await rt.call(request)
        if result.ok:
            return ok(result)
        failed(result, FailureKind.UNAVAILABLE)
        await trio.sleep(0.05)


# -- HTTP server processes -------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class HttpServer:
    """`demo.py --http PORT` (or `--sse PORT`) as a process; `start()` waits until it accepts connections."""

    def __init__(self, transport: str = "http") -> None:
        self.transport = transport
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/{'mcp' if transport == 'http' else 'sse'}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> HttpServer:
        self.proc = subprocess.Popen(
            [sys.executable, DEMO, f"--{self.transport}", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the HTTP server exited with {self.proc.returncode}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2),
            ):
                return self
            time.sleep(0.05)
        raise RuntimeError("the HTTP server did not start within 15 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)


@pytest.fixture(scope="module")
def shared_http() -> Iterator[HttpServer]:
    """One demo server over HTTP for the tests that neither crash it nor count its calls alone."""
    server = HttpServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_http() -> Iterator[HttpServer]:
    server = HttpServer()
    try:
        yield server
    finally:
        server.stop()


# -- listing ---------------------------------------------------------------------------------


async def test_tools_are_listed_with_title_annotations_and_output_schema() -> None:
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[demo_stdio(mode="legacy")]) as rt:
            add = rt.registry.get("add")
            assert isinstance(add, mcp.McpTool)
            assert add.tool_type == "extension"
            d = add.descriptor
            assert (d.description, d.title) == ("Add two integers.", "Adder")
            assert d.annotations == {"readOnlyHint": True, "idempotentHint": True}
            assert [(p.name, p.required, p.default) for p in d.parameters] == [
                ("a", True, msgspec.UNSET),
                ("b", False, 2),
            ]
            rendered = render_tool(d, "mcp")
            assert rendered["title"] == "Adder"
            assert rendered["annotations"] == {"readOnlyHint": True, "idempotentHint": True}
            # As the server gave it (issue 25, point 12): served again, it is the same schema.
            assert rendered["outputSchema"]["properties"] == {"total": {"title": "Total", "type": "integer"}}
            assert rendered["inputSchema"] == add.json_schema
            assert {"refuse", "grow", "shrink"} <= {t.name for t in rt.registry}


async def test_include_and_exclude_choose_the_servers_tools_by_name_or_glob() -> None:
    paged = sys.executable, [str(SERVERS / "paged.py")]
    only_low = mcp.stdio(*paged, mode="legacy", include=["t[0-3]"], exclude=["t2"], prefix="p")
    without = mcp.stdio(*paged, mode="legacy", exclude=["t*"], name="none")
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[only_low, without]) as rt:
            assert sorted(t.name for t in rt.registry) == ["p_t0", "p_t1", "p_t3"]  # the server's names
            assert ok(await rt.call(call("p_t3", {"n": 1}))).content == "t3"
            left_out = await rt.call(call("p_t2", {"n": 1}))
    assert left_out.kind is FailureKind.UNKNOWN_TOOL


async def test_every_page_of_the_listing_is_read() -> None:
    paged = mcp.stdio(sys.executable, [str(SERVERS / "paged.py")], mode="legacy")
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[paged]) as rt:
            assert sorted(t.name for t in rt.registry) == [f"t{i}" for i in range(7)]
            assert ok(await rt.call(call("t6", {"n": 1}))).content == "t6"


async def test_awkward_schemas_and_names(caplog: pytest.LogCaptureFixture) -> None:
    @tool
    def ping() -> str:
        """The local ping."""
        return "local pong"

    odd = mcp.stdio(sys.executable, [str(SERVERS / "odd.py")], mode="legacy", name="odd")
    caplog.set_level(logging.INFO, logger="runtime.mcp")
    with trio.fail_after(LIMIT):
        async with open_runtime([ping], mcp_servers=[odd]) as rt:
            names = sorted(t.name for t in rt.registry)
            assert names == ["either", "files_read_v2", "ping", "tree"]
            # A name a local tool has is not taken over: the local tool keeps it.
            assert ok(await rt.call(call("ping"))).content == "local pong"
            # The recursive schema is checked at every level, as the server gave it.
            tree = {"root": {"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}]}}
            sent = json.loads(ok(await rt.call(call("tree", tree))).content)
            assert sent == {"tool": "tree", "arguments": tree}
            bad = failed(
                await rt.call(call("tree", {"root": {"children": []}})), FailureKind.INVALID_ARGUMENTS
            )
            assert "$.root.value" in bad.message
            # The sanitized name calls the server's own name.
            sent = json.loads(ok(await rt.call(call("files_read_v2", {"path": "/x"}))).content)
            assert sent["tool"] == "files.read/v2"
            # anyOf beside properties: the shape is kept; the server checks the combination.
            assert [p.name for p in rt.registry.get("either").descriptor.parameters] == ["id", "url"]
    messages = [r.getMessage() for r in caplog.records]
    assert any(
        "'broken' is skipped: its inputSchema cannot be used (unknown type 'strng')" in m for m in messages
    )
    assert any("'ping' is skipped" in m and "prefix=" in m for m in messages)
    assert any("'files.read/v2' is called 'files_read_v2' here" in m for m in messages)


# -- calls -----------------------------------------------------------------------------------


async def test_calls_are_traced_as_extension_tools_and_carry_the_trace(shared_http: HttpServer) -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[mcp.http(shared_http.url)], tracing=Tracing(provider)) as rt:
            assert ok(await rt.call(call("add", {"a": 1, "b": 2}))).value == {"total": 3}
            carried = ok(await rt.call(call("traceparent", id="t1"))).value
    finished = {s.name: s for s in spans.get_finished_spans()}
    add_span = finished["execute_tool add"]
    assert add_span.attributes is not None
    assert add_span.attributes[GEN_AI_TOOL_TYPE] == "extension"
    # The SDK client puts the current span's context in the request's _meta: one trace.
    trace_id = finished["execute_tool traceparent"].context.trace_id
    assert carried["result"].split("-")[1] == f"{trace_id:032x}"


async def test_arguments_are_checked_before_they_are_sent(shared_http: HttpServer) -> None:
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[mcp.http(shared_http.url, mode="legacy")]) as rt:
            before = (await stats(rt))["calls"]
            cases = [
                ("add", '{"a": "one"}', "`$.a`: Expected `integer`, got `string`"),
                ("add", "{}", "`$.a`: required field is missing"),
                ("add", "not json", "arguments are not valid JSON"),
                (
                    "search",
                    '{"query": "q", "filters": {"lang": "de"}}',
                    "`$.filters.lang`: 'de' is not one of",
                ),
                ("search", '{"query": "q", "filters": {"lang": "en", "max_age": -1}}', "`$.filters.max_age`"),
            ]
            for name, arguments, expected in cases:
                result = failed(await rt.call(call(name, arguments)), FailureKind.INVALID_ARGUMENTS)
                assert expected in result.message, result.message
            assert (await stats(rt))["calls"] == before  # none of them reached the server
            # A null for a parameter with a default means "not sent": the server's default applies.
            # (`filters` is an open object, as pydantic writes it: a key it does not name is passed on.)
            result = await rt.call(
                call("search", '{"query": "q", "limit": null, "filters": {"lang": "fr", "x": 1}}')
            )
            assert ok(result).content == "q:10:fr"
            # `add`'s schema is open too (no additionalProperties): an extra argument goes through.
            assert ok(await rt.call(call("add", '{"a": 1, "c": 2}'))).value == {"total": 3}
            assert (await stats(rt))["calls"] == before + 2


async def test_results_errors_structured_content_and_images(shared_http: HttpServer) -> None:
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[mcp.http(shared_http.url, prefix="demo")]) as rt:
            refused = failed(await rt.call(call("demo_refuse", {"reason": "no way"})), FailureKind.REJECTED)
            assert refused.message == "Error executing tool refuse: no way"  # the server's text, verbatim
            added = ok(await rt.call(call("demo_add", {"a": 40})))
            assert added.value == {"total": 42}  # structuredContent
            assert json.loads(added.content) == {"total": 42}  # the text block the server sent
            assert added.parts == ()
            echoed = ok(await rt.call(call("demo_echo", {"text": "hi"})))
            assert (echoed.value, echoed.content) == ("hi", "hi")
            picture = ok(await rt.call(call("demo_picture")))
            assert picture.content == "a red dot"  # its block's _meta is not shown
            assert "secret" not in picture.content
            assert isinstance(picture.parts[0], TextPart)
            assert isinstance(picture.parts[1], ImagePart)
            assert picture.parts[1].data.startswith(b"\x89PNG")
            assert "add" not in rt.registry  # only the prefixed names


async def test_the_older_http_sse_transport() -> None:
    server = HttpServer("sse").start()
    try:
        with trio.fail_after(LIMIT):
            async with open_runtime(mcp_servers=[mcp.sse(server.url, prefix="old")]) as rt:
                assert ok(await rt.call(call("old_add", {"a": 1}))).value == {"total": 3}
    finally:
        server.stop()


async def test_tools_are_listed_once_per_connection_not_per_call(shared_http: HttpServer) -> None:
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[mcp.http(shared_http.url)]) as rt:
            before = (await stats(rt))["listings"]
            await rt.call_many([call("add", {"a": i}, id=str(i)) for i in range(20)])
            assert (await stats(rt))["listings"] == before


async def test_a_cancelled_call_cancels_the_request_and_progress_reaches_the_span(
    shared_http: HttpServer,
) -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[mcp.http(shared_http.url)], tracing=Tracing(provider)) as rt:
            ok(await rt.call(call("sleep", {"seconds": 0.2})))
            before = (await stats(rt))["cancelled"]
            result = await rt.call(call("sleep", {"seconds": 30}), timeout=0.3)
            failed(result, FailureKind.TIMEOUT)
            while True:  # the server saw notifications/cancelled and stopped the call
                if (await stats(rt))["cancelled"] > before:
                    break
                await trio.sleep(0.05)
    slept = next(s for s in spans.get_finished_spans() if s.name == "execute_tool sleep")
    progress = [e for e in slept.events if e.name == "tool.progress"]
    assert progress
    assert progress[0].attributes is not None
    assert progress[0].attributes["tool.progress.message"] == "sleeping"


# -- both eras, both transports: calls and tools/list_changed --------------------------------


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_list_changed_refreshes_the_tools(transport: str, era: str, shared_http: HttpServer) -> None:
    # A changed tool is served once accepted (pinning, tests/test_mcp_pinning.py): here every change is.
    accepted = {"on_tool_change": lambda change: True}
    spec = (
        demo_stdio(mode=era, **accepted)
        if transport == "stdio"
        else mcp.http(shared_http.url, mode=era, **accepted)
    )
    name = f"grown_{transport}_{era.replace('-', '_')}"
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[spec]) as rt:
            assert ok(await rt.call(call("add", {"a": 1}))).value == {"total": 3}
            assert name not in rt.registry

            version = rt.registry_version
            ok(await rt.call(call("grow", {"name": name, "description": "first"})))
            await rt.wait_registry_changed(version)
            assert rt.registry.get(name).descriptor.description == "first"
            assert ok(await rt.call(call(name, {"x": 7}))).content == f"{name}:7"

            version = rt.registry_version
            ok(await rt.call(call("grow", {"name": name, "description": "second"})))
            await rt.wait_registry_changed(version)
            assert rt.registry.get(name).descriptor.description == "second"  # changed: replaced

            version = rt.registry_version
            ok(await rt.call(call("shrink", {"name": name})))
            await rt.wait_registry_changed(version)
            assert name not in rt.registry  # removed


# -- faults ----------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_a_stdio_server_killed_mid_call(era: str) -> None:
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[demo_stdio(mode=era)]) as rt:
            first = ok(await rt.call(call("pid"))).value["result"]
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rt.call, call("sleep", {"seconds": 30}, id="bystander"))
                crashed = failed(await rt.call(call("crash", {"after": 0.2})), FailureKind.UNAVAILABLE)
                assert "the connection to MCP server" in crashed.message
                assert "was lost during the call" in crashed.message
            # The connection comes back (a new process) and later calls succeed.
            second = (await until_ok(rt, call("pid"))).value["result"]
            assert second != first
            assert ok(await rt.call(call("add", {"a": 2}))).value == {"total": 4}


async def test_calls_in_flight_when_the_server_dies_fail_unavailable_and_none_hang() -> None:
    running: set[str] = set()
    all_running = trio.Event()

    async def on_progress(ctx: CallContext, p: float, total: float | None, message: str | None) -> None:
        running.add(ctx.call_id)  # the server's `sleep` reports progress as it starts
        if len(running) == 5:
            all_running.set()

    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[demo_stdio(mode="legacy")]) as rt:
            calls = [call("sleep", {"seconds": 30}, id=f"s{i}") for i in range(5)]
            async with trio.open_nursery() as nursery:
                results: list[Any] = []

                async def run() -> None:
                    with reporting(on_progress=on_progress):
                        results.extend(await rt.call_many(calls))

                nursery.start_soon(run)
                await all_running.wait()  # the five calls are running on the server
                failed(await rt.call(call("crash", {"after": 0.0})), FailureKind.UNAVAILABLE)
            assert [r.kind for r in results] == [FailureKind.UNAVAILABLE] * 5


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_connection_given_up_while_its_server_runs_ends_the_calls_waiting_on_it(mode: str) -> None:
    """The client gives a connection up without its stream ending (here: a call answered with
    the SDK's connection-closed error): calls still waiting on it fail UNAVAILABLE at once,
    from rt.call (the caller's task) and from call_many (the worker tasks), and it reconnects."""
    spec = mcp.stdio(sys.executable, [RAW, "--lose"], mode=mode, name="raw")
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[spec]) as rt:
            waiting: list[Any] = []
            async with trio.open_nursery() as nursery:

                async def one() -> None:
                    waiting.append(await rt.call(call("hang", id="alone")))

                async def batch() -> None:
                    waiting.extend(await rt.call_many([call("hang", id=f"b{i}") for i in range(3)]))

                nursery.start_soon(one)
                nursery.start_soon(batch)
                await trio.testing.wait_all_tasks_blocked()  # the four requests are with the server
                lost = failed(await rt.call(call("lose")), FailureKind.UNAVAILABLE)
                assert "was lost during the call (Connection closed)" in lost.message
            assert sorted(r.call_id for r in waiting) == ["alone", "b0", "b1", "b2"]
            for result in waiting:
                assert failed(result, FailureKind.UNAVAILABLE)
                assert "was lost during the call" in result.message
            sent = json.loads(ok(await until_ok(rt, call("good", {"x": 1}))).content)  # reconnected
            assert sent == {"tool": "good", "arguments": {"x": 1}}


@pytest.mark.parametrize("era", ERAS)
async def test_an_http_server_killed_mid_call_and_restarted(
    era: str, own_http: HttpServer, caplog: pytest.LogCaptureFixture
) -> None:
    own_http.start()
    spec = mcp.http(own_http.url, mode=era, backoff=0.05, max_backoff=0.2)
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[spec]) as rt:
            assert ok(await rt.call(call("add", {"a": 1}))).value == {"total": 3}
            failed(await rt.call(call("crash", {"after": 0.2})), FailureKind.UNAVAILABLE)
            own_http.stop()
            # While the server is down, calls fail UNAVAILABLE at once.
            with trio.fail_after(2):
                down = failed(await rt.call(call("add", {"a": 1})), FailureKind.UNAVAILABLE)
            assert "is unavailable" in down.message
            await trio.to_thread.run_sync(own_http.start)
            assert (await until_ok(rt, call("add", {"a": 5}))).value == {"total": 7}
    lost = [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "runtime.mcp"
    ]
    assert lost[0].startswith(f"lost MCP server {own_http.url!r}: ")


async def test_an_http_server_restarted_while_idle(own_http: HttpServer) -> None:
    # 2025-11-25 over HTTP: nothing tells the client while it is idle; the restarted server
    # answers the old session with 404, the call fails UNAVAILABLE and a new session starts.
    own_http.start()
    spec = mcp.http(own_http.url, mode="legacy", backoff=0.05, max_backoff=0.2)
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[spec]) as rt:
            ok(await rt.call(call("add", {"a": 1})))
            own_http.stop()
            await trio.to_thread.run_sync(own_http.start)
            assert (await until_ok(rt, call("add", {"a": 2}))).value == {"total": 4}


async def test_a_server_that_never_starts(caplog: pytest.LogCaptureFixture) -> None:
    @tool
    def local(x: int) -> int:
        """A local tool."""
        return x * 2

    exits = mcp.stdio(sys.executable, ["-c", "import sys; sys.exit(3)"], name="exits", prefix="gone")
    missing = mcp.stdio("/nonexistent/mcp-server", name="missing")
    refused = mcp.http(f"http://127.0.0.1:{free_port()}/mcp", name="refused", connect_timeout=2)
    with trio.fail_after(LIMIT):
        async with open_runtime([local], mcp_servers=[exits, missing, refused]) as rt:
            assert [t.name for t in rt.registry] == ["local"]  # their tools are absent
            assert ok(await rt.call(call("local", {"x": 21}))).value == 42  # the rest is served
            failed(await rt.call(call("gone_add", {"a": 1})), FailureKind.UNKNOWN_TOOL)
    errors = [
        r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and r.name == "runtime.mcp"
    ]
    assert len(errors) == 3  # one line per server (they start together: any order)
    errors.sort()
    assert errors[0].startswith("MCP server 'exits' did not start: Connection closed;")
    assert errors[1].startswith("MCP server 'missing' did not start: FileNotFoundError")
    assert errors[2].startswith("MCP server 'refused' did not start: ConnectError")
    assert all("its tools are absent until it does (retrying in the background)" in e for e in errors)


async def test_closing_the_runtime_waits_for_a_stdio_server_to_exit() -> None:
    """When `open_runtime` returns, each stdio server's process has exited and been reaped, and
    no task of its connection is left: the SDK's shutdown (stdin closed, up to 2 s for the server
    to exit, then it is terminated) is awaited. It was raced against the runtime's last second:
    a server slower to exit than that (any server on a loaded machine) was left running, with
    the connection's reader task and the runtime's host task."""
    paged = str(SERVERS / "paged.py")
    # The server, then 1.5 s more before the process the runtime started exits.
    slow_to_exit = mcp.stdio(
        sys.executable,
        ["-c", f"import subprocess, sys, time; subprocess.run([sys.executable, {paged!r}]); time.sleep(1.5)"],
        mode="legacy",
    )
    before = {p.pid for p in psutil.Process().children()}
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[slow_to_exit]) as rt:
            assert ok(await rt.call(call("t0", {"n": 1}))).content == "t0"
            (server,) = [p for p in psutil.Process().children() if p.pid not in before]
    assert not server.is_running()  # exited and reaped (a zombie is still "running")


# -- pieces ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("remote", "prefix", "expected"),
    [
        ("search", None, "search"),
        ("search", "docs", "docs_search"),
        ("files.read/v2", None, "files_read_v2"),
        ("a" * 64, None, "a" * 64),
        ("...", None, None),
    ],
)
def test_local_names(remote: str, prefix: str | None, expected: str | None) -> None:
    assert local_name(remote, prefix) == expected


def test_long_names_stay_unique_and_fit() -> None:
    a, b = local_name("x" * 70 + "a", "p"), local_name("x" * 70 + "b", "p")
    assert a is not None
    assert b is not None
    assert a != b
    assert len(a) == len(b) == 64


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"prefix": "a b"}, "MCP prefix 'a b' must be"),
        ({"mode": "2025-11-25"}, "MCP mode must be one of"),
        ({"connect_timeout": 0}, "connect_timeout must be a positive number"),
        ({"call_timeout": -1}, "call_timeout must be a positive number"),
        ({"include": [""]}, "MCP include must be tool names or globs"),
        ({"exclude": [3]}, "MCP exclude must be tool names or globs"),
    ],
)
def test_specs_check_their_options(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        mcp.stdio("server", **options)


def test_specs_are_tool_sources_with_safe_names() -> None:
    from runtime.engine import ToolSource

    spec = mcp.http("https://user:secret@example.com/mcp?token=t", headers={"X": "1"})
    assert isinstance(spec, ToolSource)
    assert spec.name == "https://example.com/mcp"
    assert mcp.sse("http://h/sse", prefix="p").mode == "legacy"
    assert mcp.stdio("uvx", ["mcp-server-fetch"]).name == "uvx mcp-server-fetch"


def test_result_blocks_become_text_and_parts() -> None:
    result = types.CallToolResult(
        content=[
            types.TextContent(text="one"),
            types.AudioContent(data="AAAA", mime_type="audio/wav"),
            types.EmbeddedResource(resource=types.TextResourceContents(uri="file:///a", text="inside")),
            types.ResourceLink(name="doc", uri="file:///doc"),
        ],
        _meta={"hidden": True},
    )
    value, text, parts = read_result(result)
    assert value == text == "one\n[audio (audio/wav, 3 bytes)]\ninside\n[resource doc: file:///doc]"
    assert parts == (
        TextPart(text="one"),
        AudioPart(data=b"\x00\x00\x00", mime_type="audio/wav"),
        ResourcePart(uri="file:///a", text="inside"),
        ResourceLinkPart(uri="file:///doc", name="doc"),
    )
    structured = types.CallToolResult(content=[], structured_content={"n": 1})
    assert read_result(structured) == ({"n": 1}, '{"n":1}', ())
    with pytest.raises(ToolRejected, match="gave no text"):
        read_result(types.CallToolResult(content=[], is_error=True))


# -- errors the server answers with, and a server that never answers -------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_a_json_rpc_error_is_an_error_for_that_call_only(
    mode: str, shared_http: HttpServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="runtime.mcp")
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[mcp.http(shared_http.url, mode=mode)]) as rt:
            before = await stats(rt)
            busy = failed(await rt.call(call("busy")), FailureKind.ERROR)
            assert "the server is busy" in busy.message
            # The connection stayed: the next call goes through at once, without a new listing.
            after = await stats(rt)
            assert after["calls"] == before["calls"] + 1
            assert after["listings"] == before["listings"]
    assert not [r for r in caplog.records if "lost MCP server" in r.getMessage()]


async def test_a_server_that_never_answers_is_ended_by_the_call_timeout(shared_http: HttpServer) -> None:
    assert mcp.http(shared_http.url).call_timeout == 60.0  # the default: no call waits forever
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[mcp.http(shared_http.url)]) as rt:
            assert rt.registry.get("hang").timeout == 60.0
        async with open_runtime(mcp_servers=[mcp.http(shared_http.url, call_timeout=0.3)]) as rt:
            result = failed(await rt.call(call("hang")), FailureKind.TIMEOUT)
            assert "0.3" in result.message
            assert ok(await rt.call(call("echo", {"text": "still here"}))).content == "still here"


# -- what real servers send: refused entries, no resultType, oversize listings -----------------

RAW = str(SERVERS / "raw.py")


@pytest.mark.parametrize("mode", ["legacy", "auto", "2026-07-28"])
async def test_a_tool_the_sdk_refuses_is_skipped_alone_and_results_need_no_result_type(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="runtime.mcp")
    spec = mcp.stdio(sys.executable, [RAW], mode=mode, name="raw")
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[spec]) as rt:
            names = {t.name for t in rt.registry}
            assert names == {"good", "wordy", "echo"}
            # No resultType in the reply, in either era: read as a complete result.
            sent = json.loads(ok(await rt.call(call("good", {"x": 1}))).content)
            assert sent == {"tool": "good", "arguments": {"x": 1}}
            # A description over the bound is cut, not taken whole into every prompt.
            assert len(rt.registry.get("wordy").description) == 8192
    messages = [r.getMessage() for r in caplog.records]
    assert any(
        "tool 'bad' is skipped: the MCP SDK refuses its listing (tools.0.inputSchema.type" in m
        for m in messages
    )
    assert any("tool 'huge' is skipped: its schemas are" in m for m in messages)
    assert any(
        "the description of tool 'wordy' is cut to 8192 characters (it has 50000)" in m for m in messages
    )


async def test_a_server_with_too_many_tools_gives_the_first_max_tools(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="runtime.mcp")
    spec = mcp.stdio(sys.executable, [RAW, "--tools", "50"], name="raw", max_tools=10)
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[spec]) as rt:
            assert len(rt.registry) <= 10
            assert "good" in {t.name for t in rt.registry}
    assert any(
        "lists 54 tools; the first 10 are kept (max_tools=10)" in r.getMessage() for r in caplog.records
    )


def test_media_over_the_bound_become_a_note() -> None:
    from runtime.mcp._client_tool import MAX_MEDIA_BYTES

    big = base64.b64encode(b"\x00" * (MAX_MEDIA_BYTES // 2 + 1)).decode()
    result = types.CallToolResult(
        content=[
            types.ImageContent(data=big, mime_type="image/png"),
            types.AudioContent(data=big, mime_type="audio/wav"),
        ]
    )
    _, text, parts = read_result(result)
    assert [type(p).__name__ for p in parts] == ["ImagePart", "TextPart"]
    assert "left out: the result's media are over" in text


def test_the_three_spec_functions_take_one_set_of_settings_with_the_specs_defaults() -> None:
    """`stdio`, `http` and `sse` take `ServerSettings` (HTTP adds `HttpSettings`'s): the
    defaults are the spec's, a keyword one does not take is named with the closest it does."""
    from runtime import mcp as m
    from runtime.mcp import HttpSettings, ServerSettings, ServerSpec

    defaults = ServerSpec.__struct_defaults__
    fields = ServerSpec.__struct_fields__
    for spec in (m.stdio("x"), m.http("https://h/mcp"), m.sse("https://h/sse")):
        for field, default in zip(fields[-len(defaults) :], defaults, strict=True):
            if field in ("mode", "options"):
                continue
            assert getattr(spec, field) == default, (type(spec).__name__, field)
    assert m.sse("https://h/sse").mode == "legacy"
    assert set(ServerSettings.__optional_keys__) < set(HttpSettings.__optional_keys__)
    spec = m.http("https://h/mcp", include=["get_*"], exclude=("x",), headers={"a": "b"}, call_timeout=None)
    assert (spec.include, spec.exclude, spec.headers, spec.call_timeout) == (
        ("get_*",),
        ("x",),
        {"a": "b"},
        None,
    )
    with pytest.raises(
        TypeError,
        match=r"mcp.http\(\) got an unexpected keyword argument 'conect_timeout'; did you mean 'connect_timeout'\?",
    ):
        m.http("https://h/mcp", conect_timeout=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"mcp\.stdio\(\) got an unexpected keyword argument 'headers'"):
        m.stdio("x", headers={})  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="takes no mode"):
        m.sse("https://h/sse", mode="auto")
