"""The runtime as an MCP server (docs/ARCHITECTURE.md 3.7), driven by the official SDK client.

Real peers: `python -m runtime serve tests.mcp_fixtures:registry` as a child process over
stdio and streamable HTTP, in both protocol eras (2025-11-25 `initialize`, 2026-07-28
discovery); list_changed and the cross-hop trace in-process (serve_http on a free port).
"""

from __future__ import annotations

import functools
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
import trio
from mcp import Client, MCPError, StdioServerParameters
from mcp.client._memory import InMemoryTransport
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import INVALID_PARAMS
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime import Runtime, open_runtime, tool
from runtime.mcp import serve_http
from runtime.mcp._server import ServedRuntime
from runtime.tracing import Tracing
from tests.mcp_fixtures import registry

# The SDK's HTTP client cancels its SSE reads at exit without closing httpx2's async
# generators; trio's finalizer then warns. That is the client's cleanup, not the server's.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator 'httpx2\\.:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Async generator 'httpcore2\\.:ResourceWarning"),
]

ROOT = Path(__file__).resolve().parent.parent
TARGET = "tests.mcp_fixtures:registry"
TOKEN = "test-token-4f2a"
ERAS = [pytest.param("legacy", id="2025-11-25"), pytest.param("auto", id="2026-07-28")]
START_TIMEOUT = 30  # seconds for a child process to import the SDK and start serving
CALL_TIMEOUT = 20


def runtime_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "runtime", *args]


# -- the child processes -----------------------------------------------------------------


