"""Hostile tenants against served MCP task status notifications (SEP-2663 `subscriptions/listen`
with `notifications.taskIds`), on a real server process (tests/mcp_servers/tasks.py, one bearer
token per principal), spoken to as raw HTTP as a hostile client would.

Found on main: one principal's listen streams were bounded only by the server's 1024 in all,
and each id it listed was a task of the server's reading the journal at every change and poll;
alice holding 100 streams of 100 of her own never-ending tasks took the server's whole CPU
(bob's tasks/get answered in 11 s instead of 10 ms), and her 1024 streams locked bob out.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from served import served

from runtime.mcp._server_tasks import MAX_STREAMS_PER_PRINCIPAL, MAX_WATCHED_PER_PRINCIPAL

SERVER = Path(__file__).resolve().parent / "mcp_servers" / "tasks.py"
TASKS = "io.modelcontextprotocol/tasks"
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "hostile", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
}
PLAIN_META = {**META, "io.modelcontextprotocol/clientCapabilities": {}}  # declares no extension
LIMIT = 60  # seconds a test may take on a loaded machine

# httpx's nested response iterators of a stream dropped before its end are left to the garbage
# collector (closing the outer one does not close the inner ones); trio closes them and warns.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator 'httpx\\.:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Async generator 'httpcore\\.:ResourceWarning"),
]


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with served(SERVER) as found:
        yield found


def _headers(token: str, method: str, name: str | None = None) -> dict[str, str]:
    headers = {
        "Authorization": f"Bearer {token}",
        "MCP-Protocol-Version": "2026-07-28",
        "Accept": "application/json, text/event-stream",
        "Mcp-Method": method,
    }
    if name is not None:
        headers["Mcp-Name"] = name
    return headers


def _body(text: str) -> dict[str, Any]:
    if "data:" in text:
        text = text.split("data: ", 1)[1].split("\n", 1)[0]
    answer: dict[str, Any] = json.loads(text)
    return answer


async def _never_ending_task(client: httpx.AsyncClient, url: str, token: str) -> str:
    """A task that waits for its result from outside: it runs until its ttl."""
    reply = await client.post(
        url,
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "browser_pick", "arguments": {}, "_meta": META},
        },
        headers=_headers(token, "tools/call", "browser_pick"),
    )
    task_id: str = _body(reply.text)["result"]["taskId"]
    return task_id


def _listen(ids: list[Any], request_id: int, meta: dict[str, Any] = META) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "subscriptions/listen",
        "params": {"notifications": {"taskIds": ids}, "_meta": meta},
    }


@asynccontextmanager
async def _opened(
    client: httpx.AsyncClient, url: str, token: str, ids: list[Any], request_id: int, **kw: Any
) -> AsyncIterator[dict[str, Any]]:
    """A listen stream held open (read) while the body runs; yields its first message: the ack,
    or the error that refused it."""
    request = client.build_request(
        "POST", url, json=_listen(ids, request_id, **kw), headers=_headers(token, "subscriptions/listen")
    )
    response = await client.send(request, stream=True)
    try:
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            yield json.loads(await response.aread())
            return
        async with aclosing(response.aiter_lines()) as lines:  # type: ignore[type-var]
            async for line in lines:
                if line.startswith("data:"):
                    yield json.loads(line[len("data:") :])  # the stream stays open meanwhile
                    return
        raise AssertionError("the listen stream ended without a message")
    finally:
        await response.aclose()


def _acked(message: dict[str, Any]) -> list[str] | None:
    """The taskIds an ack honors; None if the message is not an ack (a refusal)."""
    if message.get("method") != "notifications/subscriptions/acknowledged":
        return None
    ids: list[str] = message["params"]["notifications"].get("taskIds", [])
    return ids


def _client() -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=0)
    return httpx.AsyncClient(timeout=30, limits=limits)


async def _hold(
    client: httpx.AsyncClient,
    url: str,
    token: str,
    ids: list[str],
    request_id: int,
    answers: list[dict[str, Any]],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    async with _opened(client, url, token, ids, request_id) as first:
        answers.append(first)
        task_status.started()
        await trio.sleep_forever()


async def test_one_principal_holding_task_listen_streams_does_not_lock_another_out(url: str) -> None:
    """At most MAX_STREAMS_PER_PRINCIPAL task listen streams per principal: alice's next is
    refused (the SDK's "Subscription limit reached"), while bob's is acked and honored."""
    tries = 4 * MAX_STREAMS_PER_PRINCIPAL
    with trio.fail_after(LIMIT):
        async with _client() as client, trio.open_nursery() as nursery:
            mine = await _never_ending_task(client, url, "tok-alice")
            bobs = await _never_ending_task(client, url, "tok-bob")
            answers: list[dict[str, Any]] = []
            for n in range(tries):
                await nursery.start(_hold, client, url, "tok-alice", [mine], 100 + n, answers)
                if _acked(answers[-1]) is None:
                    break
            acked = [a for a in answers if _acked(a) is not None]
            assert len(acked) == MAX_STREAMS_PER_PRINCIPAL, f"alice held {len(acked)} of {tries} tries"
            assert answers[-1]["error"]["message"] == "Subscription limit reached"
            async with _opened(client, url, "tok-bob", [bobs], 9999) as first:
                assert _acked(first) == [bobs]
            nursery.cancel_scope.cancel()


async def test_a_principals_listen_streams_watch_a_bounded_number_of_tasks(url: str) -> None:
    """Over all of one principal's open listen streams, at most MAX_WATCHED_PER_PRINCIPAL task
    ids are watched (each is a task of the server's reading the journal): the others are left
    out of the ack, as unknown ones are. Another principal's budget is its own."""
    with trio.fail_after(LIMIT):
        async with _client() as client, trio.open_nursery() as nursery:
            mine = [await _never_ending_task(client, url, "tok-alice") for _ in range(100)]
            bobs = await _never_ending_task(client, url, "tok-bob")
            answers: list[dict[str, Any]] = []
            for n in range(MAX_WATCHED_PER_PRINCIPAL // 100 + 2):
                await nursery.start(_hold, client, url, "tok-alice", mine, 200 + n, answers)
            honored = [_acked(a) for a in answers]
            assert all(ids is not None for ids in honored), answers
            watched = sum(len(ids or ()) for ids in honored)
            assert watched == MAX_WATCHED_PER_PRINCIPAL, f"alice's streams watch {watched} tasks"
            async with _opened(client, url, "tok-bob", [bobs], 9998) as first:
                assert _acked(first) == [bobs]
            nursery.cancel_scope.cancel()


async def test_a_dropped_listen_stream_gives_its_slot_back(url: str) -> None:
    """A client that drops its streams mid-stream (on a task that never ends) frees them: it
    may open and drop many more than its bound, one after another."""
    with trio.fail_after(LIMIT):
        async with _client() as client:
            mine = await _never_ending_task(client, url, "tok-alice")
            for n in range(2 * MAX_STREAMS_PER_PRINCIPAL + 5):
                async with _opened(client, url, "tok-alice", [mine], 300 + n) as first:
                    assert _acked(first) == [mine], first


async def test_hostile_task_ids_in_a_listen_change_nothing(url: str) -> None:
    """Another principal's ids, megabyte ids, duplicates: not honored (or honored once), the
    stream ends at once when nothing is left to watch; non-string ids and more than 100 are
    -32602; a listen from a client that did not declare the extension is -32021."""
    with trio.fail_after(LIMIT):
        async with _client() as client:
            bobs = [await _never_ending_task(client, url, "tok-bob") for _ in range(3)]
            mine = await _never_ending_task(client, url, "tok-alice")
            # bob's ids (asked for 100 times over), from alice: nothing honored, the stream ends
            async with _opened(client, url, "tok-alice", bobs * 33 + [mine], 1) as first:
                assert _acked(first) == [mine]
            async with _opened(client, url, "tok-alice", [*bobs, "x" * 1_000_000, mine, mine], 2) as first:
                assert _acked(first) == [mine]
            reply = await client.post(
                url, json=_listen(bobs, 3), headers=_headers("tok-alice", "subscriptions/listen")
            )
            messages = [json.loads(line[5:]) for line in reply.text.splitlines() if line.startswith("data:")]
            assert _acked(messages[0]) == []
            assert messages[-1]["id"] == 3  # ended at once: nothing to watch
            assert "result" in messages[-1]
            for ids in ([1, 2], [{"a": 1}], [None], "dc_x", ["a"] * 101):
                reply = await client.post(
                    url, json=_listen(ids, 4), headers=_headers("tok-alice", "subscriptions/listen")
                )
                assert _body(reply.text)["error"]["code"] == -32602, (ids, reply.text)
            reply = await client.post(
                url,
                json=_listen([mine], 5, PLAIN_META),
                headers=_headers("tok-alice", "subscriptions/listen"),
            )
            assert _body(reply.text)["error"]["code"] == -32021
