"""The policies' and features' halves of a call, driven from sync and async callers alike
(`Hooks`, part of `Steps`; `drive` / `drive_now` run one hook generator either way).

    starting   after `prepare`: the policies' before-halves (which may answer the call, rewrite
               it, send it to another tool or redact it for observers), then the features'
               `on_call_starting` hooks
    finish     after the call is settled: the policies' after-halves, counted once, then the
               features' finishing hooks

Each comes twice, `*_now` for a caller that cannot await (nothing on its way may suspend)
and the awaiting form; the `*_now` form is the one taken whenever it can be.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..features import FeaturePipeline, drive, drive_now
from ..messages import FailureKind, ToolCall, echo
from ..tools import CallContext
from . import _chain as chain
from . import _policy as policy
from ._call import Call
from ._states import QUEUED, REPORTED

if TYPE_CHECKING:
    from ._routing import RegistryActor

__all__ = ["Hooks"]


class Hooks:
    """The hook-driving half of `Steps` (its state is the entry's)."""

    pipeline: FeaturePipeline | None
    _observer: Any
    _routing: RegistryActor

    def context_of(self, c: Call) -> CallContext:
        raise NotImplementedError  # the entry's (`Steps.context_of`)

    def finish_now(self, c: Call) -> None:
        """End's steps on the caller's side, none of which may suspend, once: the policies'
        after-halves, the count, the features' finishing hooks."""
        if c.state is REPORTED:
            return
        if c.flows is not None:
            c.transform(chain.after_now(c))
        if not c.reported():
            return
        pipeline = self.pipeline
        if pipeline is not None:
            drive_now(pipeline.finishing(c.shown or c.call, c.result, c.ctx))  # type: ignore[arg-type]

    async def finish(self, c: Call) -> None:
        """`finish_now`, awaiting what may suspend (all callers)."""
        if c.state is REPORTED:
            return
        if c.flows is not None:
            plan = c.plan
            c.transform(
                await chain.drive(chain.after(c))
                if plan is not None and plan.suspends
                else chain.after_now(c)
            )
        if not c.reported():
            return
        pipeline = self.pipeline
        if pipeline is not None:
            await drive(pipeline.finishing(c.shown or c.call, c.result, c.ctx))  # type: ignore[arg-type]

    def starting_now(self, c: Call) -> None:
        """Begin's steps that come after `prepare`, none of which may suspend: the policies'
        before-halves, then the features' starting hooks."""
        plan = c.plan
        if plan is not None and plan.policies and c.state is QUEUED:
            self._let_through(c, chain.before_now(c, plan.policies, self.context_of))
        pipeline = self.pipeline
        if pipeline is not None and pipeline.has_starting:
            drive_now(pipeline.starting(c.shown or c.call, c.ctx))  # type: ignore[arg-type]
        if c.notes is not None:  # the span exists now: decisions from here on go straight to it
            self._tell(c)

    async def starting(self, c: Call) -> None:
        """`starting_now`, awaiting what may suspend."""
        plan = c.plan
        if plan is not None and plan.policies and c.state is QUEUED:
            if plan.suspends:
                request = await chain.drive(chain.before(c, plan.policies, self.context_of))
            else:
                request = chain.before_now(c, plan.policies, self.context_of)
            self._let_through(c, request)
        pipeline = self.pipeline
        if pipeline is not None and pipeline.has_starting:
            if pipeline.hooks_cannot_suspend:
                drive_now(pipeline.starting(c.shown or c.call, c.ctx))  # type: ignore[arg-type]
            else:
                await drive(pipeline.starting(c.shown or c.call, c.ctx), finish=False)  # type: ignore[arg-type]
        if c.notes is not None:  # the span exists now: decisions from here on go straight to it
            self._tell(c)

    def _tell(self, c: Call) -> None:
        """The policies' decisions, on the call's span now that it has one."""
        notes, c.notes = c.notes or (), None
        if notes and self._observer is not None and c.ctx is not None:
            for name, attributes in notes:
                self._observer.event(c.ctx, name, attributes)

    def _let_through(self, c: Call, request: policy.CallRequest | None) -> None:
        """The call as its policies let it through: rewritten (decoded again), sent to another
        tool, or redacted for observers. None: a policy answered it."""
        if request is None:
            return
        call = c.call
        if request.tool_name != call.name or request.arguments is not call.arguments:
            if request.tool_name != call.name:
                actor = self._routing.routes.get(request.tool_name)
                if actor is None:
                    c.fail(
                        FailureKind.UNKNOWN_TOOL,
                        f"a policy sent the call to tool {echo(request.tool_name)!r}, which does not exist",
                    )
                    return
                c.plan = actor.plan
                c.asked = call.name  # its result still answers the call the model made
                if c.ctx is not None:
                    c.ctx.tool = actor.tool
                    c.ctx.tool_name = actor.name
                c.call = policy.call_of(request)
                if c.ctx is None and actor.needs_context:
                    self.context_of(c)  # the tool it was sent to takes one
            else:
                c.call = policy.call_of(request)
            c.plan.decode(c)  # type: ignore[union-attr]  # routed
        if request._redacted:
            c.shown = ToolCall(
                id=c.call.id, name=c.call.name, arguments=policy.redacted(c.call.arguments, request._redacted)
            )