@pytest.fixture(scope="module")
def http_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`python -m runtime serve ... --http 127.0.0.1:0 --token ...`; its URL once it serves."""
    log = tmp_path_factory.mktemp("serve") / "stderr.txt"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            runtime_command("serve", TARGET, "--http", "127.0.0.1:0", "--token", TOKEN),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while "http://" not in (text := log.read_text()):
            assert process.poll() is None, f"the server exited: {text}"
            assert time.monotonic() < deadline, f"the server did not start: {text}"
            time.sleep(0.05)
        yield text.split("at ", 1)[1].split()[0]
    finally:
        process.kill()
        process.wait(timeout=10)


def stdio_server() -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "runtime", "serve", TARGET], cwd=str(ROOT)
    )


@asynccontextmanager
async def http_client(
    url: str, mode: str, token: str | None = TOKEN, **options: Any
) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else None
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode, **options) as client,
    ):
        yield client


# -- what every transport and era must show ----------------------------------------------


def text(result: types.CallToolResult) -> str:
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def check_tools_and_calls(client: Client) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert list(tools) == ["add", "forecast", "search", "shout"]

    add = tools["add"]
    assert add.title == "Add two integers"
    assert add.annotations is not None
    assert add.annotations.read_only_hint is True
    assert add.annotations.idempotent_hint is True
    assert add.input_schema["required"] == ["a", "b"]
    assert add.output_schema == {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"result": {"type": "integer"}},
        "required": ["result"],
        "x-fastmcp-wrap-result": True,
    }
    forecast = tools["forecast"]
    assert forecast.annotations is not None
    assert forecast.annotations.open_world_hint is False
    assert forecast.output_schema is not None
    assert forecast.output_schema["type"] == "object"
    assert forecast.output_schema["required"] == ["city", "celsius", "sunny"]
    assert tools["shout"].output_schema is None  # a str result is the text itself

    result = await client.call_tool("add", {"a": 2, "b": 3})
    assert (result.is_error, result.structured_content, text(result)) == (False, {"result": 5}, "5")

    result = await client.call_tool("forecast", {"city": "Paris", "days": 2})
    assert not result.is_error
    assert result.structured_content == {"city": "Paris", "celsius": 23.5, "sunny": True}

    result = await client.call_tool("search", {"query": "trio"})
    assert result.structured_content == {"result": ["trio #1", "trio #2", "trio #3"]}

    result = await client.call_tool("shout", {"text": "hi"})
    assert (result.is_error, result.structured_content, text(result)) == (False, None, "HI")


async def check_failures(client: Client) -> None:
    result = await client.call_tool("search", {"query": "trio", "limit": "many"})
    assert result.is_error
    assert result.structured_content is None
    assert "`$.limit`" in text(result)
    assert "Expected `int`, got `str`" in text(result)

    result = await client.call_tool("add", {"a": 1})
    assert result.is_error
    assert "`$.b`" in text(result)

    result = await client.call_tool("forecast", {"city": "Paris", "days": 0})
    assert (result.is_error, text(result)) == (True, "Error: days must be at least 1")

    # An unknown tool is a JSON-RPC error (-32602), as the spec says, with the runtime's hint.
    with pytest.raises(MCPError) as raised:
        await client.call_tool("ad", {"a": 1, "b": 2})
    assert raised.value.code == INVALID_PARAMS
    assert "no tool named 'ad'; did you mean 'add'?" in raised.value.error.message


@pytest.mark.parametrize("mode", ERAS)
async def test_stdio_serves_tools_to_the_sdk_client(mode: str) -> None:
    with trio.fail_after(START_TIMEOUT + CALL_TIMEOUT):
        async with Client(stdio_server(), mode=mode) as client:
            assert client.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
            assert client.server_capabilities.tools is not None
            assert client.server_capabilities.tools.list_changed is True
            await check_tools_and_calls(client)
            await check_failures(client)


@pytest.mark.parametrize("mode", ERAS)
async def test_http_serves_tools_to_the_sdk_client(http_url: str, mode: str) -> None:
    with trio.fail_after(CALL_TIMEOUT):
        async with http_client(http_url, mode) as client:
            assert client.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
            assert client.server_info is not None
            assert client.server_info.name == "tool-runtime"
            await check_tools_and_calls(client)
            await check_failures(client)


@pytest.mark.parametrize("token", [None, "wrong-token"])
async def test_http_refuses_requests_without_the_bearer_token(http_url: str, token: str | None) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    with trio.fail_after(CALL_TIMEOUT):
        async with httpx2.AsyncClient() as http:
            response = await http.post(
                http_url,
                json={"jsonrpc": "2.0", "id": 1, "method": "server/discover"},
                headers={**headers, "Accept": "application/json, text/event-stream"},
            )
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        # The SDK client turns the 401 into an internal error while it connects.
        refused = pytest.RaisesExc(MCPError, match="Server returned an error response")
        with pytest.RaisesGroup(pytest.RaisesGroup(refused)):
            async with http_client(http_url, "legacy", token=token):
                pass


# -- in-process: list_changed and one trace across the hop --------------------------------


@asynccontextmanager
async def served(rt: Runtime) -> AsyncIterator[str]:
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(functools.partial(serve_http, rt, port=0))
        yield f"http://{host}:{port}/mcp"
        nursery.cancel_scope.cancel()


@tool
def double(x: int) -> int:
    """Double a number."""
    return 2 * x


@tool
def triple(x: int) -> int:
    """Triple a number."""
    return 3 * x


async def test_tools_registered_at_run_time_are_announced_in_both_eras() -> None:
    with trio.fail_after(CALL_TIMEOUT):
        async with open_runtime(registry, tracing=False) as rt, served(rt) as url:
            # 2025-11-25: notifications/tools/list_changed on the session's standalone stream.
            # The client opens that stream after the handshake; a change announced before it
            # is up reaches no one, so announce until one gets through.
            changed = trio.Event()

            async def on_message(message: object) -> None:
                if isinstance(message, types.ToolListChangedNotification):
                    changed.set()

            async with Client(url, mode="legacy", message_handler=on_message) as client:
                assert "double" not in [t.name for t in (await client.list_tools()).tools]
                await rt.register(double)
                while not changed.is_set():
                    with trio.move_on_after(0.5):
                        await changed.wait()
                    if not changed.is_set():
                        await rt.register(double, replace=True)  # a new version: announced again
                names = [t.name for t in (await client.list_tools()).tools]
                assert names[-1] == "double"

            # 2026-07-28: the change arrives on the client's subscriptions/listen stream.
            async with Client(url) as client:
                assert client.protocol_version == "2026-07-28"
                assert "triple" not in [t.name for t in (await client.list_tools()).tools]
                async with client.listen(tools_list_changed=True) as subscription:
                    await rt.register(triple)
                    async for event in subscription:
                        assert type(event).__name__ == "ToolsListChanged"
                        break
                tools = {t.name: t for t in (await client.list_tools()).tools}
                assert "triple" in tools
                result = await client.call_tool("triple", {"x": 4})
                assert result.structured_content == {"result": 12}


@pytest.mark.parametrize("mode", ERAS)
async def test_the_stdio_loop_announces_tools_registered_at_run_time(mode: str) -> None:
    # serve_stdio's loop (Server.run: the client's first request picks the era) over memory
    # streams instead of a pipe, so that the test can register a tool in the served runtime.
    changed = trio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    with trio.fail_after(CALL_TIMEOUT):
        async with open_runtime(registry, tracing=False) as rt, trio.open_nursery() as nursery:
            server = ServedRuntime(rt)
            nursery.start_soon(server.announce_changes)
            transport = InMemoryTransport(server.server)
            async with Client(transport, mode=mode, message_handler=on_message) as client:
                assert "double" not in [t.name for t in (await client.list_tools()).tools]
                if mode == "legacy":
                    await rt.register(double)
                    await changed.wait()
                else:
                    async with client.listen(tools_list_changed=True) as subscription:
                        await rt.register(double)
                        async for event in subscription:
                            assert type(event).__name__ == "ToolsListChanged"
                            break
                assert "double" in [t.name for t in (await client.list_tools()).tools]
                assert (await client.call_tool("double", {"x": 4})).structured_content == {"result": 8}
            nursery.cancel_scope.cancel()


async def test_the_served_call_continues_the_clients_trace() -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    with trio.fail_after(CALL_TIMEOUT):
        async with open_runtime(registry, tracing=Tracing(tracer_provider=provider)) as rt, served(rt) as url:
            for mode in ("legacy", "auto"):
                async with Client(url, mode=mode) as client:
                    with provider.get_tracer("agent").start_as_current_span(f"agent turn {mode}") as turn:
                        result = await client.call_tool("add", {"a": 1, "b": 2})
                    assert not result.is_error
                    served_span = next(s for s in spans.get_finished_spans() if s.name == "execute_tool add")
                    spans.clear()
                    assert served_span.context.trace_id == turn.get_span_context().trace_id
                    assert served_span.parent is not None
                    assert served_span.parent.span_id == turn.get_span_context().span_id


# -- the command line ----------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        runtime_command(*args), cwd=ROOT, capture_output=True, text=True, timeout=START_TIMEOUT, check=False
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("serve", "tests.no_such_module:registry"), "error: cannot import 'tests.no_such_module'"),
        (("serve", "tests.mcp_fixtures:nothing"), "error: 'tests.mcp_fixtures' has no attribute 'nothing'"),
        (("serve", "tests.mcp_fixtures"), "error: expected MODULE:ATTR, got 'tests.mcp_fixtures'"),
        (("serve", TARGET, "--http", "localhost"), "error: expected --http HOST:PORT"),
        (("serve", TARGET, "--token", "x"), "error: --token needs --http"),
        (
            ("call", "tests.no_such_module:registry", "add", "{}"),
            "error: cannot import 'tests.no_such_module'",
        ),
    ],
)
def test_cli_mistakes_are_one_line_and_exit_2(args: tuple[str, ...], message: str) -> None:
    done = run_cli(*args)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(message)
    assert done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


def test_cli_serve_reports_an_address_in_use_on_one_line(http_url: str) -> None:
    port = http_url.rsplit(":", 1)[1].split("/")[0]
    done = run_cli("serve", TARGET, "--http", f"127.0.0.1:{port}")
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: cannot serve on 127.0.0.1:{port}: ")
    assert done.stderr.count("\n") == 1


def test_cli_call_prints_the_result() -> None:
    done = run_cli("call", TARGET, "forecast", '{"city": "London"}')
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == '{"city":"London","celsius":22.5,"sunny":false}\n'


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("search", '{"query": "x", "limit": "many"}'),
            "Error: invalid arguments for tool 'search': `$.limit`",
        ),
        (("forecast", '{"city": "Oslo", "days": 0}'), "Error: days must be at least 1"),
        (("nope", "{}"), "Error: no tool named 'nope'"),
    ],
)
def test_cli_call_failure_goes_to_stderr_with_exit_1(args: tuple[str, ...], message: str) -> None:
    done = run_cli("call", TARGET, *args)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith(message)
    assert done.stderr.count("\n") == 1


async def test_a_json_schema_tool_is_served_with_its_schema_as_given_and_checked_with_it() -> None:
    from conformance.server import SCHEMA_2020_12, json_schema_2020_12_tool

    with trio.fail_after(CALL_TIMEOUT):
        async with open_runtime([json_schema_2020_12_tool], tracing=False) as rt:
            served = ServedRuntime(rt)
            async with Client(InMemoryTransport(served.server), mode="legacy") as client:
                (listed,) = (await client.list_tools()).tools
                assert listed.input_schema == SCHEMA_2020_12  # $schema, $defs/$anchor, allOf, if/then/else
                ok = await client.call_tool(
                    "json_schema_2020_12_tool", {"name": "Ada", "contactMethod": "phone", "phone": "1"}
                )
                assert (ok.is_error, text(ok)) == (False, "contact Ada")
                # if contactMethod is phone then phone is required: the schema's own rule.
                no_phone = await client.call_tool(
                    "json_schema_2020_12_tool", {"contactMethod": "phone", "email": "a@b"}
                )
                assert no_phone.is_error
                assert "'phone' is a required property" in text(no_phone) or "`$.phone`" in text(no_phone)
                extra = await client.call_tool("json_schema_2020_12_tool", {"email": "a@b", "age": 3})
                assert extra.is_error
                assert "`$.age`: unknown field" in text(extra)
            # The IR (what providers are shown) keeps the properties it can say.
            names = [p.name for p in json_schema_2020_12_tool.descriptor.parameters]
            assert names == ["name", "address", "contactMethod", "phone", "email"]


async def test_structured_content_over_max_result_chars_is_refused_whole_not_cut() -> None:
    @tool
    async def big(n: int) -> dict[str, str]:
        return {"data": "x" * n}

    with trio.fail_after(CALL_TIMEOUT):
        async with open_runtime([big], tracing=False, max_result_chars=200) as rt:
            served = ServedRuntime(rt)
            async with Client(InMemoryTransport(served.server), mode="legacy") as client:
                small = await client.call_tool("big", {"n": 10})
                large = await client.call_tool("big", {"n": 1000})
    assert small.is_error is False
    assert small.structured_content == {"data": "x" * 10}
    assert large.is_error is True
    assert large.structured_content is None
    assert "over the limit of 200 characters" in text(large)
