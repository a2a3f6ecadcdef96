"""Circuit breakers: a tool (or an MCP server) that cannot be reached is not called, for a while."""

from __future__ import annotations

import collections
import math
import time
from typing import TYPE_CHECKING

import trio

from ...messages import FailureKind, ToolFailure, ToolResult
from ...tools import TRANSPORT, CircuitBreaker
from .._policies import CallRequest, Policy, PolicyFlow, note, passes
from ._common import Shared, _event, log

if TYPE_CHECKING:
    from .._call import Call
    from .._plan import ToolPlan


class BreakerState:
    """One breaker (a tool's, or an MCP server's shared by its tools), here and in the store.

    It hears every attempt's outcome from the call state machine (`heard`), retries included, so
    a storm of retried calls opens it as soon as their first attempts fail, and a retry waits for
    nothing while it is open (`allows_retry`)."""

    __slots__ = ("config", "failures", "key", "open_until", "probe", "state")

    def __init__(self, key: str, config: CircuitBreaker) -> None:
        self.key = key
        self.config = config
        self.failures: collections.deque[float] = collections.deque()
        self.open_until = 0.0
        self.probe: Call[ToolPlan] | None = None  # the one call let through while half-open
        self.state = "closed"

    def refusal(self, now: float, call: Call[ToolPlan]) -> str | None:
        """Why `call` may not go through now (None: it may; once the cool-down is over, the first
        call to ask goes through as the probe, and the others wait for its outcome)."""
        if self.state == "closed":
            return None
        if now < self.open_until or self.probe is not None:
            wait = max(1, math.ceil(self.open_until - now))
            return (
                f"{_what(self.key)} is failing (circuit open after {self.config.failures} transport "
                f"failures); retry after {wait}s"
            )
        self.state = "half_open"
        self.probe = call
        return None

    def allows_retry(self) -> bool:
        return self.state == "closed"

    def heard(self, call: Call[ToolPlan], result: ToolResult, ran: bool) -> None:
        """An attempt of `call` ended with `result` (from `Call._end`, the one end); `ran`: it
        ran (a call answered before it ran, by a policy inside this breaker or in its queue,
        gives back a probe's turn and decides nothing)."""
        probe = self.probe is call
        if probe:
            self.probe = None
        if not ran:
            return
        if (
            type(result) is ToolFailure
            and result.kind in TRANSPORT
            and not call.cancelled
            and _against(call, result)
        ):
            now = trio.current_time()
            failures = self.failures
            failures.append(now)
            while failures and failures[0] <= now - self.config.window:
                failures.popleft()
            if self.state == "open":
                return  # calls that were already running when it opened
            if probe or self.state == "half_open" or len(failures) >= self.config.failures:
                self.state, self.open_until = "open", now + self.config.cool_down
                failures.clear()
                note(call, "tool.breaker", {"tool.breaker.state": "opened"})
                log.warning("%s: circuit opened for %gs", _what(self.key), self.config.cool_down)
        elif probe and not call.cancelled:  # any answer but a transport failure: it is reachable
            self.state = "closed"
            self.failures.clear()
            note(call, "tool.breaker", {"tool.breaker.state": "closed"})
            log.info("%s: circuit closed (a probe call got through)", _what(self.key))


class BreakerPolicy(Policy):
    """Refuse calls at once while the tool (or its MCP server) cannot be reached; with a shared
    store, read and publish the breaker's state for other processes."""

    def __init__(self, resilience: Shared, state: BreakerState) -> None:
        self.r = resilience
        self.b = state
        self.suspends = not resilience.local  # type: ignore[misc]

    @property
    def name(self) -> str:
        return "CircuitBreaker"

    def intercept(self, request: CallRequest) -> PolicyFlow:
        if request.answered is not None:  # answered before it ran: nothing to keep, join or count
            return (yield from passes(request))
        b, now = self.b, trio.current_time()
        local = self.r.local
        store = self.r.store_for(request)
        if not local and b.state == "closed":  # another process may have opened it
            shared = yield from self.r.step(store.get(f"breaker:{b.key}"))
            if shared is not None:
                b.state, b.open_until = "open", now + max(0.0, float(shared) - _wall())
        refused = b.refusal(now, request._call)
        if refused is not None:
            _event(request, "tool.breaker", {"tool.breaker.state": "open"})
            return request.fail(FailureKind.UNAVAILABLE, refused)
        probing = b.probe is request._call
        seen = b.open_until
        result: ToolResult = yield request
        if not local:  # tell the other processes what this call's attempts decided
            if b.state == "open" and b.open_until != seen:
                until = str(_wall() + (b.open_until - trio.current_time())).encode()
                yield from self.r.step(store.set(f"breaker:{b.key}", until, b.config.cool_down))
            elif probing and b.state == "closed":
                yield from self.r.step(store.delete(f"breaker:{b.key}"))
        return result


def _against(call: Call[ToolPlan], result: ToolFailure) -> bool:
    """Whether a transport failure is evidence against the server. A TIMEOUT is only when the
    deadline that passed was at least the tool's own timeout (its `timeout`, or the runtime's
    default): a caller's shorter deadline says what the caller could wait, not that the server is
    down, and one principal's impatient calls must not open the breaker for everyone. An
    UNAVAILABLE is not when the call was lost to a restart that the tool's own error caused (a
    `restart_on` exception: `crash_reason`): one principal's input that crashes the tool must
    not open it for everyone either; a worker that died, a connection lost, still are."""
    plan = call.plan
    if result.kind is FailureKind.UNAVAILABLE:
        return plan.crash_reason is None
    if result.kind is not FailureKind.TIMEOUT:
        return True
    own = plan.timeout if plan.timeout is not None else plan.default_timeout
    return own is not None and call.limit is not None and call.limit >= own


def _what(key: str) -> str:
    kind, _, name = key.partition(":")
    return f"MCP server {name!r}" if kind == "mcp" else f"tool {name!r}"


def _wall() -> float:
    return time.time()
