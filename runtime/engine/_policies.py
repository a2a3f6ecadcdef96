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
return another result. It may also defer the call (`request.defer(...)`: it waits for an approval
or for its result from outside, journaled; the caller gets a `ToolPending`). Anything else it yields is an awaitable the engine awaits for it and
sends back (`answer = yield ctx.elicit(...)`): a policy whose flow does that says `suspends =
True`, and its calls then always go through a trio task.

The policies of a call run outermost first: the runtime's (`open_runtime(policies=[...])`), then
the tool's own (`@tool(policies=[...])`); their after-halves run in reverse. Each runs exactly
once per call; a policy that raises (or yields the request twice, or returns something that is
not a result) is that call's ERROR, never the runtime's; no policy can answer a call twice or
never. Each decision is an event on the call's span (`tool.policy`).

The chain, written once: each policy's before-half in begin (outermost first), its after-half
in finish (innermost first), each one flow (`runtime._flows`) that yields what a policy awaits;
driven here when none of its policies suspends, awaited when one does. A policy that raises,
yields the request twice, yields something to await without saying `suspends = True`, or
returns what is not a result is that call's ERROR, and each decision is noted for the call's
span.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Generator, Mapping
from typing import Any, ClassVar, Literal

import msgspec
import trio

from .._flows import Flow, now
from ..messages import FailureKind, ToolCall, ToolFailure, ToolPending, ToolResult, ToolSuccess
from ..tools import CallContext
from ..tools.lowlevel import durable_of
from ._call import Call
from ._outcome import describe_error, failure

__all__ = [
    "CallRequest",
    "Policy",
    "PolicyFlow",
    "after",
    "before",
    "call_of",
    "note",
    "passes",
    "redacted",
]

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
        return (yield from passes(request))


def passes(request: CallRequest) -> PolicyFlow:
    """A policy's part that lets the call through as it is and returns its result."""
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

    _call: Call[Any]

    def __init__(self, call: Call[Any], context_of: Callable[[Call[Any]], CallContext] | None = None) -> None:
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
        deadline: float = call.deadline
        plan = call.plan
        if deadline == math.inf:
            own: float | None = plan.timeout if plan.timeout is not None else plan.default_timeout
            if own is not None:
                return trio.current_time() + own
        return deadline

    @property
    def running(self) -> bool:
        """The call's work still runs although it was answered (its deadline lapsed, its caller
        left, and its code did not stop): its end comes later, as a late result."""
        call = self._call
        plan = call.plan
        return call.settled and call in plan.running

    @property
    def answered(self) -> ToolResult | None:
        """The call's answer when it was answered before its policies ran (its arguments did not
        decode: INVALID_ARGUMENTS, `args` is None; its tool is down...), else None. Such a call
        still passes every policy, so that a redaction holds and an audit hears it; a refusal,
        an answer or a rewrite of it does not apply (it has its one answer)."""
        call = self._call
        return call.result if call.settled else None

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

    @property
    def approved(self) -> bool:
        """The call runs because it was approved (a deferred approval): a policy that would defer
        it for an approval lets it through."""
        ctx = self._call.ctx
        return ctx is not None and ctx.approved

    def defer(
        self,
        message: str | None = None,
        *,
        reason: Literal["approval", "outside"] = "approval",
        expires: float | None = None,
    ) -> Generator[Any, Any, ToolResult]:
        """End the call's turn without running its tool: it is journaled as a detached call that
        waits (for an approval: it runs once approved, `request.approved` then True; or for its
        result from outside), and the caller gets a `ToolPending`. A flow: a policy returns
        `(yield from request.defer(...))`, and says `suspends = True` (it writes the journal;
        on a MemoryStore it runs in place). `message`: what the model reads; `expires`: seconds
        it may wait (default: the runtime's `Durable.expires`). When it cannot be journaled
        (the store is down, the principal has too many), the call's failure says so instead."""
        ctx = self.ctx
        book = durable_of(ctx) if ctx is not None else None
        if book is None:
            return failure(self._call.call, FailureKind.UNAVAILABLE, "the call could not be deferred here")
        step = book.defer_call(self._call, ctx, reason, message, expires)
        if book.local:
            result: ToolResult = now(step)
            return result
        result = yield step
        return result

    def answer(self, value: Any) -> ToolResult:
        """Answer the call as if its tool had returned `value` (the tool does not run). A call
        that reaches no tool keeps its answer (UNKNOWN_TOOL): there is no tool to shape `value`."""
        plan = self._call.plan
        if not plan.routed:
            assert self._call.result is not None  # answered as it was prepared
            return self._call.result
        result: ToolResult | None = plan.shape(self._call, value, wait=False)
        assert result is not None  # never None when it may not wait
        return result

    def __repr__(self) -> str:
        return f"<CallRequest {self.id!r} {self.tool_name!r}>"


