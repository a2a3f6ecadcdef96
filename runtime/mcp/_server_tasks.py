"""MCP Tasks served (SEP-2663, the `io.modelcontextprotocol/tasks` extension): a tool call made a
task is a detached call of the runtime (`Calls.detach`), and the task methods are its handle.

    tools/call      a tool with task support (`execution.taskSupport`: the tool option `task`, or
                    `requires_approval`), from a request whose client declared the extension
                    (per request in `_meta` clientCapabilities, 2026-07-28): detached for the
                    request's principal, answered at once with a flat CreateTaskResult
                    (`resultType: "task"`, taskId, status, createdAt, lastUpdatedAt, ttlMs,
                    pollIntervalMs) once the call is journaled. A call that ends pending
                    (`ToolPending`: an approval no one could give in the request) is its task
                    in input_required. A "required" tool called by a client without the
                    extension: -32021 naming it; an "optional" one runs as a plain call.
    tasks/get       the DetailedTask: status, and inlined the tool's result (completed; a tool
                    error is completed with `isError`), the error (failed: the runtime could
                    not run it, JSON-RPC shape), or the questions (input_required: an approval,
                    the tool's `ctx.elicit` / `sample` / `list_roots`, each open one under its
                    key: the key the tool gave it, else one made from what it asks) as
                    `inputRequests`. A call whose result comes from outside (`ctx.defer`) asks
                    the client nothing: it is `working`, its statusMessage says what it waits for.
    tasks/update    `inputResponses` answer those questions (`DetachedCall.answer(..., key=)`;
                    an approval's accept approves it, decline denies it); keys that match no
                    open question are ignored, and answering some of several leaves the others
                    open (the task stays input_required). Acked empty; what follows is seen on
                    the next tasks/get.
    tasks/cancel    `DetachedCall.cancel` (idempotent: a finished task is acked the same).
    tasks/list, tasks/result: removed by SEP-2663 (-32601).
    subscriptions/listen with `notifications.taskIds` (`TaskListen`): a `notifications/tasks`
                    (the DetailedTask tasks/get would answer, stamped with the stream's
                    subscription id) for each task of the list that is the request's principal's:
                    its status now, then each time its status (or the set of its open questions)
                    changes, until it ends. The ack's `taskIds` are those honored (an unknown or
                    another principal's id is left out, as tasks/get answers it "no task"); a
                    client that did not declare the extension gets -32021. What the stream
                    sends is read from the journal by the stream's own tasks: a slow or gone
                    client never holds up a task, and the stream ends (gracefully) once every
                    task it watched ended, unless it also listens for list changes.
                    Bounded per principal (the request's verified token's, else its client's
                    address): at most `max_streams_per_principal` such streams open at once
                    (-32603 "Subscription limit reached" past it, as at the server's
                    `max_streams`), and at most `max_watched_per_principal` task ids watched
                    over all of them (an id past that is left out of the ack, as an unknown
                    one: its client polls it). Each watched id is a task of the server's
                    reading the journal at every change and poll interval: one tenant's
                    thousand streams of 100 ids each took the server's whole CPU.

Tasks are the principal's: an id that is not the request's principal's (its verified token's)
is answered as an unknown one (-32602), never "not yours". Anonymous requests share the
anonymous principal: there, the task id (random, 128 bits) is what lets one read it.
Everything lives in the runtime's journal, so a task outlives the request, the session, and on
a shared store (SQLite, Redis) the process. Served at 2026-07-28 only: the handshake era's tasks
(2025-11-25's core, a different shape) are not served and its calls run as plain calls.
"""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any

import mcp_types as types
import pydantic
import trio
from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.server.subscriptions import SUBSCRIPTION_ID_META_KEY, ServerEvent, SubscriptionBus
from mcp.shared.subscriptions import event_matches, event_to_notification
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, MISSING_REQUIRED_CLIENT_CAPABILITY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..engine import DetachedState, DetachedStatus
from ..exceptions import CallNotFound, CallStateError, ToolUnavailable
from ..messages import FailureKind, ToolCall, ToolFailure, ToolResult
from ..tools import Answer, CallContext, Elicitation, RootsRequest, Sampling
from ._asking import answer_of, elicit_params, roots_of, sampled_of, sampling_params, with_defaults

