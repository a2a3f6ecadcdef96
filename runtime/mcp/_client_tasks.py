"""MCP Tasks used as a client (SEP-2663, the `io.modelcontextprotocol/tasks` extension): a remote
tool call the server makes a task is followed here until it ends, as the one call it is.

    which calls     a remote tool whose listing says `taskSupport` "required" (every call), or
                    "optional" when the call runs detached here (`rt.detach`, a deferred call
                    approved): only those `tools/call` requests declare the extension (per request,
                    in `_meta` clientCapabilities, 2026-07-28); the others stay plain calls.
    the task        the server answers a CreateTaskResult (`resultType: "task"`); `tasks/get` is
                    polled until the task ends: 0.05 s after, then twice as long each time up to
                    its `pollIntervalMs` (kept within 0.05 s .. 30 s), as FastMCP's own client
                    does: a task that ends at once is not kept waiting a whole interval (a status
                    notification wakes the poll early, see below):
                    completed -> its inlined result (a tool error `isError`, as a plain call);
                    failed -> the server's error (ERROR); cancelled by the server -> UNAVAILABLE;
                    forgotten (the server no longer knows the id) -> UNAVAILABLE.
    questions       input_required: each `inputRequests` entry is asked through the call's own
                    asking flow (`ctx.elicit` / `ctx.sample` / `ctx.list_roots`: the runtime's
                    `on_elicit` handler, an `asking(...)` block, a detached call's journal) and
                    the answers go back in one `tasks/update`. No one to ask: the call fails
                    as a question no one can answer does (UNAVAILABLE) and the task is cancelled.
    cancel          our call cancelled (its caller, its deadline, `handle.cancel()`) sends
                    `tasks/cancel` (shielded, bounded) before the cancellation goes on: the remote
                    work stops with ours. Not when the connection is lost, nor when a detached
                    call's run is handed over (`ctx.handed_over`: the runtime shuts down, another
                    process took the call over): the task is followed again.
    connection      lost while a task is followed (`connection_lost`): `TaskCall.lost`, and the
                    call follows the same task id over the next connection (`RemoteServer`'s
                    `_follow_again`), never calling the tool again.
    notifications   while a task is followed over a 2026-07-28 session, a `subscriptions/listen`
                    for its id is open beside the poll: each `notifications/tasks` for it wakes
                    the poll at once (at most one tasks/get per 0.05 s). A notification is a hint:
                    what the call gets is what `tasks/get` answers then, never the payload. A
                    server that refuses the listen, or never notifies, is polled as before.
    odd answers     a status this client does not know (nor a string), or input_required with no
                    question it can answer, is an ERROR at once naming it; an absurd task id
                    (over `MAX_TASK_ID` characters, or not printable) is refused before it is
                    followed, and a task id is cut (`shown`) wherever a message repeats it.
    journaled       a detached call's task id is its checkpoint (`TASK_CHECKPOINT` in its
                    journal record; `ctx.resumed`): the run that recovers it in another process follows
                    that task (`journaled_task`) instead of calling the tool.

The polling is the call's: it is bounded by the call's deadline like any remote call.
"""

from __future__ import annotations

import contextlib
import logging
import math
import weakref
from collections.abc import AsyncIterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import mcp_types as types
import pydantic
import trio
from mcp import MCPError
from mcp.client.extension import ClaimContext, ClientExtension, NotificationBinding, ResultClaim
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CONNECTION_CLOSED, INVALID_PARAMS, INVALID_REQUEST
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..exceptions import CannotAsk, ToolUnavailable
from ..messages import echo
from ..tools import CallContext
from ._asking import sampling_of

__all__ = [
    "TASKS",
    "TASK_CHECKPOINT",
    "TaskCall",
    "TaskCreated",
    "TaskNotes",
    "TasksExtension",
    "cancel_task",
    "connection_lost",
    "declare_per_call",
    "journaled_task",
    "poll",
    "task_support",
    "tasking",
]

log = logging.getLogger("runtime.mcp")

TASKS = "io.modelcontextprotocol/tasks"
TASK_CHECKPOINT = "runtime.mcp.task"  # a detached call's checkpoint: {"server", "tool", "task"}
MIN_POLL = 0.05  # seconds: a server asking for a tighter poll is polled this often
MAX_POLL = 30.0  # seconds: nor is a task left unpolled longer, whatever the server says
DEFAULT_POLL = 1.0  # a server that gives no pollIntervalMs
CANCEL_TIMEOUT = 5.0  # seconds a `tasks/cancel` may take once our call is cancelled
_MAX_QUESTION_ROUNDS = 100  # a task that asks without end is given up
MAX_TASK_ID = 256  # characters: a server's task id longer than this is refused, not followed
_SHOWN_ID = 64  # characters of a task id a message repeats
_STATUSES = frozenset({"working", "input_required", "completed", "failed", "cancelled"})


