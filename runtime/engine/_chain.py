"""The policy chain, written once: each policy's before-half in begin (outermost first), its
after-half in finish (innermost first), with or without suspending (`Policy` in engine/_policy.py).

`before_now` / `after_now` run a chain none of whose policies suspends, with no generator around
it; `before` / `after` are the same steps as generators that yield what a policy awaits, which
`drive` awaits. A policy that raises, yields the request twice or returns what is not a result
is that call's ERROR, and each decision is noted for the call's span.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any

import msgspec

from ..messages import FailureKind, ToolFailure, ToolResult, ToolSuccess
from ..tools import CallContext
from ._outcome import describe_error, failure
from ._policy import CallRequest, Policy, PolicyFlow, note

if TYPE_CHECKING:
    from ._call import Call

__all__ = ["after", "after_now", "before", "before_now", "drive"]

log = logging.getLogger("runtime.engine")


def before_now(
    call: Call, policies: tuple[Policy, ...], context_of: Callable[[Call], CallContext] | None = None
) -> CallRequest | None:
    """Run each policy up to its `yield request`, outermost first, when none of them suspends
    (most chains: no generator around them). The flows that went on are kept on the call for
    `after_now`. Returns the request as the last policy let it through, or None when a policy
    answered the call (it is settled, and the inner ones never ran)."""
    request = CallRequest(call, context_of)
    kept: list[tuple[Policy, PolicyFlow]] = []
    call.flows = kept
    call.notes = []
    for policy in policies:
        flow = policy.intercept(request)
        try:
            step = flow.send(None)
        except StopIteration as stop:  # it answered the call itself
            _answered(call, policy, stop.value)
            return None
        except Exception as exc:
            call.settle(_crashed(call, policy, exc))
            return None
        if step is not request:
            if not isinstance(step, CallRequest):
                call.settle(_awaits(call, policy, flow, step))
                return None
            _event(call, policy, "rewrote" if step.arguments is not request.arguments else "redacted")
            request = step
        kept.append((policy, flow))
    return request


def after_now(call: Call) -> ToolResult:
    """Give each policy that went on the call's result, innermost first, when none of them
    suspends; what the outermost returns is the call's result."""
    result = call.result
    assert result is not None
    kept = call.flows or []
    call.flows = None
    for policy, flow in reversed(kept):
        try:
            step = flow.send(result)
        except StopIteration as stop:
            value = stop.value
            if value is not None and value is not result:
                result = _returned(call, policy, value, result)
        except Exception as exc:
            result = _crashed(call, policy, exc)
        else:
            result = (
                _again(call, policy, flow)
                if isinstance(step, CallRequest)
                else _awaits(call, policy, flow, step)
            )
    return result if call.asked is None else _answering(call, result)


def before(
    call: Call, policies: tuple[Policy, ...], context_of: Callable[[Call], CallContext] | None = None
) -> Generator[Awaitable[Any], Any, CallRequest | None]:
    """`before_now` for a chain whose policies may suspend: what a flow yields that is not the
    request is awaited by the driver (`drive`) and sent back."""
    request = CallRequest(call, context_of)
    kept: list[tuple[Policy, PolicyFlow]] = []
    call.flows = kept
    call.notes = []
    for policy in policies:
        flow = policy.intercept(request)
        value: Any = None
        error: BaseException | None = None
        try:
            while True:
                step = flow.send(value) if error is None else flow.throw(error)
                if isinstance(step, CallRequest):
                    break
                value, error = yield from _awaited(flow, step)
        except StopIteration as stop:  # it answered the call itself
            _answered(call, policy, stop.value)
            return None
        except Exception as exc:
            call.settle(_crashed(call, policy, exc))
            return None
        request = _went_on(call, policy, flow, request, step)
    return request


def after(call: Call) -> Generator[Awaitable[Any], Any, ToolResult]:
    """`after_now` for a chain whose policies may suspend."""
    result = call.result
    assert result is not None
    kept = call.flows or []
    call.flows = None
    for policy, flow in reversed(kept):
        value: Any = result
        error: BaseException | None = None
        try:
            while True:
                step = flow.send(value) if error is None else flow.throw(error)
                if isinstance(step, CallRequest):
                    result = _again(call, policy, flow)
                    break
                value, error = yield from _awaited(flow, step)
        except StopIteration as stop:
            result = _returned(call, policy, stop.value, result)
        except Exception as exc:
            result = _crashed(call, policy, exc)
    return _answering(call, result)


def _awaited(flow: PolicyFlow, step: Any) -> Generator[Awaitable[Any], Any, tuple[Any, Exception | None]]:
    """What the driver made of an awaitable a flow yielded: its value, or the error it raised."""
    try:
        return (yield step), None
    except Exception as exc:
        return None, exc
    except BaseException:
        flow.close()
        raise


def _went_on(
    call: Call, policy: Policy, flow: PolicyFlow, request: CallRequest, step: CallRequest
) -> CallRequest:
    """A policy let the call through (as `step`): its flow waits for the outcome."""
    assert call.flows is not None
    call.flows.append((policy, flow))
    if step is not request:
        _event(call, policy, "rewrote" if step.arguments is not request.arguments else "redacted")
    return step


def _answered(call: Call, policy: Policy, value: Any) -> None:
    """A policy answered the call before it ran (refused it, or gave the answer itself)."""
    call.settle(_result(call, policy, value, "answered"))
    _event(call, policy, "answered" if call.result is not None and call.result.ok else "refused")


def _returned(call: Call, policy: Policy, value: Any, result: ToolResult) -> ToolResult:
    """What a policy's after-half returned: the result it was given, or another one."""
    if value is None or value is result:
        return result
    _event(call, policy, "transformed")
    return _result(call, policy, value, "returned")


def _again(call: Call, policy: Policy, flow: PolicyFlow) -> ToolFailure:
    flow.close()
    return failure(
        call.call,
        FailureKind.ERROR,
        f"policy {policy.name} yielded the call again after it was answered",
        "PolicyError",
    )


def _awaits(call: Call, policy: Policy, flow: PolicyFlow, step: Any) -> ToolFailure:
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


def _answering(call: Call, result: ToolResult) -> ToolResult:
    if call.asked is not None and result.tool != call.asked:  # routed: it answers the model's call
        result = msgspec.structs.replace(result, tool=call.asked)
    return result


async def drive(flow: Generator[Awaitable[Any], Any, Any]) -> Any:
    """Run a policy chain, awaiting what it yields and sending back the value (or the error)."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = flow.send(value) if error is None else flow.throw(error)
        except StopIteration as stop:
            return stop.value
        value, error = None, None
        try:
            value = await step
        except Exception as exc:
            error = exc


def _result(call: Call, policy: Policy, value: Any, what: str) -> ToolResult:
    """A policy's answer as the call's result (its id and tool, whatever the policy built)."""
    if isinstance(value, ToolSuccess | ToolFailure):
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


def _crashed(call: Call, policy: Policy, exc: BaseException) -> ToolFailure:
    log.warning("policy %s failed for call %s", policy.name, call.call.id, exc_info=exc)
    error_type, text = describe_error(exc)
    _event(call, policy, "failed")
    return failure(call.call, FailureKind.ERROR, f"policy {policy.name} raised {text}", error_type)


def _event(call: Call, policy: Policy, what: str) -> None:
    note(call, "tool.policy", {"tool.policy.name": policy.name, "tool.policy.decision": what})