def note(call: Call[Any], name: str, attributes: dict[str, Any]) -> None:
    """An event for the call's span: kept until the span exists (a policy's decision before the
    call starts), told at once after."""
    if call.notes is not None:  # before the call's span exists: told once it does
        call.notes.append((name, attributes))
        return
    ctx = call.ctx
    if ctx is not None:
        ctx.add_event(name, attributes)


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


def before(
    call: Call[Any],
    policies: tuple[Policy, ...],
    context_of: Callable[[Call[Any]], CallContext] | None = None,
    chain_of: Callable[[str], tuple[Policy, ...] | None] | None = None,
) -> Flow[CallRequest | None]:
    """Run each policy up to its `yield request`, outermost first, as one flow
    (`runtime._flows`): what a policy that `suspends` yields to await goes to the driver and
    its value (or error) comes back. The policies that went on are kept on the call for
    `after`. Returns the request as the last policy let it through, or None when a policy
    answered the call (it is settled, and the inner ones never ran).

    Whatever way the chain ends, the fields a policy redacted stay hidden from observers
    (`call.shown`): a refusal, a cache hit or a replay further in keeps them off the span too.
    A policy that sends the call to another tool (`chain_of` tells that tool's policies; None:
    there is no such tool) hands it to that tool's chain: the policies of it the call has not
    met yet run next, in place of the rest of this one's."""
    request = CallRequest(call, context_of)
    kept: list[tuple[Policy, PolicyFlow]] = []
    call.flows = kept
    call.notes = []
    chain: tuple[Policy, ...] | None = policies
    while chain is not None:  # once, unless a policy sends the call to another tool's chain
        then, chain = chain, None
        for policy in then:
            flow = policy.intercept(request)
            try:
                step = flow.send(None)
                while step is not request and not isinstance(step, CallRequest):  # it awaits something
                    if not policy.suspends:
                        call.settle(_awaits(call, policy, flow, step))
                        _shown(call, request)
                        return None
                    value, error = yield from _awaited(flow, step)
                    step = flow.send(value) if error is None else flow.throw(error)
            except StopIteration as stop:  # it answered the call itself
                _answered(call, policy, stop.value)
                _shown(call, request)
                return None
            except Exception as exc:
                call.settle(_crashed(call, policy, exc))
                _shown(call, request)
                return None
            kept.append((policy, flow))  # it went on: its flow waits for the outcome
            if step is request:
                continue
            _event(call, policy, "rewrote" if step.arguments is not request.arguments else "redacted")
            routed = step.tool_name != request.tool_name
            request = step
            if routed and chain_of is not None and not call.settled:
                target = chain_of(request.tool_name)
                if target is None:
                    return request  # no such tool: the entry answers UNKNOWN_TOOL
                met = {id(p) for p, _ in kept}
                chain = tuple(p for p in target if id(p) not in met)
                break
    return request


def _shown(call: Call[Any], request: CallRequest) -> None:
    """A policy answered the call: what the ones before it redacted stays hidden all the same."""
    if request._redacted:
        original = call.call
        call.shown = ToolCall(
            id=original.id, name=original.name, arguments=redacted(original.arguments, request._redacted)
        )