class TaskCreated(types.Result):
    """A CreateTaskResult (flat, 2026-07-28): the task a `tools/call` became."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str = "working"
    status_message: str | None = None
    created_at: str | None = None
    last_updated_at: str | None = None
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class _TaskIdParams(types.RequestParams):
    task_id: str


class _TaskUpdateParams(types.RequestParams):
    task_id: str
    input_responses: dict[str, Any]


class _ListenParams(types.RequestParams):
    notifications: dict[str, Any]


class _Listen(types.Request[_ListenParams, Literal["subscriptions/listen"]]):
    method: Literal["subscriptions/listen"] = "subscriptions/listen"


class _TaskNote(pydantic.BaseModel):
    """A `notifications/tasks`: which task (the rest is not trusted: tasks/get tells)."""

    model_config = pydantic.ConfigDict(extra="allow")

    task_id: str = pydantic.Field(alias="taskId")


class TaskNotes:
    """The task status notifications one session hears: each wakes the poll of its task."""

    def __init__(self) -> None:
        self._wakes: dict[str, trio.Event] = {}

    def wake_of(self, task_id: str) -> trio.Event:
        """The event the next notification for `task_id` sets (a new one once it was set)."""
        wake = self._wakes.get(task_id)
        if wake is None or wake.is_set():
            wake = self._wakes[task_id] = trio.Event()
        return wake

    def forget(self, task_id: str) -> None:
        self._wakes.pop(task_id, None)

    async def heard(self, note: _TaskNote) -> None:
        wake = self._wakes.get(note.task_id)
        if wake is not None:
            wake.set()


_notes_of: weakref.WeakKeyDictionary[Any, TaskNotes] = weakref.WeakKeyDictionary()


class _GetTask(types.Request[_TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class _CancelTask(types.Request[_TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


class _UpdateTask(types.Request[_TaskUpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class _Raw(pydantic.BaseModel):
    """A task method's result as the server sent it (read as a dict)."""

    model_config = pydantic.ConfigDict(extra="allow")


async def _send(session: Any, request: types.Request[Any, Any]) -> dict[str, Any]:
    reply: _Raw = await session.send_request(request, _Raw)
    return reply.model_dump()


@dataclass
class TaskCall:
    """The runtime call a `tools/call` sent as a task belongs to (what the resolver asks with),
    and the task it became: `task_id` once the server made it one; `lost` when the connection
    went away while it was followed (it is followed again over the next connection, not
    cancelled)."""

    server: str
    tool: str
    ctx: CallContext | None
    task_id: str | None = None
    lost: bool = False


tasking: ContextVar[TaskCall | None] = ContextVar("runtime_mcp_tasking", default=None)
"""Set around a `tools/call` that may become a task: the extension is declared for it."""


def task_support(remote: types.Tool) -> str | None:
    """A listed tool's task support: "required", "optional", or None (never a task).

    2026-07-28's Tool has no `execution`: the extension's entry in its `_meta` says it."""
    meta = remote.meta or {}
    entry = meta.get(TASKS)
    support = entry.get("taskSupport") if isinstance(entry, Mapping) else None
    if support is None and remote.execution is not None:
        support = getattr(remote.execution, "task_support", None)
    return support if support in ("required", "optional") else None


def as_task(support: str | None, ctx: CallContext | None) -> bool:
    """Whether a call of a tool with `support` is sent as a task."""
    if support == "required":
        return True
    return support == "optional" and ctx is not None and ctx.detached_id is not None


class TasksExtension(ClientExtension):
    """The tasks extension of one SDK `Client`: its CreateTaskResult, followed to the end; the
    `notifications/tasks` its session hears (`notes`: give `declare_per_call` the session)."""

    identifier = TASKS

    def __init__(self) -> None:
        self.notes = TaskNotes()

    def claims(self) -> tuple[ResultClaim[Any], ...]:
        return (ResultClaim(result_type="task", model=TaskCreated, resolve=follow),)

    def notifications(self) -> tuple[NotificationBinding[Any], ...]:
        return (
            NotificationBinding(
                method="notifications/tasks", params_type=_TaskNote, handler=self.notes.heard
            ),
        )


