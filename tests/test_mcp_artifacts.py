"""Large results and streaming tools over MCP (issue 24), against a real server process
(tests/mcp_servers/artifacts.py: `serve_http(tokens=...)` of a runtime with `Artifacts`) and the
official SDK client:

- a 50 MB result goes out as its preview (under the limit) and a `resource_link`; the server
  lists it (`resources/list`) and serves it byte-exact (`resources/read`) to its principal, and
  refuses another principal (-32602, the URI in its data, SEP-2164);
- a streaming tool's chunks arrive as progress notifications whose message is the chunk;
- our own client reads the links it is given, within `max_links` / `max_link_bytes`.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import mcp_types as types
import pytest
import trio
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import INVALID_PARAMS
from served import served

from runtime import Artifacts, ResourceLinkPart, ResourcePart, ToolCall, ToolSuccess, mcp, open_runtime
from tests.mcp_servers.artifacts import LIMIT, big_text

pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator 'httpx2\\.:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Async generator 'httpcore2\\.:ResourceWarning"),
]

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "tests" / "mcp_servers" / "artifacts.py"
WAIT = 120  # seconds: 50 MB over loopback HTTP, JSON both ways, on a shared machine


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with served(SERVER) as address:
        yield address


@asynccontextmanager
async def client(url: str, token: str, mode: str = "legacy") -> AsyncIterator[Client]:
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http,
        # a 50 MB resource is one server-sent event: over the SDK's default bound (1 MiB)
        Client(streamable_http_client(url, http_client=http, max_sse_event_size=None), mode=mode) as session,
    ):
        yield session


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize(
    ("mode", "megabytes"), [("legacy", 50), ("auto", 2)], ids=["2025-11-25", "2026-07-28"]
)
async def test_a_large_result_goes_out_as_a_link_and_reads_back_byte_exact(
    url: str, mode: str, megabytes: int
) -> None:
    expected = digest(big_text(megabytes))
    with trio.fail_after(WAIT):
        async with client(url, "tok-alice", mode) as alice:
            assert alice.server_capabilities.resources is not None  # declared: artifacts are served
            result = await alice.call_tool("report", {"megabytes": megabytes})
            assert not result.is_error
            preview, link = result.content
            assert isinstance(preview, types.TextContent)
            assert isinstance(link, types.ResourceLink)
            assert len(preview.text) <= LIMIT  # the model's text is under the limit
            assert link.name in preview.text  # and names the handle
            assert str(link.uri) == f"artifact://{link.name}"
            assert link.size == megabytes * 1_000_000
            listed = await alice.list_resources()
            assert str(link.uri) in [str(r.uri) for r in listed.resources]
            read = await alice.read_resource(str(link.uri))
            (contents,) = read.contents
            assert isinstance(contents, types.TextResourceContents)
            assert digest(contents.text) == expected  # byte-exact
            del read, contents
        async with client(url, "tok-bob", mode) as bob:
            with pytest.raises(MCPError) as refused:
                await bob.read_resource(str(link.uri))
            assert refused.value.code == INVALID_PARAMS
            assert refused.value.data == {"uri": str(link.uri)}
            assert "Resource not found" in refused.value.message
            assert str(link.uri) not in [str(r.uri) for r in (await bob.list_resources()).resources]


async def test_an_unknown_resource_is_not_found_with_its_uri(url: str) -> None:
    with trio.fail_after(WAIT):
        async with client(url, "tok-alice") as alice:
            for uri in ("artifact://art_000000000000000000000000", "test://nothing-here"):
                with pytest.raises(MCPError) as refused:
                    await alice.read_resource(uri)
                assert (refused.value.code, refused.value.data) == (INVALID_PARAMS, {"uri": uri})


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["2025-11-25", "2026-07-28"])
async def test_a_streaming_tools_chunks_arrive_as_progress_notifications(url: str, mode: str) -> None:
    heard: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, message))

    with trio.fail_after(WAIT):
        async with client(url, "tok-alice", mode) as alice:
            result = await alice.call_tool("count", {"n": 20}, progress_callback=on_progress)
    chunks = [f"{i}\n" for i in range(1, 21)]
    assert heard == [(i, chunk) for i, chunk in enumerate(chunks, 1)]  # each chunk, in order
    (block,) = result.content
    assert isinstance(block, types.TextContent)
    assert block.text == "".join(chunks)  # the result: the chunks joined


async def test_our_client_reads_the_links_it_is_given_within_its_bounds(url: str) -> None:
    expected = big_text(1)
    alice = {"Authorization": "Bearer tok-alice"}
    reads = mcp.http(url, headers=alice, name="reads", prefix="r")
    bounded = mcp.http(url, headers=alice, name="bounded", prefix="b", max_link_bytes=1000)
    with trio.fail_after(WAIT):
        async with open_runtime(mcp_servers=[reads, bounded], artifacts=Artifacts(), tracing=False) as rt:
            read = await rt.call(
                ToolCall(id="1", name="r_report", arguments={"megabytes": 1}), principal="carol"
            )
            left = await rt.call(
                ToolCall(id="2", name="b_report", arguments={"megabytes": 1}), principal="carol"
            )
            assert isinstance(read, ToolSuccess)
            assert isinstance(left, ToolSuccess)
            assert rt.artifacts is not None
            # read: the remote resource's text came back whole, and is kept here (for carol)
            local = [p for p in read.parts if isinstance(p, ResourceLinkPart)]
            kept = [await rt.artifacts.read("carol", p.name) for p in local]
            assert expected in kept
            assert len(read.content) <= rt.max_result_chars
            # over max_link_bytes: the link stays a link (the server's), nothing was read
            (remote,) = [p for p in left.parts if isinstance(p, ResourceLinkPart)]
            assert remote.size == 1_000_000
            assert not any(isinstance(p, ResourcePart) for p in left.parts)
            assert len(left.content) <= rt.max_result_chars
            # content-addressed: the server's artifact and the one kept here of what it held
            # have the same handle
            assert remote.name in {p.name for p in local}


async def test_a_structured_result_over_the_limit_is_refused_with_its_link_and_preview() -> None:
    from mcp.client._memory import InMemoryTransport

    from runtime import tool
    from runtime.mcp._server import ServedRuntime

    @tool
    async def rows(n: int) -> dict[str, list[int]]:
        """`n` numbers."""
        return {"rows": list(range(n))}

    with trio.fail_after(WAIT):
        async with open_runtime([rows], tracing=False, max_result_chars=500, artifacts=Artifacts()) as rt:
            served = ServedRuntime(rt)
            async with Client(InMemoryTransport(served.server), mode="legacy") as session:
                result = await session.call_tool("rows", {"n": 5000})
                (link,) = [b for b in result.content if isinstance(b, types.ResourceLink)]
                read = await session.read_resource(str(link.uri))  # the session that made it reads it
            async with Client(InMemoryTransport(served.server), mode="legacy") as other:
                with pytest.raises(MCPError) as refused:  # another anonymous session does not
                    await other.read_resource(str(link.uri))
                assert (await other.list_resources()).resources == []
    assert refused.value.code == INVALID_PARAMS
    # cut JSON is not the value the outputSchema promises: an error, with what was kept whole
    assert result.is_error is True
    assert result.structured_content is None
    assert "over the limit of 500 characters" in result.content[0].text  # type: ignore[union-attr]
    (contents,) = read.contents
    assert isinstance(contents, types.TextResourceContents)
    assert contents.mime_type == "application/json"
    assert contents.text == '{"rows":[' + ",".join(map(str, range(5000))) + "]}"
