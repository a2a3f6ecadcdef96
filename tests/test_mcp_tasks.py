"""MCP Tasks served (SEP-2663, `io.modelcontextprotocol/tasks`), against a real server process
(tests/mcp_servers/tasks.py: `serve_http` with a token per principal) over the stateless
2026-07-28 wire, as a client of the extension speaks it: every transition and exit of a task
(a detached call): created, working, completed, cancelled, input_required then answered,
an approval that becomes a task, an unknown id and another principal's id (the same answer).

The 15-minute tool behind a client that gives up after 60 s is in tests/test_mcp_tasks_clock.py
(in-process, on virtual time).
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from served import served

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "tests" / "mcp_servers" / "tasks.py"
VERSION = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
LIMIT = 60  # seconds a test may take on a loaded machine
_ids = itertools.count(1)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with served(SERVER) as address:
        yield address


class RpcError(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error.get("message"))
        self.message = str(error.get("message"))
        self.code = error.get("code")
        self.data = error.get("data")


async def rpc(
    url: str, method: str, params: dict[str, Any], *, token: str = "tok-alice", tasks: bool = True
) -> dict[str, Any]:
    """One request on the stateless wire: its result, or RpcError."""
    capabilities: dict[str, Any] = {"elicitation": {}}
    if tasks:
        capabilities["extensions"] = {TASKS: {}}
    meta = {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "0"},
    }
    body = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": {**params, "_meta": meta}}
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": method,
    }
    name = params.get("name", params.get("taskId"))
    if name is not None and str(name).isprintable():
        headers["Mcp-Name"] = str(name)
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(url, json=body, headers=headers)
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        events = [
            json.loads(line[5:])
            for line in response.text.splitlines()
            if line.startswith("data:") and line[5:].strip()
        ]
        message = next(e for e in events if e.get("id") == body["id"])
    else:
        message = response.json()
    if "error" in message:
        raise RpcError(message["error"])
    result: dict[str, Any] = message["result"]
    return result


async def until(url: str, task_id: str, *states: str, token: str = "tok-alice") -> dict[str, Any]:
    while True:
        task = await rpc(url, "tasks/get", {"taskId": task_id}, token=token)
        if task["status"] in states:
            return task
        await trio.sleep(0.05)


async def test_a_task_tool_is_listed_with_its_task_support(url: str) -> None:
    with trio.fail_after(LIMIT):
        listed = await rpc(url, "tools/list", {})
    # 2026-07-28's Tool has no `execution`: the extension's entry in the tool's `_meta` says it
    support = {t["name"]: t["_meta"][TASKS]["taskSupport"] for t in listed["tools"]}
    assert support == {
        "report": "optional",
        "confirm_delete": "required",
        "pay": "optional",
        "slow_write": "required",
        "transfer": "required",
        "two_names": "optional",
        "onboard": "required",
        "browser_pick": "required",
    }


async def test_a_call_becomes_a_task_that_works_then_completes_with_its_result_inlined(url: str) -> None:
    with trio.fail_after(LIMIT):
        created = await rpc(url, "tools/call", {"name": "report", "arguments": {"seconds": 0.5}})
        assert created["resultType"] == "task"
        assert created["status"] == "working"
        assert {"result", "error", "inputRequests", "task", "ttl", "pollInterval"}.isdisjoint(created)
        assert isinstance(created["ttlMs"], int)
        assert isinstance(created["pollIntervalMs"], int)
        task_id = created["taskId"]
        working = await rpc(url, "tasks/get", {"taskId": task_id})  # at once: it is journaled
        assert working["status"] == "working"
        assert "result" not in working
        done = await until(url, task_id, "completed", "failed", "cancelled")
    assert done["status"] == "completed"
    assert done["resultType"] == "complete"
    assert done["result"]["content"] == [{"type": "text", "text": "report after 0.5 s"}]


async def test_a_cancelled_task_settles_cancelled_and_a_second_cancel_is_the_same_ack(url: str) -> None:
    with trio.fail_after(LIMIT):
        created = await rpc(url, "tools/call", {"name": "report", "arguments": {"seconds": 600}})
        task_id = created["taskId"]
        ack = await rpc(url, "tasks/cancel", {"taskId": task_id})
        assert ack == {"resultType": "complete", "_meta": ack.get("_meta")} or set(ack) <= {
            "resultType",
            "_meta",
        }
        done = await until(url, task_id, "completed", "failed", "cancelled")
        assert done["status"] == "cancelled"
        again = await rpc(url, "tasks/cancel", {"taskId": task_id})  # idempotent
        assert set(again) <= {"resultType", "_meta"}


async def test_a_task_asks_goes_input_required_and_resumes_on_update(url: str) -> None:
    with trio.fail_after(LIMIT):
        created = await rpc(url, "tools/call", {"name": "confirm_delete", "arguments": {"filename": "a.txt"}})
        task_id = created["taskId"]
        waiting = await until(url, task_id, "input_required")
        (key,) = waiting["inputRequests"]
        assert key == "confirm"
        assert waiting["inputRequests"][key]["method"] == "elicitation/create"
        ignored = await rpc(url, "tasks/update", {"taskId": task_id, "inputResponses": {"other": {}}})
        assert set(ignored) <= {"resultType", "_meta"}  # a key for no question: acked, nothing changes
        assert (await rpc(url, "tasks/get", {"taskId": task_id}))["status"] == "input_required"
        answer = {"action": "accept", "content": {"confirm": True}}
        await rpc(url, "tasks/update", {"taskId": task_id, "inputResponses": {key: answer}})
        done = await until(url, task_id, "completed", "failed", "cancelled")
    assert done["result"]["content"][0]["text"] == "deleted a.txt"


async def test_questions_asked_at_once_are_all_input_requests_and_each_is_answered_on_its_own(
    url: str,
) -> None:
    with trio.fail_after(LIMIT):
        created = await rpc(url, "tools/call", {"name": "two_names", "arguments": {}})
        task_id = created["taskId"]
        while True:  # both are open once its two branches have asked
            waiting = await until(url, task_id, "input_required")
            if len(waiting["inputRequests"]) == 2:
                break
        assert sorted(waiting["inputRequests"]) == ["first", "second"]
        first = {"action": "accept", "content": {"name": "Ann"}}
        await rpc(url, "tasks/update", {"taskId": task_id, "inputResponses": {"first": first}})
        partly = await rpc(url, "tasks/get", {"taskId": task_id})
        assert partly["status"] == "input_required"  # the other is still open
        assert list(partly["inputRequests"]) == ["second"]
        again = {"first": {"action": "accept", "content": {"name": "Zed"}}}  # answered already: ignored
        await rpc(url, "tasks/update", {"taskId": task_id, "inputResponses": again})
        second = {"action": "accept", "content": {"name": "Bo"}}
        await rpc(url, "tasks/update", {"taskId": task_id, "inputResponses": {"second": second}})
        done = await until(url, task_id, "completed", "failed", "cancelled")
    assert done["result"]["content"][0]["text"] == "first=Ann second=Bo"


async def test_questions_before_ctx_background_are_rounds_of_the_request_then_it_is_a_task(
    url: str, tmp_path: Path
) -> None:
    path = tmp_path / "welcomed.txt"
    arguments = {"path": str(path)}
    with trio.fail_after(LIMIT):
        first = await rpc(url, "tools/call", {"name": "onboard", "arguments": arguments})
        assert first["resultType"] == "input_required"  # no task yet: a round of the request
        assert "taskId" not in first
        assert list(first["inputRequests"]) == ["user_name"]
        answer = {"action": "accept", "content": {"name": "Alice"}}
        second = await rpc(
            url,
            "tools/call",
            {
                "name": "onboard",
                "arguments": arguments,
                "inputResponses": {"user_name": answer},
                "requestState": first["requestState"],
            },
        )
        assert second["resultType"] == "task"
        assert {"requestState", "inputRequests", "result"}.isdisjoint(second)
        done = await until(url, second["taskId"], "completed", "failed", "cancelled")
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == "welcome, Alice"  # the answer of the request's round
    assert path.read_text() == "Alice\n"  # what follows ctx.background() ran once, in the task


async def test_a_call_that_needs_an_approval_is_a_task_waiting_for_it(url: str) -> None:
    with trio.fail_after(LIMIT):
        created = await rpc(url, "tools/call", {"name": "pay", "arguments": {"amount": 5}})
        task_id = created["taskId"]
        waiting = await until(url, task_id, "input_required")
        assert list(waiting["inputRequests"]) == ["approval"]
        accept = {"action": "accept", "content": {}}
        await rpc(url, "tasks/update", {"taskId": task_id, "inputResponses": {"approval": accept}})
        done = await until(url, task_id, "completed", "failed", "cancelled")
    assert done["result"]["content"][0]["text"] == "paid 5"


async def test_a_denied_approval_completes_as_the_tools_error(url: str) -> None:
    with trio.fail_after(LIMIT):
        created = await rpc(url, "tools/call", {"name": "pay", "arguments": {"amount": 6}})
        task_id = created["taskId"]
        await until(url, task_id, "input_required")
        decline = {"action": "decline"}
        await rpc(url, "tasks/update", {"taskId": task_id, "inputResponses": {"approval": decline}})
        done = await until(url, task_id, "completed", "failed", "cancelled")
    assert done["status"] == "completed"
    assert done["result"]["isError"] is True


async def test_an_unknown_id_and_another_principals_id_get_the_same_answer(url: str) -> None:
    with trio.fail_after(LIMIT):
        created = await rpc(url, "tools/call", {"name": "report", "arguments": {"seconds": 600}})
        task_id = created["taskId"]
        answers = []
        for who, asked in (
            ("tok-bob", task_id),
            ("tok-alice", "dc_" + "0" * 32),
            ("tok-alice", "bad\u0000id"),
        ):
            for method in ("tasks/get", "tasks/cancel"):
                with pytest.raises(RpcError) as refused:
                    await rpc(url, method, {"taskId": asked}, token=who)
                answers.append((refused.value.code, refused.value.message.replace(repr(asked), "ID")))
        assert set(answers) == {(-32602, "no task ID")}
        # bob's cancel changed nothing: alice's task still works
        assert (await rpc(url, "tasks/get", {"taskId": task_id}))["status"] == "working"
        await rpc(url, "tasks/cancel", {"taskId": task_id})


async def test_without_the_extension_tasks_are_refused_and_calls_run_plain(url: str) -> None:
    with trio.fail_after(LIMIT):
        plain = await rpc(url, "tools/call", {"name": "report", "arguments": {"seconds": 0}}, tasks=False)
        assert plain.get("resultType") == "complete"
        assert "taskId" not in plain
        with pytest.raises(RpcError) as required:
            await rpc(
                url, "tools/call", {"name": "confirm_delete", "arguments": {"filename": "x"}}, tasks=False
            )
        assert required.value.code == -32021
        assert required.value.data == {"requiredCapabilities": {"extensions": {TASKS: {}}}}
        with pytest.raises(RpcError) as gated:
            await rpc(url, "tasks/get", {"taskId": "dc_x"}, tasks=False)
        assert gated.value.code == -32021
        for removed in ("tasks/list", "tasks/result"):
            with pytest.raises(RpcError) as missing:
                await rpc(url, removed, {"taskId": "dc_x"})
            assert missing.value.code == -32601


# -- status notifications (notifications/tasks on subscriptions/listen) ---------------------


def _request(
    method: str, params: dict[str, Any], *, token: str = "tok-alice", tasks: bool = True
) -> tuple[dict[str, Any], dict[str, str]]:
    capabilities: dict[str, Any] = {"elicitation": {}}
    if tasks:
        capabilities["extensions"] = {TASKS: {}}
    meta = {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "0"},
    }
    body = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": {**params, "_meta": meta}}
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": method,
    }
    return body, headers


async def listen(
    url: str,
    task_ids: list[str],
    into: trio.MemorySendChannel[dict[str, Any]],
    *,
    token: str = "tok-alice",
    tasks: bool = True,
) -> None:
    """A `subscriptions/listen` for `task_ids`: every frame of its stream into `into` (the
    final result, or error, too), until the server ends it."""
    body, headers = _request(
        "subscriptions/listen", {"notifications": {"taskIds": task_ids}}, token=token, tasks=tasks
    )
    async with (
        httpx.AsyncClient(timeout=httpx.Timeout(30, read=None)) as http,
        http.stream("POST", url, json=body, headers=headers) as response,
        into,
    ):
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            await into.send(json.loads(await response.aread()))
            return
        async for line in response.aiter_lines():
            if line.startswith("data:") and line[5:].strip():
                await into.send(json.loads(line[5:]))


async def test_a_listener_hears_each_status_of_its_task_until_it_ends(url: str) -> None:
    with trio.fail_after(LIMIT):
        created = await rpc(url, "tools/call", {"name": "confirm_delete", "arguments": {"filename": "n.txt"}})
        task_id = created["taskId"]
        await until(url, task_id, "input_required")
        send, frames = trio.open_memory_channel[dict[str, Any]](100)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(listen, url, [task_id, "dc_" + "0" * 32], send)
            ack = await frames.receive()
            assert ack["method"] == "notifications/subscriptions/acknowledged"
            assert ack["params"]["notifications"]["taskIds"] == [task_id]  # not the unknown one
            subscription = ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"]
            now = await frames.receive()
            assert now["method"] == "notifications/tasks"
            assert now["params"]["taskId"] == task_id
            assert now["params"]["status"] == "input_required"
            assert list(now["params"]["inputRequests"]) == ["confirm"]
            assert now["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == subscription
            await rpc(
                url,
                "tasks/update",
                {
                    "taskId": task_id,
                    "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": True}}},
                },
            )
            heard = [frame async for frame in frames]  # to the end of the stream
        notes = [f["params"] for f in heard if f.get("method") == "notifications/tasks"]
        assert [n["status"] for n in notes][-1] == "completed"
        assert {n["status"] for n in notes} <= {"working", "completed"}
        assert "result" in heard[-1]  # the stream ended gracefully once its task ended
        got = await rpc(url, "tasks/get", {"taskId": task_id})
        assert notes[-1]["result"] == got["result"]  # the DetailedTask tasks/get answers
        assert notes[-1]["result"]["content"][0]["text"] == "deleted n.txt"
        assert "resultType" not in notes[-1]


async def test_a_cancelled_task_is_heard_cancelled(url: str) -> None:
    with trio.fail_after(LIMIT):
        created = await rpc(url, "tools/call", {"name": "report", "arguments": {"seconds": 600}})
        task_id = created["taskId"]
        send, frames = trio.open_memory_channel[dict[str, Any]](100)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(listen, url, [task_id], send)
            assert (await frames.receive())["method"] == "notifications/subscriptions/acknowledged"
            assert (await frames.receive())["params"]["status"] == "working"
            await rpc(url, "tasks/cancel", {"taskId": task_id})
            heard = [frame async for frame in frames]
        assert [f["params"]["status"] for f in heard if f.get("method") == "notifications/tasks"] == [
            "cancelled"
        ]


async def test_another_principals_task_is_not_heard_and_without_the_extension_listening_is_refused(
    url: str,
) -> None:
    with trio.fail_after(LIMIT):
        created = await rpc(url, "tools/call", {"name": "report", "arguments": {"seconds": 600}})
        task_id = created["taskId"]
        send, frames = trio.open_memory_channel[dict[str, Any]](100)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(listen, url, [task_id], send, token="tok-bob"))
            heard = [frame async for frame in frames]
        # bob's stream: acked with no task, and ended at once (nothing to watch)
        assert heard[0]["params"]["notifications"]["taskIds"] == []
        assert not [f for f in heard if f.get("method") == "notifications/tasks"]
        send, frames = trio.open_memory_channel[dict[str, Any]](100)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(listen, url, [task_id], send, tasks=False))
            refused = [frame async for frame in frames]
        assert refused[-1]["error"]["code"] == -32021
        await rpc(url, "tasks/cancel", {"taskId": task_id})


async def test_a_task_whose_result_comes_from_outside_works_on_and_asks_the_client_nothing(url: str) -> None:
    with trio.fail_after(LIMIT):
        created = await rpc(url, "tools/call", {"name": "browser_pick", "arguments": {}})
        task_id = created["taskId"]
        for _ in range(LIMIT * 20):
            task = await rpc(url, "tasks/get", {"taskId": task_id})
            if "browser" in task.get("statusMessage", ""):
                break
            await trio.sleep(0.05)
        # input_required with no inputRequests would be a task no client can move on
        assert task["status"] == "working"
        assert "inputRequests" not in task
        assert "the browser asks the user for a file" in task["statusMessage"]
        await rpc(url, "tasks/cancel", {"taskId": task_id})