def declare_per_call(session: Any, extension: TasksExtension | None = None) -> None:
    """Declare the extension only on the `tools/call` requests sent as tasks (`tasking` set).

    The SDK stamps the same clientCapabilities on every request of a session; a server makes
    a task of every call of an "optional" tool from a client that declares it, which would
    turn each plain call into a round of polls. Called once the session is connected (its
    stamp is made at the handshake). With the session's `extension`, the polls of its tasks
    are woken by the status notifications it hears."""
    if extension is not None:
        _notes_of[session] = extension.notes
    stamp = session._stamp

    def per_call(data: dict[str, Any], opts: Any) -> None:
        stamp(data, opts)
        if data.get("method") != "tools/call" or tasking.get() is not None:
            return
        meta = data.get("params", {}).get("_meta")
        capabilities = meta.get(CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, dict) else None
        if not isinstance(capabilities, dict):
            return
        extensions = capabilities.get("extensions")
        if not isinstance(extensions, dict) or TASKS not in extensions:
            return
        rest = {k: v for k, v in extensions.items() if k != TASKS}
        trimmed = {k: v for k, v in capabilities.items() if k != "extensions"}
        if rest:
            trimmed["extensions"] = rest
        assert isinstance(meta, dict)
        meta[CLIENT_CAPABILITIES_META_KEY] = trimmed

    session._stamp = per_call


def _interval(ms: Any) -> float:
    if not isinstance(ms, int | float) or isinstance(ms, bool) or not math.isfinite(ms):
        return DEFAULT_POLL
    return min(MAX_POLL, max(MIN_POLL, ms / 1000))


def journaled_task(call: TaskCall) -> str | None:
    """The id of the task a run of this detached call before this one left (its checkpoint),
    if it was this server's and tool's: the run follows it again instead of calling the tool."""
    ctx = call.ctx
    kept = ctx.resumed.get(TASK_CHECKPOINT) if ctx is not None and ctx.detached_id is not None else None
    if not isinstance(kept, Mapping) or kept.get("server") != call.server or kept.get("tool") != call.tool:
        return None
    task_id = kept.get("task")
    return task_id if isinstance(task_id, str) and task_id else None


def connection_lost(exc: BaseException) -> bool:
    """Whether `exc` says the connection went away (not an answer of the server's): the SDK's
    CONNECTION_CLOSED, an HTTP session the server no longer knows, a broken stream."""
    if isinstance(exc, MCPError):
        if exc.code == CONNECTION_CLOSED:
            return True
        return exc.code == INVALID_REQUEST and "session" in exc.error.message.lower()
    return isinstance(exc, anyio.BrokenResourceError | anyio.ClosedResourceError)


async def follow(created: TaskCreated, claim: ClaimContext) -> types.CallToolResult:
    """Follow a task to its end: its result, as the `tools/call` would have answered. A
    detached call journals the task's id first (`ctx.checkpoint`): a run of it in another
    process follows the same task.

    Raises:
        MCPError: the task failed (the server's error), its status is one this client does not
            know, or its id is absurd (not followed); or the connection was lost (then
            `call.lost`: the caller follows it again over the next connection).
        ToolUnavailable: the server cancelled or forgot the task.
        CannotAsk: it asks what no one here can answer (the task is cancelled).
    """
    call = tasking.get()
    task_id = created.task_id
    where = f"MCP server {call.server!r}" if call is not None else "the MCP server"
    if not 0 < len(task_id) <= MAX_TASK_ID or not task_id.isprintable():
        # not followed, not journaled, not repeated: a server's megabyte id would be sent back
        # with every poll and read by the model in every message
        raise MCPError(
            code=types.INTERNAL_ERROR,
            message=f"{where} made the call task {shown(task_id)}, an id this client refuses "
            f"(at most {MAX_TASK_ID} printable characters); the task was not followed",
        )
    log.debug("%s: the call became task %s", where, task_id)
    if call is not None:
        call.task_id = task_id
        await _journal(call, task_id, where)
    task: dict[str, Any] = created.model_dump(by_alias=True, mode="json", exclude_none=True)
    return await poll(claim.session, task_id, call, task)


def shown(task_id: str) -> str:
    """A task id as a message repeats it (a server's id may be anything: cut, `echo`)."""
    return echo(task_id, _SHOWN_ID)


async def _journal(call: TaskCall, task_id: str, where: str) -> None:
    ctx = call.ctx
    if ctx is None or ctx.detached_id is None:
        return
    try:
        kept = await ctx.checkpoint(
            TASK_CHECKPOINT, {"server": call.server, "tool": call.tool, "task": task_id}
        )
    except Exception as exc:  # the call goes on; only a process that dies loses the task
        log.warning("%s: task %s could not be journaled: %s", where, task_id, exc)
        return
    if kept:
        log.debug("%s: task %s journaled for detached call %s", where, task_id, ctx.detached_id)


