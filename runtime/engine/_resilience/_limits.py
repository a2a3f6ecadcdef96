"""Budgets and rate limits: OVERLOADED with the seconds to wait, or a wait within the deadline."""

from __future__ import annotations

import trio

from ...messages import FailureKind, ToolResult
from ...tools import Budget, ToolOptions
from .._policies import CallRequest, Policy, PolicyFlow, passes
from ._common import Shared


class LimitPolicy(Policy):
    """The tool's own rate limit and the principal's (`Budget.rate`): OVERLOADED with the
    seconds to wait, or a wait for the token within the call's deadline (`wait=True`)."""

    def __init__(self, resilience: Shared, tool: str, options: ToolOptions, budget: Budget | None) -> None:
        self.r = resilience
        self.tool = tool
        self.limits = [
            (limit, scope)
            for limit, scope in ((options.rate_limit, "tool"), (budget.rate if budget else None, "principal"))
            if limit is not None
        ]
        self.suspends = not resilience.local or any(limit.wait for limit, _ in self.limits)  # type: ignore[misc]

    @property
    def name(self) -> str:
        return "RateLimit"

    def intercept(self, request: CallRequest) -> PolicyFlow:
        if request.answered is not None:  # answered before it ran: nothing to keep, join or count
            return (yield from passes(request))
        store = self.r.store_for(request)
        for limit, scope in self.limits:
            key = (
                f"rate:tool:{self.tool}"
                if scope == "tool"
                else f"rate:principal\x00{request.principal or ''}"
            )
            while True:
                wait = yield from self.r.step(store.take(key, limit.rate, limit.capacity))
                if not wait:
                    break
                if not limit.wait or trio.current_time() + wait >= request.deadline:
                    who = f"tool {self.tool!r}" if scope == "tool" else f"principal {request.principal!r}"
                    return request.fail(
                        FailureKind.OVERLOADED,
                        f"{who} is over its rate limit ({limit.rate:g} calls/s); retry after {wait:.2g}s",
                    )
                yield trio.sleep(wait)  # noqa: ASYNC105 - the flow yields it; drive() awaits it
        result: ToolResult = yield request
        return result