def after(call: Call[Any]) -> Flow[None]:
    """Give each policy that went on the call's result, innermost first, as one flow; what
    the outermost returns is the call's result (DONE: it is answered, not reported yet)."""
    result = call.result
    assert result is not None
    kept = call.flows or []
    call.flows = None
    for policy, flow in reversed(kept):
        try:
            step = flow.send(result)
            while True:  # it yielded: the request again, or something to await
                if isinstance(step, CallRequest):
                    result = _again(call, policy, flow)
                    break
                if not policy.suspends:
                    result = _awaits(call, policy, flow, step)
                    break
                value, error = yield from _awaited(flow, step)
                step = flow.send(value) if error is None else flow.throw(error)
        except StopIteration as stop:
            if stop.value is not None and stop.value is not result:
                result = _returned(call, policy, stop.value)
        except Exception as exc:
            result = _crashed(call, policy, exc)
    call.result = result if call.asked is None else _answering(call, result)


def _awaited(flow: PolicyFlow, step: Any) -> Flow[tuple[Any, Exception | None]]:
    """What the driver made of an awaitable a policy's flow yielded: its value, or its error."""
    try:
        return (yield step), None
    except Exception as exc:
        return None, exc
    except BaseException:
        flow.close()
        raise


def _answered(call: Call[Any], policy: Policy, value: Any) -> None:
    """A policy answered the call before it ran (refused it, or gave the answer itself)."""
    if call.settled:
        return  # answered before its policies ran: that answer stands
    call.settle(_result(call, policy, value, "answered"))
    _event(call, policy, "answered" if call.result is not None and call.result.ok else "refused")


def _returned(call: Call[Any], policy: Policy, value: Any) -> ToolResult:
    """What a policy's after-half returned in place of the result it was given."""
    _event(call, policy, "transformed")
    return _result(call, policy, value, "returned")


def _again(call: Call[Any], policy: Policy, flow: PolicyFlow) -> ToolFailure:
    flow.close()
    return failure(
        call.call,
        FailureKind.ERROR,
        f"policy {policy.name} yielded the call again after it was answered",
        "PolicyError",
    )


def _awaits(call: Call[Any], policy: Policy, flow: PolicyFlow, step: Any) -> ToolFailure:
    """A policy that does not say `suspends = True` yielded something to await: that call's ERROR
    (its calls may run where nothing can await, such as a sync caller's thread)."""
    flow.close()
    if hasattr(step, "close"):
        step.close()  # a coroutine nobody will await
    _event(call, policy, "failed")
    return failure(
        call.call,
        FailureKind.ERROR,
        f"policy {policy.name} yielded {type(step).__name__} to await; a policy that awaits "
        "says suspends = True",
        "PolicyError",
    )


def _answering(call: Call[Any], result: ToolResult) -> ToolResult:
    if call.asked is not None and result.tool != call.asked:  # routed: it answers the model's call
        result = msgspec.structs.replace(result, tool=call.asked)
    return result


def _result(call: Call[Any], policy: Policy, value: Any, what: str) -> ToolResult:
    """A policy's answer as the call's result (its id and tool, whatever the policy built)."""
    if isinstance(value, ToolSuccess | ToolFailure | ToolPending):
        if value.call_id != call.call.id or value.tool != call.call.name:
            value = msgspec.structs.replace(value, call_id=call.call.id, tool=call.call.name)
        answer: ToolResult = value
        return answer
    return failure(
        call.call,
        FailureKind.ERROR,
        f"policy {policy.name} {what} {type(value).__name__}, not a ToolResult "
        "(return request.reject(...), request.answer(...) or the result it was given)",
        "PolicyError",
    )


def _crashed(call: Call[Any], policy: Policy, exc: BaseException) -> ToolFailure:
    log.warning("policy %s failed for call %s", policy.name, call.call.id, exc_info=exc)
    error_type, text = describe_error(exc)
    _event(call, policy, "failed")
    return failure(call.call, FailureKind.ERROR, f"policy {policy.name} raised {text}", error_type)


def _event(call: Call[Any], policy: Policy, what: str) -> None:
    note(call, "tool.policy", {"tool.policy.name": policy.name, "tool.policy.decision": what})