_EMPTY_ASKS = 10  # polls in a row a task may say input_required with nothing to answer


@contextlib.asynccontextmanager
async def _listening(session: Any, task_id: str, where: str) -> AsyncIterator[TaskNotes | None]:
    """A `subscriptions/listen` for `task_id`'s status notifications, open while the body runs
    (2026-07-28 sessions whose `TasksExtension` hears them); the notes that wake its poll, or
    None (polling alone). The listen failing or refused changes nothing but the wake-ups."""
    notes = _notes_of.get(session)
    if notes is None or getattr(session, "protocol_version", None) not in MODERN_PROTOCOL_VERSIONS:
        yield None
        return

    async def listen() -> None:
        request = _Listen(params=_ListenParams(notifications={"taskIds": [task_id]}))
        try:
            await session.send_request(request, _Raw)
        except Exception as exc:  # refused (-32021, -32601...), or the connection went
            log.debug("%s: no status notifications for task %s: %s", where, shown(task_id), exc)

    raised: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(listen)
            try:
                yield notes
            except BaseException as exc:  # raised below, outside the nursery: not as a group
                raised = exc
            nursery.cancel_scope.cancel()  # the SDK sends notifications/cancelled: the stream ends
    finally:
        notes.forget(task_id)
    if raised is not None:
        raise raised


async def poll(
    session: Any, task_id: str, call: TaskCall | None, task: dict[str, Any] | None = None
) -> types.CallToolResult:
    """Poll task `task_id` (as last seen: `task`; None: ask for it first) to its end (`follow`);
    a status notification for it wakes the poll early."""
    where = f"MCP server {call.server!r}" if call is not None else "the MCP server"
    named = shown(task_id)
    if task is None:
        task = {"status": "working", "pollIntervalMs": 0}
    interval = _interval(task.get("pollIntervalMs"))
    pause = MIN_POLL  # the first polls come soon, then back off to the server's interval
    rounds = 0
    empty = 0  # polls in a row that said input_required and asked nothing
    ended = False
    try:
        async with _listening(session, task_id, where) as notes:
            wake = notes.wake_of(task_id) if notes is not None else None
            last = -math.inf  # when tasks/get was last sent
            while True:
                status = task.get("status")
                if status == "completed":
                    ended = True
                    if "result" not in task:
                        raise ToolUnavailable(f"{where} completed task {named} without a result")
                    return types.CallToolResult.model_validate(task["result"])
                if status == "failed":
                    ended = True
                    found = task.get("error")
                    error: dict[str, Any] = found if isinstance(found, dict) else {}
                    message = str(error.get("message") or task.get("statusMessage") or "the task failed")
                    code = error.get("code")
                    raise MCPError(
                        code=code if isinstance(code, int) else types.INTERNAL_ERROR, message=message
                    )
                if status == "cancelled":
                    ended = True
                    said = task.get("statusMessage")
                    raise ToolUnavailable(
                        f"{where} cancelled task {named}" + (f" ({echo(said, 500)})" if said else "")
                    )
                if not isinstance(status, str) or status not in _STATUSES:
                    # not a status of SEP-2663: nothing here can tell what it means (the task is cancelled)
                    raise MCPError(
                        code=types.INTERNAL_ERROR,
                        message=f"{where}: task {named} has status {echo(status, _SHOWN_ID)}, which is "
                        "not a task status this client knows (working, input_required, completed, "
                        "failed, cancelled)",
                    )
                asked = task.get("inputRequests")
                if status == "input_required" and isinstance(asked, dict) and asked:
                    empty = 0
                    rounds += 1
                    if rounds > _MAX_QUESTION_ROUNDS:
                        raise ToolUnavailable(
                            f"{where}: task {named} asked more than {_MAX_QUESTION_ROUNDS} times"
                        )
                    answers = {key: await _answer(call, request) for key, request in asked.items()}
                    pause = MIN_POLL  # answered: it works on, and may end soon
                    try:
                        await _sent(
                            session,
                            _UpdateTask(params=_TaskUpdateParams(task_id=task_id, input_responses=answers)),
                            call,
                        )
                    except MCPError as exc:
                        # "no task" (forgotten meanwhile), or answers it refuses
                        if exc.code == INVALID_PARAMS:
                            raise ToolUnavailable(
                                f"{where} did not take the answers to task {named} "
                                f"({exc.error.message}); it may have run"
                            ) from None
                        raise
                else:
                    if status == "input_required":
                        empty += 1
                        if empty >= _EMPTY_ASKS:  # SEP-2663: input_required carries its inputRequests
                            raise MCPError(
                                code=types.INTERNAL_ERROR,
                                message=f"{where}: task {named} said input_required {empty} times "
                                "without an input request to answer; it was given up (and cancelled)",
                            )
                    else:
                        empty = 0
                    wait, pause = min(pause, interval), pause * 2
                    if wake is None:
                        await trio.sleep(wait)
                    else:
                        with trio.move_on_after(wait):
                            await wake.wait()
                        # a notification is a hint: tasks/get says what the task is, at most
                        # once per MIN_POLL however often the server notifies
                        await trio.sleep_until(last + MIN_POLL)
                        assert notes is not None
                        wake = notes.wake_of(task_id)
                last = trio.current_time()
                try:
                    task = await _sent(session, _GetTask(params=_TaskIdParams(task_id=task_id)), call)
                except MCPError as exc:
                    if exc.code == INVALID_PARAMS:  # "no task": expired, or the server restarted
                        ended = True
                        raise ToolUnavailable(
                            f"{where} no longer knows task {named} ({exc.error.message}); it may have run"
                        ) from None
                    raise
                interval = _interval(task.get("pollIntervalMs", interval * 1000))
    finally:
        lost = call is not None and call.lost  # followed again over the next connection
        left = call is not None and call.ctx is not None and call.ctx.handed_over  # resumed elsewhere
        if not ended and not lost and not left:  # our call ends first (cancelled, a deadline...)
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + CANCEL_TIMEOUT
                try:
                    await _send(session, _CancelTask(params=_TaskIdParams(task_id=task_id)))
                except Exception as exc:  # the connection is gone: the task's ttl ends it
                    log.info("%s: task %s could not be cancelled: %s", where, named, exc)
                if scope.cancelled_caught:
                    log.info("%s: task %s: tasks/cancel had no answer in time", where, named)


