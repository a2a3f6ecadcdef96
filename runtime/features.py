"""Features: code that watches or enriches every tool call (tracing, auditing, quotas).

A `Feature` overrides any of its hooks. The `FeaturePipeline` calls each overridden hook,
and only those, exactly once per call, in the order the features were given; a hook that
raises is logged and never changes the call's result.

Metadata merge order is Koog's: what the features collect, then the caller's metadata
(the caller wins), then the runtime's own keys (always win).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

from ._flows import CannotWait, Flow, drive_now
from .messages import ToolCall, ToolCallMetadata, ToolFailure, ToolPending, ToolResult, ToolSuccess
from .tools import CallContext, ToolBase
from .tools.lowlevel import cannot_suspend, function_code

__all__ = [
    "CALL_ID_KEY",
    "PRINCIPAL_KEY",
    "TOOL_NAME_KEY",
    "Feature",
    "FeaturePipeline",
]

log = logging.getLogger("runtime.features")

CALL_ID_KEY = "runtime.call_id"
"""Runtime key in every call's merged metadata: the call's id."""
TOOL_NAME_KEY = "runtime.tool_name"
"""Runtime key in every call's merged metadata: the tool's name."""
PRINCIPAL_KEY = "runtime.principal"
"""Runtime key in a call's merged metadata: who it runs for (when someone said)."""


class Feature:
    """Subclass and override the hooks you need; the others cost nothing.

    The four call hooks run in the caller's task (so the caller's context, e.g. its current
    span, is the current context there). `around_call` runs in the tool actor's task,
    around the tool's own code, and `on_supervisor_event` when an actor restarts or goes down.
    """

    rechecks_enabled: bool = False
    """True: a feature disabled when the runtime opened is asked again before each call, and
    joins the calls from the first one it is enabled for (`enabled` must then be cheap)."""

    @property
    def enabled(self) -> bool:
        """Read when a runtime opens (and before each call while False, if `rechecks_enabled`);
        a disabled feature's hooks are never called."""
        return True

    def collect_metadata(self, call: ToolCall, tool: ToolBase[Any, Any] | None) -> Mapping[str, Any]:
        """Metadata this feature adds to the call (the caller's metadata wins over it).

        Runs in the caller's task, before the call is routed; `tool` is None for an unknown tool.
        """
        return ToolCallMetadata.EMPTY

    async def on_call_starting(self, call: ToolCall, ctx: CallContext) -> None:
        """The call is about to be sent to its tool (also for unknown tools)."""

    async def on_call_completed(self, call: ToolCall, result: ToolSuccess[Any], ctx: CallContext) -> None:
        """The call returned."""

    async def on_call_failed(self, call: ToolCall, failure: ToolFailure, ctx: CallContext) -> None:
        """The call failed, for any reason (see `failure.kind`)."""

    async def on_call_deferred(self, call: ToolCall, pending: ToolPending, ctx: CallContext) -> None:
        """The call ended its turn pending (an approval, an outside result): journaled as the
        detached call `pending.detached_id`, whose run, once approved, is a call of its own."""

    def around_call(self, ctx: CallContext) -> contextlib.AbstractContextManager[None] | None:
        """A context manager entered around the tool's own code, in the actor's task (or None).

        For context a tool's code should see, such as the call's span as the current span.
        Only called for calls that reach their tool.
        """
        return None

    def on_supervisor_event(self, tool_name: str, event: str, reason: str) -> None:
        """An actor was restarted (`event` "restart"), marked down ("down"), or tried again
        after its cool-down ("retry")."""

    def on_call_event(self, ctx: CallContext, name: str, attributes: dict[str, Any]) -> None:
        """Something happened during the call: `tool.progress`, `tool.log` or `tool.ask`.

        Runs where the tool's code runs, synchronously; tracing records it on the call's span.
        """

    def hears_call_events(self, ctx: CallContext) -> bool:
        """Whether this feature would record an event of this call (a tool may skip costly progress)."""
        return False


