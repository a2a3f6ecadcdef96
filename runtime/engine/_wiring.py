"""What serves one tool's calls: its interceptors in order, and its executors.

    placed in other processes   worker tasks that await the placement (Subprocess, Ray)
    sync, inline=True           run where admitted (Inline), else on a worker task
    sync                        the tool's kept threads (Threads); approval first: a worker task
    loop="asyncio"              tasks of the host asyncio loop (HostTasks)
    async, cannot suspend       run where admitted (Inline), unless bounded or approved
    async                       worker tasks; with loop="any" under an asyncio host, an asyncio
                                caller's call runs as a host task instead (`host_executor`)
    in_caller                   a trio caller's call may run in its own task (InCaller)

The mailbox's capacity is the tool's `max_concurrency`, else its placement's room (or the
runtime's `thread_limit` for a sync tool); unbounded for async tools.
"""

from __future__ import annotations

import math
from typing import Any

from ..exceptions import ToolDefinitionError
from ..tools import Placement, ToolBase
from ._executors import Inline, WorkerTasks, awaiting
from ._options import Settings
from ._outside import HostTasks, InCaller, Threads
from ._plan import ToolPlan
from ._policy import Policy
from ._resilience import BreakerPolicy, CachePolicy
from ._threads import KeptThreads

__all__ = ["Executors", "arm_policies", "policies_of"]


def policies_of(
    tool: ToolBase[Any, Any], runtime: tuple[Any, ...], own: tuple[Any, ...]
) -> tuple[Policy, ...]:
    """A tool's interceptors, outermost first: the runtime's that apply to it, then its own.

    Raises:
        ToolDefinitionError: one of its own is not a `runtime.Policy`.
    """
    for p in own:
        if not isinstance(p, Policy):
            raise ToolDefinitionError(
                f"tool {tool.name!r}: policies must be runtime.Policy instances, not {p!r}"
            )
    return (*(p for p in runtime if p.applies(tool)), *own)


def arm_policies(plan: ToolPlan, tool: ToolBase[Any, Any], settings: Settings) -> None:
    """Give `plan` its interceptors (the runtime's, the tool's, then the resilience options'),
    its breaker, its cache (when nothing steps in before it) and its retry."""
    runtime_options, options = settings.options, plan.options
    plan.policies = policies_of(tool, runtime_options.policies, options.policies)
    resilience = settings.resilience
    if resilience is not None:
        own = resilience.policies_for(tool, options)
        plan.policies = (*plan.policies, *own)
        plan.breaker = next((p.b for p in own if isinstance(p, BreakerPolicy)), None)
        first = plan.policies[0] if plan.policies else None
        if isinstance(first, CachePolicy) and resilience.local:  # nothing steps in before it
            plan.cached = first
        retry = options.retry or (runtime_options.retry if options.repeatable else None)
        if retry is not None:
            plan.retry = retry
            plan.retry_later = resilience.retry_later
    plan.suspends = any(p.suspends for p in plan.policies)


class Executors:
    """The executors of one tool (see the module docstring) and its mailbox's capacity.

    Attributes:
        executor: where its mailbox starts calls.
        capacity: how many of its calls run at once.
        workers: its worker tasks (always made: an Inline call that must wait goes there).
        threads: its kept threads (a sync tool), if any.
        host: its host-loop tasks, if any.
        placement: where it runs, if in other processes.
        needs_context: its calls need a CallContext.
    """

    __slots__ = (
        "capacity",
        "executor",
        "host",
        "needs_context",
        "placement",
        "plan",
        "threads",
        "workers",
    )

    def __init__(self, tool: ToolBase[Any, Any], settings: Settings, plan: ToolPlan) -> None:
        self.plan = plan
        options = plan.options
        placement = options.placement
        self.placement: Placement | None = (
            placement if placement is not None and not placement.in_process else None
        )
        asks = options.requires_approval is not False
        # a policy's is made when it asks; a stream's chunks reach its caller's handler with it
        self.needs_context = tool.takes_context or asks or tool.streams
        self.threads: Threads | None = None
        self.host: HostTasks | None = None
        limit = options.max_concurrency
        workers = self.workers = WorkerTasks(plan)
        executor: Any
        capacity: float = limit if limit is not None else math.inf
        if self.placement is not None:
            room = self.placement.capacity(tool)
            capacity = room if limit is None else min(room, limit)
            executor = self.workers = WorkerTasks(plan, awaiting(plan))
        elif not tool.is_async:
            capacity = limit or settings.options.thread_limit
            if not options.inline:
                plan.threads = KeptThreads(tool.name, settings.host_loop)
                self.threads = Threads(plan, plan.threads)
            if asks:
                executor = workers  # its approval is awaited first, in a worker task
            elif options.inline:
                executor = Inline(plan, lambda: self.workers)
            else:
                executor = self.threads
        elif options.loop == "asyncio" and not asks:
            executor = self.host = HostTasks(plan, settings.host_loop)
        elif plan.eager_code is not None and limit is None and not asks:
            executor = Inline(plan, lambda: self.workers)
        else:
            executor = workers
            if (
                options.loop == "any"
                and settings.host_loop is not None
                and limit is None
                and not asks
                and not tool.streams  # its chunks go through trio channels: it runs on trio
            ):
                plan.host_executor = self.host = HostTasks(plan, settings.host_loop)
        in_caller = tool.in_caller if self.placement is None else self.placement.in_caller
        if in_caller and (tool.is_async or self.placement is not None) and not asks and not tool.streams:
            body = awaiting(plan) if self.placement is not None else plan.coroutine
            stops = self.placement is not None and self.placement.stops_calls
            plan.in_caller = InCaller(plan, body, stops)
        self.executor = executor
        self.capacity = capacity

    def serve(self, nursery: Any) -> None:
        """An incarnation serves: its worker tasks start in `nursery` (None: it ended)."""
        self.workers.serve(nursery)
        if nursery is not None:
            if self.host is not None:
                self.host.serve()
            if self.plan.in_caller is not None:
                self.plan.in_caller.serve()

    def kill(self) -> None:
        """Calls that run outside the incarnation's nursery (threads, host tasks, callers' tasks)
        end with it."""
        if self.threads is not None:
            self.threads.kill()
        if self.host is not None:
            self.host.kill()
        if self.plan.in_caller is not None:
            self.plan.in_caller.kill()