async def cancel_task(session: Any, task_id: str) -> None:
    """Send `tasks/cancel` for `task_id` (a call that ended while its task waited for a connection)."""
    await _send(session, _CancelTask(params=_TaskIdParams(task_id=task_id)))


async def _sent(session: Any, request: types.Request[Any, Any], call: TaskCall | None) -> dict[str, Any]:
    """`_send`, marking `call` lost when the connection goes away under it."""
    try:
        return await _send(session, request)
    except Exception as exc:
        if call is not None and connection_lost(exc):
            call.lost = True
        raise


async def _answer(call: TaskCall | None, request: Any) -> dict[str, Any]:
    """The answer to one of a task's input requests, asked through the call's asking flow."""
    ctx = call.ctx if call is not None else None
    method = request.get("method") if isinstance(request, dict) else None
    if ctx is None:
        raise CannotAsk(f"an MCP task asked ({method}) and there is no call to ask through")
    params = request.get("params") or {}
    if method == "elicitation/create":
        form = types.ElicitRequestFormParams.model_validate(params)
        schema = form.requested_schema
        schema_dict = (
            schema if isinstance(schema, dict) else schema.model_dump(by_alias=True, exclude_none=True)
        )
        elicited = await ctx.elicit(form.message, dict(schema_dict))
        reply: dict[str, Any] = {"action": elicited.action}
        if elicited.action == "accept":
            reply["content"] = elicited.value or {}
        return reply
    if method == "sampling/createMessage":
        asked = sampling_of(types.CreateMessageRequestParams.model_validate(params))
        sampled = await ctx.sample(
            list(asked.messages),
            max_tokens=asked.max_tokens,
            system_prompt=asked.system_prompt,
            temperature=asked.temperature,
            stop_sequences=asked.stop_sequences,
            model_hints=asked.model_hints,
            include_context=asked.include_context,
            metadata=asked.metadata,
        )
        return types.CreateMessageResult(
            role=sampled.role,
            content=types.TextContent(text=sampled.text),
            model=sampled.model or "unknown",
            stop_reason=sampled.stop_reason,
        ).model_dump(by_alias=True, mode="json", exclude_none=True)
    if method == "roots/list":
        roots = await ctx.list_roots()
        return {"roots": [{"uri": r.uri, **({"name": r.name} if r.name else {})} for r in roots]}
    raise CannotAsk(f"an MCP task asked {method!r}, which this client cannot answer")