__all__ = [
    "TASKS",
    "TaskIdParams",
    "TaskListen",
    "TaskStart",
    "TaskStarts",
    "TaskUpdateParams",
    "created",
    "declared",
    "detailed",
    "input_requests",
    "missing_tasks",
    "not_found",
    "responses",
]

log = logging.getLogger("runtime.mcp")

TASKS = "io.modelcontextprotocol/tasks"
CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
HEADER_MISMATCH = -32020
MAX_TASK_ID = 256  # characters: a longer taskId names no task of ours (they are ~35)
MAX_LISTENED_TASKS = 100  # task ids one subscriptions/listen may ask for
MAX_STREAMS_PER_PRINCIPAL = 32  # task listen streams one principal holds open at once
MAX_WATCHED_PER_PRINCIPAL = 256  # task ids one principal's open listen streams watch together
_PROTOCOL_FAILURES = frozenset({FailureKind.UNAVAILABLE, FailureKind.OVERLOADED, FailureKind.UNKNOWN_TOOL})


class TaskStarts(ToolUnavailable):
    """The round ends where the tool calls `ctx.background()`: the server makes the call a task.

    Not a `CannotAsk`, as the input-required round's end is not: the tool stops here."""


class TaskStart:
    """A served call of a `task_from="background"` tool, from a client that takes tasks: its
    `ctx.background()` ends the call in the request, and the server then detaches it."""

    def __init__(self, call: ToolCall) -> None:
        self._call = call
        self.started = False

    async def reached(self, ctx: CallContext) -> None:
        if ctx.call_id != self._call.id or ctx.tool_name != self._call.name:
            return  # a call the tool made: not the one served
        self.started = True
        raise TaskStarts("its task starts here: the call runs again as a detached call")


class TaskIdParams(types.RequestParams):
    """`tasks/get`, `tasks/cancel`."""

    task_id: str


class TaskUpdateParams(types.RequestParams):
    """`tasks/update`."""

    task_id: str
    input_responses: dict[str, Any] = pydantic.Field(default_factory=dict)


def declared(session: Any, meta: Any) -> bool:
    """Whether the request's client declared the tasks extension: in the request's `_meta`
    clientCapabilities (2026-07-28), or in its session's capabilities."""
    if getattr(session, "protocol_version", None) not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = _meta_value(meta, CLIENT_CAPABILITIES)
    if isinstance(capabilities, Mapping):
        extensions = capabilities.get("extensions")
        if isinstance(extensions, Mapping) and TASKS in extensions:
            return True
    own = getattr(session, "client_capabilities", None)
    extensions = getattr(own, "extensions", None) if own is not None else None
    return isinstance(extensions, Mapping) and TASKS in extensions


def _meta_value(meta: Any, key: str) -> Any:
    if meta is None:
        return None
    if isinstance(meta, Mapping):
        return meta.get(key)
    value = getattr(meta, "model_extra", None) or {}
    if key in value:
        return value[key]
    try:
        return meta.model_dump(by_alias=True).get(key)
    except Exception:  # pragma: no cover - not a model
        return None


def missing_tasks(what: str) -> MCPError:
    """-32021 for a client that did not declare the tasks extension `what` needs."""
    return MCPError(
        code=MISSING_REQUIRED_CLIENT_CAPABILITY,
        message=f"{what} needs the MCP client to declare the {TASKS} extension",
        data={"requiredCapabilities": {"extensions": {TASKS: {}}}},
    )


def not_found(task_id: str) -> MCPError:
    """The one answer for an id that is unknown, expired, or another principal's."""
    return MCPError(code=INVALID_PARAMS, message=f"no task {task_id!r}", data={"taskId": task_id})


