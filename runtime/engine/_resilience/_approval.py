"""The approval a `requires_approval` tool asks for, when no one can give it now: deferred.

A tool with `requires_approval` asks before each call runs (or before the calls its predicate
picks). Asked now when someone can answer (an `on_elicit` handler, an `asking(...)` block, an
MCP client that elicits): the worker asks, as before (engine/_plan.py `ToolPlan._approve`).
When no one can, or the call is a detached one (its approval must outlive a request and a
process), it is deferred instead: journaled as waiting for an approval, and its caller gets a
`ToolPending`; once approved it runs, exactly once, with `request.approved` True. It is a policy
that uses only what a user's policy can (`request.defer`), the outermost of the tool's own
resilience policies: a deferred call spends no rate-limit token and takes no dedupe claim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...tools.lowlevel import asks_user
from .._journal import detached_run
from .._policies import CallRequest, Policy, PolicyFlow, passes

if TYPE_CHECKING:
    from ._common import Shared


class ApprovalPolicy(Policy):
    """Defers the calls of a `requires_approval` tool that no one can approve now (see the module)."""

    def __init__(self, resilience: Shared, tool: str, approval: Any) -> None:
        self.tool = tool
        self.approval = approval
        self.suspends = not resilience.local  # type: ignore[misc]  # it writes the journal then

    @property
    def name(self) -> str:
        return "Approval"

    def intercept(self, request: CallRequest) -> PolicyFlow:
        if request.answered is not None or request.approved:
            return (yield from passes(request))
        approval = self.approval
        if approval is not True and not approval(request.args):
            return (yield from passes(request))
        run = detached_run.get()
        detached = run is not None and run.call is request._call
        ctx = request.ctx
        if not detached and ctx is not None and asks_user(ctx):
            return (yield from passes(request))  # asked now, before the tool runs
        return (yield from request.defer(reason="approval"))
