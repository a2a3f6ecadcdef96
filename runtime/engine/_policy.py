"""Interceptors: code that steps into a call, ordered around it, on the one path.

A `Policy` writes its part of a call once, as a generator (httpx's auth flow is the model):

    class Audit(Policy):
        def intercept(self, request):
            if request.principal is None:
                return request.reject("sign in first")      # refuse: REJECTED, the tool never runs
            result = yield request.replace(arguments=...)     # go on (rewritten: decoded again)
            return result                                     # or another result (transform)

Before its `yield` it may refuse the call, answer it without running the tool
(`request.answer(value)`), rewrite its arguments or send it to another tool
(`request.replace(...)`), or say what observers may see of its arguments (`request.redact(...)`);
after it, it sees the outcome (whatever settled it: the tool, a timeout, a cancellation) and may
return another result. Anything else it yields is an awaitable the engine awaits for it and
sends back (`answer = yield ctx.elicit(...)`): a policy whose flow does that says `suspends =
True`, and its calls then always go through a trio task.

The policies of a call run outermost first: the runtime's (`open_runtime(policies=[...])`), then
the tool's own (`@tool(policies=[...])`); their after-halves run in reverse. Each runs exactly
once per call; a policy that raises (or yields the request twice, or returns something that is
not a result) is that call's ERROR, never the runtime's; no policy can answer a call twice or
never. Each decision is an event on the call's span (`tool.policy`). The chain that runs them
is engine/_chain.py.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Generator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import msgspec
import trio

from ..messages import FailureKind, ToolCall, ToolFailure, ToolResult
from ..tools import CallContext
from ._outcome import failure

if TYPE_CHECKING:
    from ._call import Call

__all__ = ["CallRequest", "Policy", "PolicyFlow", "call_of", "note", "redacted"]

log = logging.getLogger("runtime.engine")

PolicyFlow = Generator[Any, Any, "ToolResult | None"]
"""What `Policy.intercept` returns: yields the request once (go on), or awaitables (await these)."""


class Policy:
    """Steps into every call of the tools it applies to; subclass and override `intercept`.

    Attributes:
        suspends: the flow yields awaitables (asks someone, reads a store): its calls always go
            through a trio task, and a batch lets them through concurrently.
    """

    suspends: ClassVar[bool] = False

    @property
    def name(self) -> str:
        """Shown on spans and in failure texts."""
        return type(self).__name__

    def applies(self, tool: Any) -> bool:
        """Whether this policy steps into `tool`'s calls (asked once per tool)."""
        return True

    def intercept(self, request: CallRequest) -> PolicyFlow:
        """The policy's part of one call (see the module docstring); by default it goes on."""
        result: ToolResult = yield request
        return result


class CallRequest:
    """A call as a policy sees it: read it, and make the answers a policy may give.

    Attributes:
        id: the call's id.
        tool_name: the tool it goes to.
        arguments: the arguments as the model sent them (JSON text, or an object).
        args: the arguments decoded into the tool's args type (None once `replace`d: decoded later).
        principal: who the call runs for (None: nobody said).
        deadline: when the call must end (trio time; inf: no limit).
        metadata: the call's merged metadata.
        ctx: its CallContext (when the call has one).
    """

    __slots__ = ("_call", "_context_of", "_redacted", "args", "arguments", "id", "tool_name")

    def __init__(self, call: Call, context_of: Callable[[Call], CallContext] | None = None) -> None:
        self._call = call
        self._context_of = context_of
        self.id = call.call.id
        self.tool_name = call.call.name
        self.arguments = call.call.arguments
        self.args = call.args
        self._redacted: tuple[str, ...] = ()

    @property
    def principal(self) -> str | None:
        return self._call.principal

    @property
    def deadline(self) -> float:
        """When the call must end, in trio time (inf: no limit): its caller's deadline, or the
        sooner of that and its tool's own timeout once it runs; before it runs, a tool's own
        timeout counts from now (the soonest it could start)."""
        call = self._call
        deadline = call.deadline
        plan = call.plan
        if deadline == math.inf and plan is not None:
            own = plan.timeout if plan.timeout is not None else plan.default_timeout
            if own is not None:
                return trio.current_time() + own
        return deadline

    @property
    def metadata(self) -> Mapping[str, Any]:
        ctx = self.ctx
        return ctx.metadata if ctx is not None else {}

    @property
    def ctx(self) -> CallContext | None:
        ctx = self._call.ctx
        if ctx is None and self._context_of is not None:
            ctx = self._context_of(self._call)  # made on first use: most policies never ask
        return ctx

    def replace(
        self, *, arguments: str | dict[str, Any] | None = None, tool: str | None = None
    ) -> CallRequest:
        """The request with other arguments (decoded and checked again) or for another tool."""
        changed = CallRequest.__new__(CallRequest)
        changed._call = self._call
        changed._context_of = self._context_of
        changed.id = self.id
        changed.tool_name = tool if tool is not None else self.tool_name
        changed.arguments = arguments if arguments is not None else self.arguments
        changed.args = self.args if arguments is None and tool is None else None
        changed._redacted = self._redacted
        return changed

    def redact(self, *fields: str) -> CallRequest:
        """The request with these top-level argument fields hidden from observers (spans, logs,
        features' hooks); the tool still gets them."""
        changed = self.replace()
        changed._redacted = (*self._redacted, *fields)
        return changed

    def reject(self, reason: str) -> ToolFailure:
        """Refuse the call: REJECTED, `reason` shown to the model; the tool does not run."""
        return failure(self._call.call, FailureKind.REJECTED, reason)

    def fail(self, kind: FailureKind, message: str) -> ToolFailure:
        """Answer the call with a failure of any kind (UNAVAILABLE, OVERLOADED...)."""
        return failure(self._call.call, kind, message)

    def answer(self, value: Any) -> ToolResult:
        """Answer the call as if its tool had returned `value` (the tool does not run)."""
        plan = self._call.plan
        assert plan is not None
        result = plan.shape(self._call, value, wait=False)
        assert result is not None  # never None when it may not wait
        return result

    def __repr__(self) -> str:
        return f"<CallRequest {self.id!r} {self.tool_name!r}>"


def note(call: Call, name: str, attributes: dict[str, Any]) -> None:
    """An event for the call's span: kept until the span exists (a policy's decision before the
    call starts), told at once after."""
    if call.notes is not None:  # before the call's span exists: told once it does
        call.notes.append((name, attributes))
        return
    ctx = call.ctx
    if ctx is not None and ctx._observer is not None:
        ctx._observer.event(ctx, name, attributes)


def redacted(arguments: Any, fields: tuple[str, ...]) -> Any:
    """`arguments` with the top-level `fields` replaced by "[redacted]" (JSON text stays text)."""
    if not fields:
        return arguments
    try:
        data = msgspec.json.decode(arguments) if isinstance(arguments, str | bytes) else dict(arguments)
    except Exception:
        return "[redacted]"
    if not isinstance(data, dict):
        return arguments
    for field in fields:
        if field in data:
            data[field] = "[redacted]"
    return msgspec.json.encode(data).decode() if isinstance(arguments, str | bytes) else data


def call_of(request: CallRequest) -> ToolCall:
    """The ToolCall a request stands for (its tool and arguments, as a policy left them)."""
    call = request._call.call
    return ToolCall(id=call.id, name=request.tool_name, arguments=request.arguments)