def check_name_header(request: Any, task_id: str) -> None:
    """SEP-2663: a tasks/* request's `Mcp-Name` header, when sent, is its taskId (-32020 if not)."""
    headers = getattr(request, "headers", None)
    if headers is None:
        return
    name = headers.get("mcp-name")
    if name is not None and name.strip() != task_id:
        raise MCPError(code=HEADER_MISMATCH, message="Mcp-Name header does not match params.taskId")


def _iso(t: float) -> str:
    return (
        datetime.datetime.fromtimestamp(t, datetime.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else max(1, round(seconds * 1000))


def _fields(status: DetachedStatus) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "taskId": status.id,
        "status": str(status.state),
        "createdAt": _iso(status.created_at),
        "lastUpdatedAt": _iso(status.updated_at),
        "ttlMs": _ms(status.ttl),
        "pollIntervalMs": _ms(status.poll_interval),
    }
    if status.message:
        fields["statusMessage"] = status.message
    return fields


def created(status: DetachedStatus) -> dict[str, Any]:
    """The CreateTaskResult of a call made a task: flat, no result, no questions."""
    return {"resultType": "task", **_fields(status)}


def detailed(status: DetachedStatus, render: Callable[[ToolResult], types.CallToolResult]) -> dict[str, Any]:
    """The DetailedTask `tasks/get` answers: the task, and its result, error or questions."""
    task = {"resultType": "complete", **_fields(status)}
    result = status.result
    if status.state is DetachedState.INPUT_REQUIRED:
        asked = input_requests(status)
        if asked:
            task["inputRequests"] = asked
        else:  # its result comes from outside: nothing a client can answer, it works on for it
            task["status"] = "working"
    elif result is not None and status.state is not DetachedState.CANCELLED:
        if isinstance(result, ToolFailure) and result.kind in _PROTOCOL_FAILURES:
            task["status"] = "failed"  # the runtime could not run it: a protocol-level error
            task["error"] = {"code": types.INTERNAL_ERROR, "message": result.content}
        else:  # a result, or the tool's own error (completed, isError)
            task["status"] = "completed"
            task["result"] = render(result).model_dump(by_alias=True, mode="json", exclude_none=True)
    return task


def input_requests(status: DetachedStatus) -> dict[str, Any]:
    """The questions an input_required task waits on, as SEP-2322 input requests by key (every
    open one: a tool that asks several at once is waiting on each)."""
    found: dict[str, Any] = {}
    for key, question in status.questions.items():
        request: types.InputRequest
        if isinstance(question, Elicitation):
            request = types.ElicitRequest(params=elicit_params(question))
        elif isinstance(question, Sampling):
            request = types.CreateMessageRequest(params=sampling_params(question))
        elif isinstance(question, RootsRequest):
            request = types.ListRootsRequest()
        else:  # pragma: no cover - no other kind of question
            continue
        found[key] = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    return found


def responses(status: DetachedStatus, given: Mapping[str, Any]) -> dict[str, Any]:
    """The answers `tasks/update` gives the task's open questions, by key (a key that matches no
    open question is left out: answered already, or never asked).

    Raises:
        MCPError: INVALID_PARAMS, a response that is not an answer to its question (none of
            `given` is applied then).
    """
    if status.state is not DetachedState.INPUT_REQUIRED:
        return {}
    answers: dict[str, Any] = {}
    for key, question in status.questions.items():
        if key not in given:
            continue
        response = given[key]
        try:
            if isinstance(question, Elicitation):
                answer = answer_of(types.ElicitResult.model_validate(response))
                if answer.action == "accept" and not question.approval:
                    answer = Answer(
                        action="accept", content=with_defaults(answer.content or {}, question.schema)
                    )
                answers[key] = answer
            elif isinstance(question, Sampling):
                answers[key] = sampled_of(types.CreateMessageResult.model_validate(response))
            elif isinstance(question, RootsRequest):
                answers[key] = roots_of(types.ListRootsResult.model_validate(response))
        except pydantic.ValidationError as exc:
            raise MCPError(
                code=INVALID_PARAMS, message=f"inputResponses[{key!r}] does not answer its request: {exc}"
            ) from None
    return answers


def quietly_refused(exc: Exception) -> bool:
    """A verb that lost a race (the task moved on): acked, the next tasks/get tells."""
    return isinstance(exc, CallStateError)


def lookup_failed(exc: Exception) -> bool:
    return isinstance(exc, CallNotFound | ValueError)


class _Notification(pydantic.BaseModel):
    """A notification the SDK has no type for (`notifications/tasks`), sent as it is."""

    method: str
    params: dict[str, Any]


def task_notification(task: Mapping[str, Any], meta: Mapping[str, Any]) -> Any:
    """`notifications/tasks`: the DetailedTask (no `resultType`: not a result), stamped `meta`."""
    params = {k: v for k, v in task.items() if k != "resultType"}
    params["_meta"] = dict(meta)
    return _Notification(method="notifications/tasks", params=params)


def _mark(task: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a notification is sent for: the status, and which questions are open."""
    asked = task.get("inputRequests")
    return (task.get("status"), tuple(sorted(asked)) if isinstance(asked, Mapping) else ())


class TaskListen:
    """`subscriptions/listen`: the SDK's handler for the list-changed kinds, and SEP-2663's
    `taskIds` (see the module's docstring) served here, on the same stream.

    Args:
        bus: the subscription bus list changes are published on (the SDK handler's).
        plain: the SDK's handler, which serves a listen that asks for no task.
        caller_of: the request's calls surface (its principal's view), or raises MCPError.
        render: the DetailedTask of a status (as tasks/get answers it).
        owner_of: whose budget a listen request spends (its principal, or its client's address).
        max_streams: task listen streams open at once, all principals together.
        max_streams_per_principal: those one principal holds.
        max_watched_per_principal: task ids one principal's open streams watch together.
    """

    def __init__(
        self,
        bus: SubscriptionBus,
        plain: Callable[[ServerRequestContext[Any], types.SubscriptionsListenRequestParams], Awaitable[Any]],
        caller_of: Callable[[ServerRequestContext[Any], types.SubscriptionsListenRequestParams], Any],
        render: Callable[[DetachedStatus], dict[str, Any]],
        *,
        owner_of: Callable[[ServerRequestContext[Any]], Hashable] = lambda ctx: None,
        max_streams: int = 1024,
        max_streams_per_principal: int = MAX_STREAMS_PER_PRINCIPAL,
        max_watched_per_principal: int = MAX_WATCHED_PER_PRINCIPAL,
        max_buffered: int = 256,
    ) -> None:
        self._bus = bus
        self._plain = plain
        self._caller_of = caller_of
        self._render = render
        self._owner_of = owner_of
        self._max_streams = max_streams
        self._max_own_streams = max_streams_per_principal
        self._max_watched = max_watched_per_principal
        self._max_buffered = max_buffered
        self._streams = 0
        # owner -> [its open task listen streams, the task ids they watch]
        self._held: dict[Hashable, list[int]] = {}

    async def __call__(
        self, ctx: ServerRequestContext[Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        asked = params.notifications
        wanted = (asked.model_extra or {}).get("taskIds")
        if wanted is None:
            result: types.SubscriptionsListenResult = await self._plain(ctx, params)
            return result
        if not declared(ctx.session, params.meta):
            raise missing_tasks("task status notifications (subscriptions/listen taskIds)")
        if not isinstance(wanted, list) or not all(isinstance(t, str) for t in wanted):
            raise MCPError(INVALID_PARAMS, "notifications.taskIds must be a list of task ids")
        if len(wanted) > MAX_LISTENED_TASKS:
            raise MCPError(INVALID_PARAMS, f"notifications.taskIds: at most {MAX_LISTENED_TASKS} tasks")
        subscription_id = ctx.request_id
        if subscription_id is None:
            raise MCPError(INVALID_REQUEST, "subscriptions/listen requires a request id")
        caller = self._caller_of(ctx, params)
        owner = self._owner_of(ctx)
        held = self._held.setdefault(owner, [0, 0])
        if self._streams >= self._max_streams or held[0] >= self._max_own_streams:
            if held == [0, 0]:
                del self._held[owner]
            raise MCPError(INTERNAL_ERROR, "Subscription limit reached")
        self._streams += 1  # taken now: the lookups below wait, other listens come meanwhile
        held[0] += 1
        honored: list[str] = []
        try:
            for task_id in dict.fromkeys(wanted):
                if held[1] >= self._max_watched:
                    break  # this principal watches enough already: the rest are polled
                if 0 < len(task_id) <= MAX_TASK_ID and await _exists(caller, task_id):
                    honored.append(task_id)
                    held[1] += 1
            return await self._stream(ctx, caller, asked, honored, subscription_id)
        finally:
            self._streams -= 1
            held[0] -= 1
            held[1] -= len(honored)
            if held == [0, 0]:
                self._held.pop(owner, None)

    async def _stream(
        self,
        ctx: ServerRequestContext[Any],
        caller: Any,
        asked: types.SubscriptionFilter,
        honored: list[str],
        subscription_id: Any,
    ) -> types.SubscriptionsListenResult:
        uris = frozenset(asked.resource_subscriptions or ())
        kinds = types.SubscriptionFilter(
            tools_list_changed=True if asked.tools_list_changed else None,
            prompts_list_changed=True if asked.prompts_list_changed else None,
            resources_list_changed=True if asked.resources_list_changed else None,
            resource_subscriptions=sorted(uris) or None,
        )
        lists = any(v is not None for v in kinds.model_dump().values())
        ack = types.SubscriptionFilter.model_validate({**kinds.model_dump(by_alias=True), "taskIds": honored})
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: subscription_id}
        send, receive = trio.open_memory_channel[Any](self._max_buffered)

        def put(notification: Any) -> None:
            try:
                send.send_nowait(notification)
            except trio.WouldBlock:  # a client that stopped reading: the stream ends (it re-listens)
                log.warning("listen stream %r backlog full; ending the stream", subscription_id)
                send.close()
            except trio.ClosedResourceError:
                pass

        def deliver(event: ServerEvent) -> None:
            if event_matches(kinds, uris, event):
                put(event_to_notification(event, meta))

        async def watch(task_id: str) -> None:
            last: tuple[Any, ...] | None = None
            try:
                async for status in caller.detached(task_id).watch():
                    task = self._render(status)
                    mark = _mark(task)
                    if mark != last:
                        last = mark
                        put(task_notification(task, meta))
            except Exception as exc:  # forgotten (expired), the store failing: nothing more to tell
                log.debug("task %s: status notifications end: %s", task_id, exc)

        unsubscribe = self._bus.subscribe(deliver) if lists else None
        try:
            async with trio.open_nursery() as nursery:
                await ctx.session.send_notification(
                    types.SubscriptionsAcknowledgedNotification(
                        params=types.SubscriptionsAcknowledgedNotificationParams(
                            notifications=ack, _meta=meta
                        )
                    ),
                    related_request_id=subscription_id,
                )

                async def watch_all() -> None:
                    async with trio.open_nursery() as watchers:
                        for task_id in honored:
                            watchers.start_soon(watch, task_id)
                    if not lists:
                        send.close()  # every task it watched ended: the stream ends gracefully

                nursery.start_soon(watch_all)
                async for notification in receive:
                    await ctx.session.send_notification(notification, related_request_id=subscription_id)
                nursery.cancel_scope.cancel()
        finally:
            if unsubscribe is not None:
                unsubscribe()
            send.close()
            receive.close()
        return types.SubscriptionsListenResult(_meta=meta)


async def _exists(caller: Any, task_id: str) -> bool:
    try:
        await caller.detached(task_id).status()
    except Exception as exc:
        if lookup_failed(exc):
            return False
        raise
    return True


def dumps(value: Any) -> str:  # pragma: no cover - debugging aid
    return json.dumps(value, sort_keys=True)