class _Around:
    """Every feature's `around_call` manager for one call, entered in order, exited in reverse.

    A feature that fails to enter is logged and skipped; an error in an exit is logged, and
    no exit can replace or swallow what the tool's code raised (a feature only watches).
    """

    __slots__ = ("_ctx", "_entered", "_features")

    def __init__(self, features: tuple[Feature, ...], ctx: CallContext) -> None:
        self._features = features
        self._ctx = ctx
        self._entered: list[tuple[Feature, contextlib.AbstractContextManager[None]]] = []

    def __enter__(self) -> None:
        for f in self._features:
            try:
                manager = f.around_call(self._ctx)
                if manager is not None:
                    type(manager).__enter__(manager)
                    self._entered.append((f, manager))
            except Exception:
                log.exception("feature %r failed in around_call for call %s", f, self._ctx.call_id)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for f, manager in reversed(self._entered):
            try:
                type(manager).__exit__(manager, exc_type, exc, tb)
            except Exception as error:
                if error is not exc:
                    log.exception("feature %r failed in around_call for call %s", f, self._ctx.call_id)


def _overrides(feature: Feature, hook: str) -> bool:
    return getattr(type(feature), hook) is not getattr(Feature, hook)


class FeaturePipeline:
    """The features of one runtime, with each hook's list of overriders resolved once.

    It is also the calls' `CallObserver`: the events a tool's context reports go to the
    features that override `on_call_event`.
    """

    __slots__ = (
        "_around",
        "_collectors",
        "_completed",
        "_deferred",
        "_event_hooks",
        "_failed",
        "_given",
        "_starting",
        "_supervision",
        "dormant",
        "features",
        "has_starting",
        "hooks_cannot_suspend",
    )

    def __init__(self, features: Iterable[Feature] = ()) -> None:
        given = tuple(features)
        for f in given:
            if not isinstance(f, Feature):
                raise TypeError(f"features must be Feature instances, not {f!r}")
        self._given = given
        self._resolve()

    def _resolve(self) -> None:
        enabled = [f.enabled for f in self._given]
        self.features: tuple[Feature, ...] = tuple(
            f for f, on in zip(self._given, enabled, strict=True) if on
        )
        self.dormant: tuple[Feature, ...] = tuple(
            f for f, on in zip(self._given, enabled, strict=True) if not on and f.rechecks_enabled
        )
        self._around = tuple(f for f in self.features if _overrides(f, "around_call"))
        self._supervision = tuple(f for f in self.features if _overrides(f, "on_supervisor_event"))
        self._collectors = tuple(f for f in self.features if _overrides(f, "collect_metadata"))
        self._starting = tuple(f for f in self.features if _overrides(f, "on_call_starting"))
        self._completed = tuple(f for f in self.features if _overrides(f, "on_call_completed"))
        self._failed = tuple(f for f in self.features if _overrides(f, "on_call_failed"))
        self._deferred = tuple(f for f in self.features if _overrides(f, "on_call_deferred"))
        self._event_hooks = tuple(f for f in self.features if _overrides(f, "on_call_event"))
        self.has_starting = bool(self._starting)
        """Some feature has an `on_call_starting`."""
        self.hooks_cannot_suspend = all(
            cannot_suspend(function_code(getattr(type(f), hook)))
            for hook, overriders in (
                ("on_call_starting", self._starting),
                ("on_call_completed", self._completed),
                ("on_call_failed", self._failed),
                ("on_call_deferred", self._deferred),
            )
            for f in overriders
        )
        """True when no feature's start or finish hook can suspend: their flows may be driven here
        (`runtime._flows.drive_now`)."""

    def wake(self) -> bool:
        """Re-read `enabled` of the dormant features; True if one turned on (the hooks changed)."""
        for f in self.dormant:  # a loop, not any(...): this runs before every call while dormant
            if f.enabled:
                self._resolve()
                return True
        return False

    @property
    def active(self) -> bool:
        """False when no feature overrides a call hook: the engine can skip the pipeline."""
        return bool(
            self._collectors
            or self._starting
            or self._completed
            or self._failed
            or self._deferred
            or self._around
            or self._event_hooks
        )

    @property
    def wraps_calls(self) -> bool:
        """True when some feature has an `around_call`."""
        return bool(self._around)

    @property
    def observes(self) -> bool:
        """True when some feature hears the calls' events (`on_call_event`)."""
        return bool(self._event_hooks)

    def around(self, ctx: CallContext) -> contextlib.AbstractContextManager[None]:
        """Every feature's `around_call` for `ctx`, as one context manager."""
        return _Around(self._around, ctx)

    def supervisor_event(self, tool_name: str, event: str, reason: str) -> None:
        for f in self._supervision:
            try:
                f.on_supervisor_event(tool_name, event, reason)
            except Exception:
                log.exception("feature %r failed in on_supervisor_event", f)

    # -- CallObserver ----------------------------------------------------------------

    def hears(self, ctx: CallContext) -> bool:
        for f in self._event_hooks:
            try:
                if f.hears_call_events(ctx):
                    return True
            except Exception:
                log.exception("feature %r failed in hears_call_events", f)
        return False

    def event(self, ctx: CallContext, name: str, attributes: dict[str, Any]) -> None:
        for f in self._event_hooks:
            try:
                f.on_call_event(ctx, name, attributes)
            except Exception:
                log.exception("feature %r failed in on_call_event for call %s", f, ctx.call_id)

    # -- the call hooks --------------------------------------------------------------

    def merge_metadata(
        self,
        call: ToolCall,
        tool: ToolBase[Any, Any] | None,
        caller: Mapping[str, Any] | None,
        principal: str | None = None,
    ) -> ToolCallMetadata:
        """features' metadata < the caller's < the runtime's own keys."""
        merged: dict[str, Any] = {}
        for f in self._collectors:
            try:
                collected = f.collect_metadata(call, tool)
            except Exception:
                log.exception("feature %r failed in collect_metadata for call %s", f, call.id)
                continue
            if collected:
                merged.update(collected)
        if caller:
            merged.update(caller)
        merged[CALL_ID_KEY] = call.id
        merged[TOOL_NAME_KEY] = call.name
        if principal is not None:
            merged[PRINCIPAL_KEY] = principal
        return ToolCallMetadata(merged)

    def starting(
        self, call: ToolCall, ctx: CallContext, hooks: Sequence[Feature] | None = None
    ) -> Flow[None]:
        """The `on_call_starting` hooks (of `hooks`; None: every feature's) of a call (before it is
        sent to its tool; unknown tools too), as one flow (`runtime._flows`): a hook that raises
        is logged, the next one runs. Every feature hears each call start once, as it hears it end
        once: if the caller leaves in a hook, the hooks after it run at once, each as far as it can
        without waiting (driven here: a hook that would wait is closed there, `CannotWait`); so do
        the hooks of a call whose caller left before it began, as it ends."""
        hooks = self._starting if hooks is None else hooks
        for i, f in enumerate(hooks):
            try:
                yield f.on_call_starting(call, ctx)
            except CannotWait:
                log.debug("feature %r's on_call_starting for left call %s did not wait", f, call.id)
            except Exception as exc:
                log.error("feature %r failed in on_call_starting for call %s", f, call.id, exc_info=exc)
            except BaseException:  # its caller left in this hook: the others hear it all the same
                drive_now(self.starting(call, ctx, hooks[i + 1 :]))
                raise

    def finishing(self, call: ToolCall, result: ToolResult, ctx: CallContext) -> Flow[None]:
        """The `on_call_completed`, `on_call_failed` or `on_call_deferred` hooks of a call that is
        answered, as one flow: a hook that raises is logged, the next one runs."""
        if isinstance(result, ToolSuccess):
            for f in self._completed:
                try:
                    yield f.on_call_completed(call, result, ctx)
                except Exception as exc:
                    log.error("feature %r failed in on_call_completed for call %s", f, call.id, exc_info=exc)
        elif isinstance(result, ToolPending):
            for f in self._deferred:
                try:
                    yield f.on_call_deferred(call, result, ctx)
                except Exception as exc:
                    log.error("feature %r failed in on_call_deferred for call %s", f, call.id, exc_info=exc)
        else:
            assert isinstance(result, ToolFailure)
            for f in self._failed:
                try:
                    yield f.on_call_failed(call, result, ctx)
                except Exception as exc:
                    log.error("feature %r failed in on_call_failed for call %s", f, call.id, exc_info=exc)
